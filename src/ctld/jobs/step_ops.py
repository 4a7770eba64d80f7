"""srun and salloc inside ctld: steps in an allocation, and allocations' ends.

A step is recorded in its job (``Job.steps``), so every step change is a job change,
committed like any other. Layouts come from ``ctld/jobs/steps.py``.
"""

from __future__ import annotations

import signal as signal_mod

import structlog

from corral import hostlist
from corral.errors import CorralError, InvalidJobId, InvalidOption, JobStateConflict
from corral.identity import Identity
from corral.tasks import validate_gpu_bind
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.state import State
from ctld.jobs.endings import Endings
from ctld.jobs.intake import failure
from ctld.jobs.steps import holdings, plan_step
from ctld.model import jobstate as js
from ctld.model.authz import Policy
from ctld.model.nodes import NodeRecord
from ctld.model.validate import check_container, container_features

log = structlog.get_logger("ctld")


def find_step(job: pb.Job, step_id: int) -> pb.Step:
    for step in job.steps:
        if step.step_id == step_id:
            return step
    raise InvalidJobId(f"Invalid job id specified: step {job.job_id}.{step_id} does not exist")


class StepOps:
    def __init__(self, state: State, policy: Policy, endings: Endings, outbox: Outbox) -> None:
        self.state = state
        self.policy = policy
        self.endings = endings
        self.outbox = outbox
        self._nodes_done: dict[tuple[int, int], set[str]] = {}  # nodes whose part ended

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
            self._end_step(ch, job, step, req.exit_code, req.exit_signal, req.cancelled, req.reason)
            ch.transition(
                job,
                "updated",
                cause=f"rpc:CompleteStep user={who.user}",
                detail=f"step {step.step_id} {js.state_name(step.state)} "
                f"exit {step.exit_code}:{step.exit_signal}",
            )

    def part_ended(
        self, ch: Change, job: pb.Job, node: NodeRecord, upd: pb.JobStatusUpdate
    ) -> bool:
        """A node's tasks of a step are gone. Once every node of the step said so, the step
        has ended even if srun never reports (it was killed): it must not hold the job's
        CPUs and GPUs for ever."""
        try:
            step = find_step(job, upd.step_id)
        except CorralError:
            return False
        if step.state != js.RUNNING or node.name not in {n.node for n in step.nodes}:
            return False
        key = (job.job_id, step.step_id)
        done = self._nodes_done.setdefault(key, set())
        done.add(node.name)
        # the step's exit: the worst code its parts reported, the first signal
        code = max(step.exit_code, max(0, min(upd.exit_code, 255)))
        sig = step.exit_signal or max(0, min(upd.exit_signal, 64))
        if done < {n.node for n in step.nodes}:
            ch.step_part(job, step, exit_code=code, exit_signal=sig)
            return False
        del self._nodes_done[key]
        self._end_step(ch, job, step, code, sig, cancelled=False)
        ch.transition(
            job,
            "updated",
            cause=f"node:{node.name} report",
            detail=f"step {step.step_id} ended on every node",
        )
        return True

    def part_done(self, job: pb.Job, step: pb.Step, node: str) -> bool:
        """``node`` reported its part of the running ``step`` ended."""
        return node in self._nodes_done.get((job.job_id, step.step_id), ())

    def _end_step(
        self,
        ch: Change,
        job: pb.Job,
        step: pb.Step,
        exit_code: int,
        exit_signal: int,
        cancelled: bool,
        reason: str = "",
    ) -> None:
        if cancelled or job.state == js.COMPLETING:
            # a step the job's cancel killed is CANCELLED, however its tasks died (Slurm)
            final = js.CANCELLED
        elif max(0, min(exit_code, 255)) or max(0, min(exit_signal, 64)):
            final = js.FAILED
        else:
            final = js.COMPLETED
        ch.end_step(
            job,
            step,
            final,
            self.state.clock(),
            exit_code=exit_code,
            exit_signal=exit_signal,
            reason=_printable(reason, 512) if final == js.FAILED else "",
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
                self._end_step(ch, job, step, 0, sig, cancelled=True)
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
            detail=_printable(req.reason, 1024),  # its step's launch failure, if any
        )
        async with Change(st, self.outbox) as ch:
            if not self.endings.hold_end(ch, job, ended, cause):  # a node is suspect
                self.endings.exited(ch, job, ended, cause)

    async def enforce_allocation_limits(self) -> None:
        """salloc/srun allocations have no noded process to time them: ctld does."""
        st = self.state
        now = st.clock()
        async with Change(st, self.outbox) as ch:
            for job in st.on_node():
                if (
                    job.spec.allocation_only
                    and job.state == js.RUNNING
                    and job.time_limit_s > 0
                    and now >= job.start_time + job.time_limit_s
                ):
                    log.info("allocation reached its time limit", job_id=job.job_id)
                    self.endings.end_allocation(
                        ch, job, js.TIMEOUT, cause="ctld:time limit", exit_code=0, exit_signal=0
                    )


def _printable(text: str, limit: int) -> str:
    """A client's reason string, bounded, one line of printable characters."""
    return "".join(c if c.isprintable() else " " for c in text[:limit]).strip()
