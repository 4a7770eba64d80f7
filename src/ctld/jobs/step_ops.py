"""srun and salloc inside ctld: steps in an allocation, and allocations' ends.

A step is recorded in its job (``Job.steps``), so every step change is a job change,
committed like any other. Layouts come from ``ctld/jobs/steps.py``.
"""

from __future__ import annotations

import signal as signal_mod

import structlog

from corral import hostlist
from corral.errors import CorralError, InvalidOption, JobStateConflict
from corral.identity import Identity
from corral.tasks import validate_gpu_bind
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.state import State
from ctld.jobs.steps import holdings, plan_step
from ctld.model import jobstate as js
from ctld.model.authz import Policy
from ctld.model.validate import check_container, container_features
from ctld.ops.endings import Endings
from ctld.ops.outcomes import failure
from ctld.ops.step_ends import StepEnds, find_step, printable

log = structlog.get_logger("ctld")


class StepOps:
    def __init__(
        self, state: State, policy: Policy, endings: Endings, ends: StepEnds, outbox: Outbox
    ) -> None:
        self.state = state
        self.policy = policy
        self.endings = endings
        self.outbox = outbox
        self.ends = ends

    async def create_step(self, who: Identity, spec: pb.StepSpec) -> pb.Step:
        """srun inside an allocation: lay the step out on the job's nodes and record it."""
        st = self.state
        job = st.job(spec.job_id)
        self.policy.check_job(who, job, "run a step in")
        if job.state != js.RUNNING:
            raise JobStateConflict(
                f"Job {job.job_id} is not running (it is {js.state_name(job.state)})"
            )
        validate_gpu_bind(spec.gpu_bind)
        for what, value in (("step name", spec.name), ("submit line", spec.submit_line)):
            if len(value) > 65536:
                raise InvalidOption(f"the {what} is too long")
        check_container(spec.container, st.config)
        here = [st.nodes[a.node] for a in job.allocations if a.node in st.nodes]
        addresses = {n.name: n.address for n in here}
        streams = {n.name: n.stream_address for n in here}
        held: dict[str, tuple[int, set[int]]] = {}
        for other in job.steps:
            if other.state == js.RUNNING:
                for node, (cpus, gpus) in holdings(other).items():
                    have_cpus, have_gpus = held.get(node, (0, set()))
                    held[node] = (have_cpus + cpus, have_gpus | gpus)
        layout = plan_step(job, spec, addresses, held, streams)
        needs = container_features(spec.container)
        lacking = [n.node for n in layout if not st.nodes[n.node].features.issuperset(needs)]
        if lacking:  # an allocation made without --container-image, on nodes without it
            raise InvalidOption(
                f"Requested node configuration is not available: {hostlist.compress(lacking)} "
                f"of job {job.job_id} cannot run containers (no `{needs[0]}` feature: its "
                "[containers] runtime is missing)"
            )
        now = st.clock()
        step = pb.Step(
            job_id=job.job_id,
            step_id=job.next_step_id,
            name=spec.name[:256] or "step",
            start_time=now,
            nodelist=hostlist.compress([n.node for n in layout]),
            ntasks=sum(len(n.ranks) for n in layout),
            nodes=layout,
            spec=spec,
        )
        async with Change(st, wake=False) as ch:  # the allocation's resources stay as they are
            ch.start_step(
                job,
                step,
                cause=f"rpc:CreateStep user={who.user}",
                detail=f"step {step.step_id} started: {step.ntasks} task(s) on {step.nodelist}",
            )
        return step

    def step_for_node(self, job_id: int, step_id: int, node: str) -> tuple[pb.Job, pb.Step]:
        """What a node may run for srun: a running step of a running job, with tasks there."""
        job = self.state.job(job_id)
        if job.state != js.RUNNING:
            raise JobStateConflict(f"Job {job_id} is not running")
        step = find_step(job, step_id)
        if step.state != js.RUNNING:
            raise JobStateConflict(f"Step {job_id}.{step_id} is not running")
        if node not in {n.node for n in step.nodes}:
            raise JobStateConflict(f"Step {job_id}.{step_id} has no tasks on {node}")
        bare = pb.Job()
        bare.CopyFrom(job)
        bare.spec.ClearField("script")
        bare.spec.ClearField("environment")
        del bare.events[:]
        del bare.steps[:]
        return bare, step

    async def complete_step(self, who: Identity, req: pb.CompleteStepRequest) -> None:
        st = self.state
        job = st.job(req.job_id)
        self.policy.check_job(who, job, "complete a step of")
        step = find_step(job, req.step_id)
        if step.state != js.RUNNING:
            return  # a repeat, or ended with its job
        async with Change(st, wake=False) as ch:
            self.ends.end_step(
                ch, job, step, req.exit_code, req.exit_signal, req.cancelled, req.reason
            )
            ch.transition(
                job,
                "updated",
                cause=f"rpc:CompleteStep user={who.user}",
                detail=f"step {step.step_id} {js.state_name(step.state)} "
                f"exit {step.exit_code}:{step.exit_signal}",
            )

    async def cancel_steps(
        self, who: Identity, req: pb.CancelJobsRequest
    ) -> list[pb.CancelOutcome]:
        """scancel JOBID.STEP (with -s: signal the step's tasks only)."""
        st = self.state
        outcomes: list[pb.CancelOutcome] = []
        async with Change(st, self.outbox, wake=False) as ch:
            for ref in req.steps:
                self._cancel_step(ch, who, req, ref, outcomes)
        return outcomes

    def _cancel_step(
        self,
        ch: Change,
        who: Identity,
        req: pb.CancelJobsRequest,
        ref: pb.StepRef,
        outcomes: list[pb.CancelOutcome],
    ) -> None:
        st = self.state
        try:
            job = st.job(ref.job_id)
            self.policy.check_job(who, job, "signal" if req.signal else "cancel")
            step = find_step(job, ref.step_id)
            if step.state != js.RUNNING or job.state not in js.ON_NODE:
                raise JobStateConflict()
            sig = req.signal or int(signal_mod.SIGKILL)
            if not req.signal:  # scancel N.S: the step ends CANCELLED whatever srun says
                self.ends.end_step(ch, job, step, 0, sig, cancelled=True)
            for sn in step.nodes:
                node = st.nodes.get(sn.node)
                if node is not None:
                    ch.signal(
                        node,
                        pb.SignalJobRequest(
                            job_id=job.job_id,
                            signal=sig,
                            step_id=step.step_id,
                            run=job.restart_count,
                        ),
                    )
            ch.transition(
                job,
                "signalled",
                cause=f"rpc:CancelJobs user={who.user}",
                detail=f"step {step.step_id} signal {sig}",
            )
            outcomes.append(pb.CancelOutcome(job_id=job.job_id, ok=True))
        except CorralError as exc:
            outcomes.append(failure(ref.job_id, exc))

    async def complete_job(self, who: Identity, req: pb.CompleteJobRequest) -> None:
        """salloc or srun releases the allocation it made."""
        st = self.state
        job = st.job(req.job_id)
        self.policy.check_job(who, job, "complete")
        if not job.spec.allocation_only:
            raise JobStateConflict(f"Job {job.job_id} is a batch job: it ends when its script does")
        if job.state != js.RUNNING:
            return  # already ended (cancelled, timed out, or a repeat)
        cause = f"rpc:CompleteJob user={who.user}"
        ended = pb.JobStatusUpdate(
            job_id=job.job_id,
            kind=pb.JobStatusUpdate.KIND_EXITED,
            time=st.clock(),
            exit_code=req.exit_code,
            exit_signal=req.exit_signal,
            restart_count=job.restart_count,
            detail=printable(req.reason, 1024),  # its step's launch failure, if any
        )
        async with Change(st, self.outbox) as ch:
            if not self.endings.hold_end(ch, job, ended, cause):  # a node is suspect
                self.endings.exited(ch, job, ended, cause)
