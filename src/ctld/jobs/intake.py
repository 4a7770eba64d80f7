"""What clients ask of jobs: submit, cancel and signal, hold and release, update, top.

Each request checks who may do it (``Policy``), changes the jobs in memory, commits
them, and only then wakes the scheduler and sends signals.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Awaitable, Callable, Iterable

import structlog

from corral.checkpoints import new_unique_id
from corral.errors import (
    CorralError,
    DependencyProblem,
    InvalidJobId,
    InvalidOption,
    InvalidRequest,
    JobStateConflict,
    PermissionDenied,
)
from corral.identity import Identity
from corral.jobsyntax import Dependency
from corral.slurmfmt import UNLIMITED
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.selection import select
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.model import records
from ctld.model.authz import Policy
from ctld.model.priorities import apply_factors
from ctld.model.validate import (
    Accepted,
    check_job_name,
    check_mail,
    totals,
    user_groups,
    validate_spec,
)
from ctld.ops.endings import Endings, requeue_when_gone
from ctld.ops.outcomes import failure

log = structlog.get_logger("ctld")


class Intake:
    def __init__(
        self,
        state: State,
        policy: Policy,
        endings: Endings,
        outbox: Outbox,
        *,
        quick_ready: Callable[[], bool] = lambda: False,
        start_on_submit: Callable[[list[pb.Job]], Awaitable[None]] | None = None,
    ) -> None:
        self.state = state
        self.policy = policy
        self.endings = endings
        self.outbox = outbox
        # starts at submit (the Scheduler's, given by the Cluster): whether a new job may
        # be decided now, without a pass, and that decision
        self.quick_ready = quick_ready
        self.start_on_submit = start_on_submit

    def trial_job(self, who: Identity, spec: pb.JobSpec) -> pb.Job:
        """The job ``spec`` would be, checked as submit checks it, but neither stored
        nor queued (sbatch --test-only); it carries the id it would get."""
        st = self.state
        accepted, qos = self._accept(who, spec)
        now = st.clock()
        job = self._new_job(who, spec, accepted, qos, st.next_job_id, now)
        apply_factors(job, st.acct.priorities.factors(job, now))
        return job

    def _accept(self, who: Identity, spec: pb.JobSpec) -> tuple[Accepted, str]:
        """What submit checks before anything is made: the spec, QOS, dependency and
        reservation access. Returns the accepted shape and the QOS."""
        st = self.state
        acc = st.acct.accounting
        # a job without -A is charged to the user's DefaultAccount (before the partition
        # checks, which read the account)
        spec.account = acc.submit_account(who.user, spec.account)
        accepted = validate_spec(
            spec, st.config, st.capacity(), lambda: user_groups(who.user, who.gid)
        )
        qos = acc.submit_qos(who.user, spec.account, spec.qos)
        wall = acc.max_wall(spec.account, who.user, qos)
        limit = accepted.time_limit_s
        if wall >= 0 and not spec.time_limit_s and (limit == UNLIMITED or limit > wall):
            # no -t: the partition's default, cut to MaxWall (as Slurm does)
            accepted = dataclasses.replace(accepted, time_limit_s=wall)
        shape = accepted.shape
        acc.check_submit(
            account=spec.account,
            user=who.user,
            qos=qos,
            time_limit_s=accepted.time_limit_s,
            tres={
                "cpu": shape.nodes * shape.cpus_per_node,
                "mem": shape.nodes * shape.mem_per_node_mb,
                "gres/gpu": shape.nodes * shape.gpus_per_node,
            },
            new_jobs=accepted.array.count if accepted.array else 1,
            active=st.index.active_counts,
        )
        if accepted.dependencies:
            self._check_dependency(accepted.dependencies[0])
        if spec.reservation:
            st.reservations.check_job_access(spec.reservation, who.user, spec.account)
        return accepted, qos

    def _new_job(
        self,
        who: Identity,
        spec: pb.JobSpec,
        accepted: Accepted,
        qos: str,
        job_id: int,
        now: float,
    ) -> pb.Job:
        job = pb.Job(
            job_id=job_id,
            spec=spec,
            user=who.user,
            uid=who.uid,
            gid=who.gid,
            partition=accepted.partitions[0],
            account=spec.account,
            time_limit_s=accepted.time_limit_s,
            submit_time=now,
            eligible_time=max(now, spec.begin_time),
            cluster=self.state.config.cluster_name,
            qos=qos,
            unique_id=new_unique_id(),  # its checkpoint directory's name (corral/checkpoints.py)
        )
        job.spec.partitions[:] = accepted.partitions
        for name, value in totals(job.spec, accepted.shape).items():
            setattr(job, name, value)  # a new job, not yet in memory: no change to commit
        return job

    async def submit(self, who: Identity, spec: pb.JobSpec) -> pb.Job:
        st = self.state
        accepted, qos = self._accept(who, spec)
        tasks: tuple[int | None, ...] = (None,)
        if accepted.array:
            tasks = accepted.array.task_ids
            limit = st.config.scheduler.max_array_size
            if tasks[-1] >= limit:
                raise InvalidOption(
                    f"Invalid job array specification: task ids must be below MaxArraySize "
                    f"({limit})"
                )
        now = st.clock()
        first_id = st.next_job_id
        st.next_job_id += len(tasks)  # an array's tasks get consecutive ids
        cause = f"rpc:SubmitJob user={who.user}"
        made: list[pb.Job] = []
        # the record in memory goes without its script and environment (ctld/model/records.py)
        spec, held = records.split(spec)
        # decided at submit (scheduling.py, start_on_submit) when only submits came
        # since the last pass: that wakes a pass only for what it does not start
        quick = not spec.hold and self.start_on_submit is not None and self.quick_ready()
        ch = Change(st, wake=not spec.hold and not quick, arrival=True)
        for offset, task in enumerate(tasks):
            job = self._new_job(who, spec, accepted, qos, first_id + offset, now)
            if not made:
                st.acct.priorities.with_users([(job.account, job.user)])
            apply_factors(job, st.acct.priorities.factors(job, now))
            task_ids: js.Fields = {}
            if task is not None:
                task_ids = {"array_job_id": first_id, "array_task_id": task}
            ch.submit(job, cause=cause, now=now, **task_ids)
            if spec.hold:  # the commit step settles its reason (JobHeldUser)
                ch.transition(
                    job,
                    "held",
                    cause=cause,
                    now=now,
                    detail="sbatch --hold",
                    hold=pb.HOLD_USER,
                    priority=0,
                )
            made.append(job)
            st.index.held_spec[job.job_id] = held
        try:
            await ch.commit()  # durable before it is answered; a held job needs no pass
        except BaseException:
            for job in made:
                st.index.held_spec.pop(job.job_id, None)
            raise
        if quick and self.start_on_submit is not None:
            await self.start_on_submit(made)
        log.info(
            "job submitted",
            job_id=first_id,
            user=who.user,
            partition=made[0].partition,
            tasks=len(made) if spec.array else None,
        )
        return made[0]

    def _check_dependency(self, conditions: tuple[Dependency, ...]) -> None:
        for job_id in (ref.job_id for d in conditions for ref in d.refs):
            if job_id >= self.state.next_job_id or self.state.lookup(job_id) is None:
                raise DependencyProblem(f"Job dependency problem: job {job_id} does not exist")

    async def cancel(self, who: Identity, req: pb.CancelJobsRequest) -> list[pb.CancelOutcome]:
        st = self.state
        flt = req.filter
        if not (
            flt.job_ids
            or flt.array_tasks
            or flt.users
            or flt.names
            or flt.states
            or flt.partitions
            or flt.accounts
        ):
            raise InvalidRequest("No job identification provided")
        outcomes: list[pb.CancelOutcome] = []
        now = st.clock()
        cause = f"rpc:CancelJobs user={who.user}"
        targets = select(st, flt, strict=False)
        if flt.job_ids:
            # a whole array named by its id: its tasks that already ended are no error
            whole = set(flt.job_ids)
            targets = [
                j
                for j in targets
                if not (j.array_job_id in whole and j.state in js.FINISHED and flt.job_ids)
            ]
            for missing in [
                i for i in flt.job_ids if i not in st.jobs and i not in st.index.array_tasks
            ]:
                outcomes.append(failure(missing, InvalidJobId()))
        async with Change(st, self.outbox) as ch:
            for job in targets:
                try:
                    self.policy.check_job(who, job, "signal" if req.signal else "cancel")
                    pending_kill = req.signal == signal.SIGKILL and job.state == js.PENDING
                    if req.signal and not pending_kill:  # Slurm: SIGKILL cancels a pending job
                        self._signal_job(ch, job, req.signal, req.batch_only, cause, now, req.full)
                    else:
                        self.endings.cancel(ch, job, cause, now, cancelled_by_uid=who.uid)
                    outcomes.append(pb.CancelOutcome(job_id=job.job_id, ok=True))
                except CorralError as exc:
                    outcomes.append(failure(job.job_id, exc))
        return outcomes

    def _signal_job(
        self,
        ch: Change,
        job: pb.Job,
        sig: int,
        batch_only: bool,
        cause: str,
        now: float,
        full: bool,
    ) -> None:
        if not 0 < sig < 65:
            raise InvalidRequest(f"Invalid signal {sig}")
        if job.state == js.PENDING:
            raise JobStateConflict("Job is pending execution")
        if job.state not in js.ON_NODE:
            raise JobStateConflict()
        ch.transition(job, "signalled", cause=cause, now=now, detail=f"signal {sig}")
        if not batch_only:  # step tasks on the job's other nodes get it too
            for alloc in job.allocations:
                node = self.state.nodes.get(alloc.node)
                if node is not None and alloc.node != job.batch_host:
                    ch.signal(
                        node,
                        pb.SignalJobRequest(job_id=job.job_id, signal=sig, run=job.restart_count),
                    )
        ch.signal(
            self.outbox.batch_node(job),
            pb.SignalJobRequest(
                job_id=job.job_id,
                signal=sig,
                batch_only=batch_only,
                full=full,
                run=job.restart_count,
            ),
        )

    async def update_hold(self, who: Identity, req: pb.UpdateJobRequest) -> list[pb.CancelOutcome]:
        st = self.state
        outcomes: list[pb.CancelOutcome] = []
        now = st.clock()
        cause = f"rpc:UpdateJob user={who.user}"
        async with Change(st, self.outbox) as ch:
            for job_id in self._update_targets(req.job_ids):
                try:
                    job = st.job(job_id)
                    self.policy.check_job(who, job, "update")
                    if req.action == pb.JOB_UPDATE_TOP:
                        self._top(ch, job, cause, now)
                    elif req.action == pb.JOB_UPDATE_FIELDS:
                        self._update_fields(ch, who, job, req, cause, now)
                    elif req.action in (pb.JOB_UPDATE_REQUEUE, pb.JOB_UPDATE_REQUEUE_HOLD):
                        self._requeue_request(ch, who, job, req.action, cause, now)
                    else:
                        self._apply_hold(ch, who, job, req.action, cause, now)
                    outcomes.append(pb.CancelOutcome(job_id=job_id, ok=True))
                except CorralError as exc:
                    outcomes.append(failure(job_id, exc))
        return outcomes

    def _update_targets(self, job_ids: Iterable[int]) -> list[int]:
        """The jobs an update names: an array's id names each of its tasks that has not
        ended (Slurm's ``scontrol release N`` of an array; ended tasks are no error),
        any other id its job."""
        st = self.state
        out: list[int] = []
        for job_id in job_ids:
            tasks = st.index.array_tasks.get(job_id)
            if not tasks:
                out.append(job_id)
                continue
            jobs = (st.jobs.get(t) for t in sorted(tasks))
            live = [j.job_id for j in jobs if j is not None and j.state not in js.FINISHED]
            out.extend(live or [job_id])
        return out

    def _requeue_request(
        self, ch: Change, who: Identity, job: pb.Job, action: int, cause: str, now: float
    ) -> None:
        """scontrol requeue[hold]: stop the job everywhere; its exit report requeues it."""
        if job.state == js.PENDING:
            raise JobStateConflict("Job is pending execution")
        if job.state != js.RUNNING or job.spec.allocation_only:
            raise JobStateConflict("Job is not running: only a running batch job is requeued")
        if job.spec.no_requeue:
            raise JobStateConflict("Requested operation is presently disabled (--no-requeue)")
        hold = pb.HOLD_NONE
        if action == pb.JOB_UPDATE_REQUEUE_HOLD:
            hold = pb.HOLD_ADMIN if self.policy.is_operator(who) else pb.HOLD_USER
        ch.update(job, cause=cause, now=now, detail="requeue requested", **requeue_when_gone(hold))
        ch.signal_all(self.outbox.terminate_elsewhere(job))
        ch.signal(*self.outbox.terminate_batch(job))

    def _update_fields(
        self,
        ch: Change,
        who: Identity,
        job: pb.Job,
        req: pb.UpdateJobRequest,
        cause: str,
        now: float,
    ) -> None:
        """scontrol update job: what a pending job asks for; a running job's limit."""
        st = self.state
        operator = self.policy.is_operator(who)
        changes: list[str] = []
        spec = pb.JobSpec()
        spec.CopyFrom(job.spec)
        if job.state in js.FINISHED:
            raise JobStateConflict("Job has already finished")
        pending_only = req.partitions or req.HasField("num_nodes")
        if pending_only and job.state != js.PENDING:
            raise JobStateConflict("Job is no longer pending execution")
        if req.HasField("time_limit_s"):
            # 0 is no limit (as -t 0), like INFINITE/UNLIMITED (-1): a raise of any limit
            limit = UNLIMITED if req.time_limit_s == 0 else req.time_limit_s
            if limit < UNLIMITED:
                raise InvalidRequest(f"Invalid TimeLimit value: {req.time_limit_s}")
            had = job.time_limit_s
            longer = (limit == UNLIMITED and had != UNLIMITED) or 0 <= had < limit
            if longer and not operator:
                raise PermissionDenied(
                    "Access/permission denied: only an operator may extend a time limit"
                )
            spec.time_limit_s = limit
            changes.append(f"TimeLimit={limit}")
        if req.partitions:
            spec.partitions[:] = list(req.partitions)
            changes.append(f"Partition={','.join(req.partitions)}")
        if req.HasField("num_nodes"):
            if req.num_nodes < 1:
                raise InvalidRequest("Invalid node count specified")
            spec.nodes_min = spec.nodes_max = req.num_nodes
            changes.append(f"NumNodes={req.num_nodes}")
        if req.HasField("nice"):
            if req.nice < 0 and not operator:
                raise PermissionDenied(
                    "Access/permission denied: a negative nice needs an operator"
                )
            if abs(req.nice) > 2147483645:
                raise InvalidRequest("Invalid nice value")
            spec.nice = req.nice
            changes.append(f"Nice={req.nice}")
        if req.HasField("name"):
            if not req.name:
                raise InvalidRequest("Invalid job name")
            check_job_name(req.name)
            spec.name = req.name
            changes.append(f"JobName={req.name}")
        if req.HasField("mail_user"):
            spec.mail_user = req.mail_user
            changes.append(f"MailUser={req.mail_user}")
        if req.HasField("mail_type"):
            spec.mail_type = req.mail_type
            changes.append(f"MailType={req.mail_type}")
        if req.HasField("mail_user") or req.HasField("mail_type"):
            check_mail(spec, st.config)  # as submit checks it, for a running job too
        if req.HasField("priority"):
            if not operator and req.priority > job.priority:
                raise PermissionDenied(
                    "Access/permission denied: only an operator may raise a priority"
                )
            changes.append(f"Priority={req.priority}")
        if not changes:
            raise InvalidRequest("No changes specified")
        if job.state == js.PENDING:
            # checked whole (the script's first line too), kept compact (ctld/model/records.py)
            whole = records.whole_spec(spec, st.index.held_spec.get(job.job_id))
            accepted = validate_spec(
                whole, st.config, st.capacity(), lambda: user_groups(job.user, job.gid)
            )
            spec.CopyFrom(records.split(whole)[0] if job.job_id in st.index.held_spec else whole)
        fields: js.Fields = {"spec": spec}
        if job.state == js.PENDING:
            spec.partitions[:] = accepted.partitions
            fields["partition"] = accepted.partitions[0]
            fields["time_limit_s"] = accepted.time_limit_s
            fields.update(totals(spec, accepted.shape))
        elif req.HasField("time_limit_s"):
            fields["time_limit_s"] = spec.time_limit_s
        if req.HasField("priority"):
            fields["admin_priority"] = req.priority
        ch.update(job, cause=cause, now=now, detail=" ".join(changes), **fields)
        if job.state == js.PENDING:
            st.index.requests.pop(job.job_id, None)
            if not job.hold:
                apply_factors(job, st.acct.priorities.factors(job, now))

    def _top(self, ch: Change, job: pb.Job, cause: str, now: float) -> None:
        """Put ``job`` first among its owner's pending jobs with the same partition,
        account and QOS, trading priorities within that set so nobody else loses.
        """
        if job.state != js.PENDING:
            raise JobStateConflict("Job is no longer pending execution")
        peers = [
            j
            for j in self.state.jobs.values()
            if j.state == js.PENDING
            and (not j.hold or j is job)
            and (j.uid, j.partition, j.account, j.qos)
            == (job.uid, job.partition, job.account, job.qos)
        ]
        ranked = sorted(peers, key=lambda j: (-j.priority, j.submit_time, j.job_id))
        values = [j.priority for j in ranked]
        ranked.remove(job)
        for peer, value in zip([job, *ranked], values, strict=True):
            if peer.priority != value or peer is job:
                # its request is copied at that priority, not rebuilt
                ch.update(
                    peer, cause=cause, now=now, detail="top", admin_priority=value, priority=value
                )

    def _apply_hold(
        self, ch: Change, who: Identity, job: pb.Job, action: int, cause: str, now: float
    ) -> None:
        if job.state in js.FINISHED:
            raise JobStateConflict("Job has already finished")
        if job.state != js.PENDING:
            return  # Slurm accepts holding a running job: it only matters if it is requeued
        if action in (pb.JOB_UPDATE_HOLD, pb.JOB_UPDATE_USER_HOLD):
            admin = action == pb.JOB_UPDATE_HOLD and self.policy.is_operator(who)
            hold = pb.HOLD_ADMIN if admin else pb.HOLD_USER
            ch.transition(job, "held", cause=cause, now=now, hold=hold, priority=0)
        elif action == pb.JOB_UPDATE_RELEASE:
            if job.hold == pb.HOLD_ADMIN:
                self.policy.check_operator(who, "releasing an admin hold")
            ch.transition(job, "released", cause=cause, now=now, hold=pb.HOLD_NONE)
            apply_factors(job, self.state.acct.priorities.factors(job, now))
        else:
            raise InvalidRequest("unknown job update action")
