"""The controller's state and every operation on it.

The in-memory state is authoritative while ctld runs, and every change is committed
to the store before it is acknowledged or acted on (write-ahead): a submit answers
after its row is durable, a job is dispatched after its RUNNING row is durable.
Job states change only through ``jobstate.transition``. All methods run on the one
asyncio loop, so there is no locking; the only concurrency is the store's writer
thread, which commits in queue order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import pwd
import signal as signal_mod
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

import structlog

from corral import hostlist
from corral.config import ClusterConfig
from corral.errors import (
    ControllerUnavailable,
    CorralError,
    DependencyProblem,
    InvalidJobId,
    InvalidNodeName,
    InvalidOption,
    InvalidQos,
    InvalidRequest,
    InvalidTransition,
    JobStateConflict,
    PermissionDenied,
)
from corral.identity import Identity
from corral.jobsyntax import parse_array
from corral.patterns import batch_output_paths
from corral.tasks import validate_gpu_bind
from corral.wire import corral_pb2 as pb
from ctld import deps, failures
from ctld import jobstate as js
from ctld.auth import Policy
from ctld.explain import explain as explain_job
from ctld.explain import history_ratios
from ctld.nodes import NodeRecord
from ctld.priorities import Priorities, apply_factors
from ctld.reservations import Reservations
from ctld.sched import (
    INFINITY,
    JobRequest,
    NodeView,
    PartitionView,
    Placement,
    Plan,
    RunningView,
    Settings,
    Snapshot,
    job_shape,
    schedule,
)
from ctld.steps import holdings, plan_step
from ctld.store import NodeDrain, Op, Store, insert_job, update_job
from ctld.usage import UsageLedger
from ctld.validate import NodeCapacity, request_from_spec, user_groups, validate_spec

Update = pb.JobStatusUpdate
END_PROLOG_FAILED = Update.END_PROLOG_FAILED
log = structlog.get_logger("ctld")

Clock = Callable[[], float]
MIN_PASS_GAP_S = 0.005  # at most ~200 passes/s however many events arrive


class Dispatcher(Protocol):
    """How ctld reaches nodes (ctld/dispatch.py over gRPC; tests may record instead)."""

    async def launch(self, node: NodeRecord, request: pb.LaunchJobRequest) -> None: ...

    async def signal(self, node: NodeRecord, request: pb.SignalJobRequest) -> bool: ...


class Cluster:
    def __init__(
        self,
        config: ClusterConfig,
        store: Store,
        dispatcher: Dispatcher,
        *,
        clock: Clock,
    ) -> None:
        self.config = config
        self.store = store
        self.dispatcher = dispatcher
        self.clock = clock
        self.policy = Policy(config.controller.operators)
        self.jobs: dict[int, pb.Job] = {}
        self.nodes: dict[str, NodeRecord] = {}
        for entry in config.nodes:
            for name in entry.names:
                parts = [p.name for p in config.partitions if name in p.nodes]
                self.nodes[name] = NodeRecord(name=name, config=entry, partitions=parts)
        self.next_job_id = 1
        self.version = 0  # bumped on every change a scheduling pass depends on
        self.passes = 0
        self.start_time = clock()
        self._saved_events: dict[int, int] = {}
        # job id -> revision, bumped on every change (persisted or not) to the job
        self.revisions: dict[int, int] = {}
        # pending job ids in queue order, and their scheduler requests (built once)
        self._pending: dict[int, None] = {}
        self._requests: dict[int, JobRequest] = {}
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._launching: set[int] = set()  # jobs whose LaunchJob RPC is in flight
        # running jobs the idle-GPU policy ended, to requeue when the node reports them gone
        self._requeue_on_exit: set[int] = set()
        self._hold_on_requeue: dict[int, int] = {}  # scontrol requeuehold: job -> hold kind
        self._pending_signals: list[tuple[NodeRecord, pb.SignalJobRequest]] = []
        self._step_nodes_done: dict[tuple[int, int], set[str]] = {}  # nodes whose part ended
        self.ledger = UsageLedger(config.priority)
        self.priorities = Priorities(config, self.ledger)
        self.settings = Settings(
            backfill=config.scheduler.backfill,
            reserve_depth=config.scheduler.reserve_depth,
            forecast_depth=config.scheduler.forecast_depth,
            placement=config.scheduler.placement,
            qos_max_jobs_per_user=tuple(
                (q.name, q.max_jobs_per_user) for q in config.qos if q.max_jobs_per_user
            ),
        )
        self.last_pass_s = 0.0
        self.last_considered = 0
        self.reservations = Reservations(config, clock)
        self.starts_total = 0
        self._gone: dict[int, pb.Job | None] = {}  # purged jobs a dependency asked about
        # (elapsed, time limit) of recently finished jobs: how far jobs run into limits
        self.history: collections.deque[tuple[float, float]] = collections.deque(maxlen=2000)

    # ------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Rebuild the state from the store (the truth) after a start or restart."""
        now = self.clock()
        self.next_job_id = self.store.next_job_id()
        loaded = self.store.load_jobs(
            active_states=js.ACTIVE, finished_after=now - self.config.controller.min_job_age_s
        )
        for job in loaded:
            self.jobs[job.job_id] = job
            self._saved_events[job.job_id] = len(job.events)
            if job.state == js.PENDING:
                self._enqueue(job)
            if job.state in js.ON_NODE:
                for alloc in job.allocations:
                    node = self.nodes.get(alloc.node)
                    if node is not None:
                        node.allocate(job.job_id, alloc.cpus, alloc.mem_mb, list(alloc.gpu_indices))
        self.reservations.load(self.store.load_reservations())
        for drain in self.store.load_drains():
            if (node := self.nodes.get(drain.name)) is not None:
                node.drain = True
                node.set_reason(
                    drain.reason,
                    drain.reason_time,
                    user=self.user_name(drain.reason_uid),
                    uid=drain.reason_uid,
                )
        horizon = now - 10 * self.config.priority.decay_half_life_s  # older adds < 0.1%
        for job in sorted(self.store.finished_since(horizon), key=lambda j: j.end_time):
            self.ledger.add_finished(job)
            self._remember_run(job)
        self.priorities.with_users((j.account, j.user) for j in loaded)
        log.info("state loaded", jobs=len(loaded), next_job_id=self.next_job_id)
        self.wake()

    def _enqueue(self, job: pb.Job) -> None:
        """Put a PENDING job in the queue, ordered by submit time (requeues keep their age)."""
        self._requests.pop(job.job_id, None)
        last = self.jobs.get(next(reversed(self._pending))) if self._pending else None
        if last is not None and job.submit_time < last.submit_time:
            queued = [i for i in self._pending if i in self.jobs]
            order = sorted([*queued, job.job_id], key=lambda i: (self.jobs[i].submit_time, i))
            self._pending = dict.fromkeys(order)
        else:
            self._pending[job.job_id] = None

    def wake(self) -> None:
        """Ask for a scheduling pass; many wake-ups before it runs coalesce into one."""
        self.version += 1
        self._wake.set()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run_scheduler(self) -> None:
        interval = self.config.controller.sched_interval_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=interval)
            self._wake.clear()
            try:
                await self.schedule_pass()
            except Exception:  # a failed pass must not stop scheduling
                log.exception("scheduling pass failed")
            # a burst of events (submits, exits) then shares the next pass
            await asyncio.sleep(MIN_PASS_GAP_S)

    async def run_heartbeat_monitor(self) -> None:
        hb = self.config.heartbeat
        while True:
            await asyncio.sleep(min(hb.interval_s / 2, hb.timeout_s / 4))
            await self.enforce_allocation_limits()
            await self.check_heartbeats()

    async def check_heartbeats(self) -> None:
        """Late nodes get NOT_RESPONDING; silent ones past the timeout go DOWN (jobs requeued).

        A node not heard of since ctld started is timed from the start, so a node that
        died while ctld was away goes DOWN too.
        """
        hb = self.config.heartbeat
        now = self.clock()
        for node in self.nodes.values():
            if node.down:
                continue
            state = failures.liveness(node, now, hb, self.start_time)
            if state is failures.Liveness.DEAD:
                log.warning(
                    "node not responding: DOWN",
                    node=node.name,
                    silent_s=round(now - (node.last_heartbeat or self.start_time), 1),
                )
                await self.node_down(node, failures.NOT_RESPONDING, cause="monitor:heartbeat")
            elif state is failures.Liveness.LATE and not node.late:
                node.late = True
                log.warning("node heartbeat late", node=node.name)
                self.wake()

    async def node_down(self, node: NodeRecord, reason: str, *, cause: str) -> None:
        """Declare ``node`` DOWN: every job on it is stopped elsewhere, then requeued or failed."""
        now = self.clock()
        node.not_responding(now, reason)
        ops: list[Op] = []
        for job in [j for j in self.jobs.values() if failures.on_node(j, node.name)]:
            try:
                self._node_failed(job, node, f"node {node.name} DOWN: {reason}", cause)
            except InvalidTransition as exc:
                log.error("job on a DOWN node not settled", job_id=job.job_id, error=str(exc))
                continue
            ops.append(self._save(job))
        if ops:
            await self.store.commit(*ops)
        self.wake()
        self._flush_signals()

    def _node_failed(self, job: pb.Job, node: NodeRecord, why: str, cause: str) -> None:
        """The job lost its copy on ``node``: kill it on its other nodes, requeue or NODE_FAIL."""
        self._requeue_on_exit.discard(job.job_id)
        if job.state == js.COMPLETING:  # cancelled before: nothing more to wait for
            self._end_allocation(job, js.CANCELLED, cause=cause, exit_code=0, exit_signal=9)
            return
        if not failures.may_requeue(job, self.config.controller.job_requeue):
            log.warning("job ended by a node failure", job_id=job.job_id, node=node.name)
            self._end_allocation(job, js.NODE_FAIL, cause=cause, exit_code=0, exit_signal=9)
            job.reason = "NodeDown"
            return
        kill = self._terminate_request(job)
        kill.kill_wait_s = 0.0  # the job restarts elsewhere: its other parts go at once
        for alloc in job.allocations:
            other = self.nodes.get(alloc.node)
            if other is not None and other is not node:
                self._pending_signals.append((other, kill))
        self._end_running_steps(job, js.NODE_FAIL)
        if node.name not in job.failed_nodes:
            job.failed_nodes.append(node.name)
        log.warning("job requeued after a node failure", job_id=job.job_id, node=node.name)
        self._requeue(job, cause=cause, detail=why, run_state=js.NODE_FAIL)

    def purge_finished(self) -> None:
        """Forget finished jobs older than min_job_age (they stay in the store for sacct)."""
        horizon = self.clock() - self.config.controller.min_job_age_s
        for job_id in [
            j.job_id for j in self.jobs.values() if j.state in js.FINISHED and j.end_time < horizon
        ]:
            del self.jobs[job_id]
            self._saved_events.pop(job_id, None)
            self.revisions.pop(job_id, None)
        expired = self.reservations.expired()
        if expired is not None:
            self._spawn(self._commit_and_wake(expired))

    async def _commit_and_wake(self, *ops: Op) -> None:
        await self.store.commit(*ops)
        self.wake()

    # ------------------------------------------------------------ reservations

    async def create_reservation(self, who: Identity, spec: pb.Reservation) -> pb.Reservation:
        self.policy.check_operator(who, "creating a reservation")
        resv, op = self.reservations.create(who, spec, self._pick_nodes)
        await self._commit_and_wake(op)
        log.info("reservation created", reservation=resv.name, nodes=resv.nodes, user=who.user)
        return resv

    async def update_reservation(self, who: Identity, req: pb.UpdateReservationRequest) -> None:
        self.policy.check_operator(who, "updating a reservation")
        await self._commit_and_wake(self.reservations.update(req))

    async def delete_reservation(self, who: Identity, name: str) -> None:
        self.policy.check_operator(who, "deleting a reservation")
        await self._commit_and_wake(self.reservations.delete(name))

    def reservation_list(self, names: Iterable[str]) -> list[pb.Reservation]:
        wanted = set(names)
        found = [
            r for n, r in sorted(self.reservations.by_name.items()) if not wanted or n in wanted
        ]
        if wanted and not found:
            raise InvalidRequest(f"Reservation {sorted(wanted)[0]} not found")
        return found

    def _pick_nodes(self, count: int, partition: str, reserved: set[str]) -> list[str]:
        part = next((p for p in self.config.partitions if p.name == partition), None)
        if partition and part is None:
            raise InvalidRequest(f"Invalid partition name specified: {partition}")
        part = part or self.config.default_partition
        names = list(part.nodes) if part else list(self.nodes)
        usable = [n for n in names if self.nodes[n].schedulable and n not in reserved]
        usable.sort(key=lambda n: (bool(self.nodes[n].job_ids), n))  # idle ones first
        if len(usable) < count:
            raise InvalidRequest(f"Requested node configuration is not available: {count} nodes")
        return usable[:count]

    # ------------------------------------------------------------ persistence

    def touch(self, job: pb.Job) -> None:
        """Note that ``job`` changed (readers cache what they derive from it by revision)."""
        self.revisions[job.job_id] = self.revisions.get(job.job_id, 0) + 1

    def _save(self, job: pb.Job, *, new: bool = False) -> Op:
        self.touch(job)
        start = self._saved_events.get(job.job_id, 0)
        op = insert_job(job) if new else update_job(job, job.events[start:])
        self._saved_events[job.job_id] = len(job.events)
        return op

    # ------------------------------------------------------------ client operations

    def _capacity(self) -> dict[str, NodeCapacity]:
        return {
            n.name: NodeCapacity(
                n.name, n.resources.cpus, n.resources.memory_mb, len(n.resources.gpus), n.gpu_type
            )
            for n in self.nodes.values()
        }

    async def submit(self, who: Identity, spec: pb.JobSpec) -> pb.Job:
        accepted = validate_spec(
            spec, self.config, self._capacity(), lambda: user_groups(who.user, who.gid)
        )
        qos = spec.qos or "normal"
        if qos not in self.priorities.qos_priority:
            raise InvalidQos()
        if spec.dependency:
            self._check_dependency(spec.dependency)
        if spec.reservation:
            self.reservations.check_job_access(spec.reservation, who.user, spec.account)
        tasks: tuple[int | None, ...] = (None,)
        if spec.array:
            tasks = parse_array(spec.array).task_ids
            limit = self.config.scheduler.max_array_size
            if tasks[-1] >= limit:
                raise InvalidOption(
                    f"Invalid job array specification: task ids must be below MaxArraySize "
                    f"({limit})"
                )
        now = self.clock()
        first_id = self.next_job_id
        self.next_job_id += len(tasks)  # an array's tasks get consecutive ids
        cause = f"rpc:SubmitJob user={who.user}"
        made: list[pb.Job] = []
        for offset, task in enumerate(tasks):
            job = pb.Job(
                job_id=first_id + offset,
                spec=spec,
                user=who.user,
                uid=who.uid,
                gid=who.gid,
                partition=accepted.partitions[0],
                account=spec.account,
                time_limit_s=accepted.time_limit_s,
                submit_time=now,
                eligible_time=max(now, spec.begin_time),
                cluster=self.config.cluster_name,
                qos=qos,
            )
            if task is not None:
                job.array_job_id, job.array_task_id = first_id, task
            job.spec.partitions[:] = accepted.partitions
            self._fill_request_totals(job)
            if not made:
                self.priorities.with_users([(job.account, job.user)])
            apply_factors(job, self.priorities.factors(job, now))
            js.transition(job, "submitted", cause=cause, now=now)
            if spec.hold:
                job.priority = 0
                job.hold = pb.HOLD_USER
                job.reason = "JobHeldUser"
                js.transition(job, "held", cause=cause, now=now, detail="sbatch --hold")
            made.append(job)
        await self.store.commit(*[self._save(j, new=True) for j in made])
        for job in made:
            self.jobs[job.job_id] = job
            self._enqueue(job)
        log.info(
            "job submitted",
            job_id=first_id,
            user=who.user,
            partition=made[0].partition,
            tasks=len(made) if spec.array else None,
        )
        if spec.hold:
            self.version += 1  # nothing new can start: no pass needed
        else:
            self.wake()
        return made[0]

    def _check_dependency(self, text: str) -> None:
        try:
            ids = deps.referenced_ids(text)
        except CorralError as exc:
            raise DependencyProblem(exc.message) from None
        for job_id in ids:
            if job_id >= self.next_job_id or self._lookup(job_id) is None:
                raise DependencyProblem(f"Job dependency problem: job {job_id} does not exist")

    def _lookup(self, job_id: int) -> pb.Job | None:
        """A job in memory, or (once, then cached: it has ended) from the store."""
        job = self.jobs.get(job_id)
        if job is not None:
            return job
        if job_id not in self._gone:
            found = self.store.query_jobs(
                job_ids=[job_id], users=[], states=[], start_after=0, end_before=0, limit=1
            )
            self._gone[job_id] = found[0] if found else None
        return self._gone[job_id]

    @staticmethod
    def _fill_request_totals(job: pb.Job) -> None:
        """What squeue shows for a pending job: requested nodes, CPUs, memory, GPUs."""
        shape = job_shape(request_from_spec(job.spec))
        job.num_nodes = shape.nodes
        job.num_tasks = job.spec.ntasks or shape.nodes * shape.tasks_per_node  # -N2 -n5: 5
        job.num_cpus = shape.nodes * shape.cpus_per_node
        job.mem_mb = shape.nodes * shape.mem_per_node_mb
        job.num_gpus = shape.nodes * shape.gpus_per_node

    def select(self, flt: pb.JobFilter, *, strict: bool = True) -> list[pb.Job]:
        """The in-memory jobs matching ``flt`` (all given conditions must hold).

        ``strict``: ids were given and none is known -> InvalidJobId, as squeue -j says."""
        if flt.job_ids or flt.array_tasks:
            jobs = self._by_ids(flt.job_ids, flt.array_tasks)
            if strict and not jobs:
                raise InvalidJobId()
        else:
            jobs = list(self.jobs.values())
        users, states = set(flt.users), set(flt.states)
        names, parts, accts = set(flt.names), set(flt.partitions), set(flt.accounts)
        return [
            j
            for j in jobs
            if (not users or j.user in users)
            and (not states or j.state in states)
            and (not names or j.spec.name in names)
            and (not parts or j.partition in parts)
            and (not accts or j.account in accts)
        ]

    def _by_ids(self, job_ids: Iterable[int], array_tasks: Iterable[str]) -> list[pb.Job]:
        """Jobs named by id, where an array's master id names all its tasks, and
        ``N_T`` names task T of array N."""
        ids = set(job_ids)
        tasks: set[tuple[int, int]] = set()
        for ref in array_tasks:
            base, _, task = ref.partition("_")
            if not (base.isdigit() and task.isdigit()):
                raise InvalidJobId(f"Invalid job id specified: {ref[:64]}")
            tasks.add((int(base), int(task)))
        out = []
        for job in self.jobs.values():
            if (
                job.job_id in ids
                or (job.array_job_id and job.array_job_id in ids)
                or (
                    job.HasField("array_task_id") and (job.array_job_id, job.array_task_id) in tasks
                )
            ):
                out.append(job)
        return out

    def job(self, job_id: int) -> pb.Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise InvalidJobId()
        return job

    async def cancel(self, who: Identity, req: pb.CancelJobsRequest) -> list[pb.CancelOutcome]:
        if req.steps:
            return await self.cancel_steps(who, req)
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
        ops: list[Op] = []
        now = self.clock()
        cause = f"rpc:CancelJobs user={who.user}"
        known = set(self.jobs)
        targets = self.select(flt, strict=False)
        if flt.job_ids:
            # a whole array named by its id: its tasks that already ended are no error
            whole = set(flt.job_ids)
            targets = [
                j
                for j in targets
                if not (j.array_job_id in whole and j.state in js.FINISHED and flt.job_ids)
            ]
            arrays = {j.array_job_id for j in self.jobs.values() if j.array_job_id}
            for missing in [i for i in flt.job_ids if i not in known and i not in arrays]:
                outcomes.append(_failure(missing, InvalidJobId()))
        for job in targets:
            try:
                self.policy.check_job(who, job, "signal" if req.signal else "cancel")
                if req.signal:
                    self._pending_signals.append(
                        self._signal_job(job, req.signal, req.batch_only, cause, now)
                    )
                else:
                    sig = self._cancel_job(job, cause, now)
                    job.cancelled_by_uid = who.uid
                    if sig is not None:
                        self._pending_signals.append(sig)
                ops.append(self._save(job))
                outcomes.append(pb.CancelOutcome(job_id=job.job_id, ok=True))
            except CorralError as exc:
                outcomes.append(_failure(job.job_id, exc))
        if ops:
            await self.store.commit(*ops)
            self.wake()
        self._flush_signals()
        return outcomes

    def _cancel_job(
        self, job: pb.Job, cause: str, now: float
    ) -> tuple[NodeRecord, pb.SignalJobRequest] | None:
        if job.state == js.PENDING:
            js.transition(job, "cancelled", cause=cause, now=now)
            job.end_time = now
            job.reason = "None"
            return None
        if job.state == js.RUNNING and job.spec.allocation_only:
            # no batch step to wait for: the allocation ends now, its steps are killed
            self._end_allocation(job, js.CANCELLED, cause=cause, exit_code=0, exit_signal=0)
            return None
        if job.state == js.RUNNING:
            js.transition(job, "cancel_requested", cause=cause, now=now)
            self._terminate_steps_elsewhere(job)
            return self._batch_node(job), self._terminate_request(job)
        raise JobStateConflict()

    def _signal_job(
        self, job: pb.Job, sig: int, batch_only: bool, cause: str, now: float
    ) -> tuple[NodeRecord, pb.SignalJobRequest]:
        if not 0 < sig < 65:
            raise InvalidRequest(f"Invalid signal {sig}")
        if job.state == js.PENDING:
            raise JobStateConflict("Job is pending execution")
        if job.state not in js.ON_NODE:
            raise JobStateConflict()
        js.transition(job, "signalled", cause=cause, now=now, detail=f"signal {sig}")
        if not batch_only:  # step tasks on the job's other nodes get it too
            for alloc in job.allocations:
                node = self.nodes.get(alloc.node)
                if node is not None and alloc.node != job.batch_host:
                    self._pending_signals.append(
                        (node, pb.SignalJobRequest(job_id=job.job_id, signal=sig))
                    )
        return self._batch_node(job), pb.SignalJobRequest(
            job_id=job.job_id, signal=sig, batch_only=batch_only
        )

    def _terminate_request(self, job: pb.Job) -> pb.SignalJobRequest:
        """End the job's processes on a node: SIGCONT+SIGTERM, SIGKILL after KillWait."""
        return pb.SignalJobRequest(
            job_id=job.job_id,
            signal=int(signal_mod.SIGTERM),
            terminate=True,
            kill_wait_s=self.config.controller.kill_wait_s,
        )

    def _batch_node(self, job: pb.Job) -> NodeRecord:
        node = self.nodes.get(job.batch_host)
        if node is None:
            raise JobStateConflict(f"job {job.job_id} has no batch host")
        return node

    async def _send_signal(self, node: NodeRecord, req: pb.SignalJobRequest) -> None:
        """Deliver; a kill to an unreachable node is retried until the node answers or is
        declared DOWN (then fencing kills what is left when it comes back)."""
        delay = 0.5
        while True:
            try:
                await self.dispatcher.signal(node, req)
                return
            except ControllerUnavailable as exc:  # dispatch's NodeUnreachable
                if not req.terminate or node.down:
                    log.warning("signal not delivered", job_id=req.job_id, node=node.name)
                    return
                log.warning(
                    "kill not delivered, will retry",
                    job_id=req.job_id,
                    node=node.name,
                    error=str(exc),
                )
            except CorralError as exc:
                log.warning(
                    "signal not delivered", job_id=req.job_id, node=node.name, error=str(exc)
                )
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.config.heartbeat.interval_s)

    async def update_hold(self, who: Identity, req: pb.UpdateJobRequest) -> list[pb.CancelOutcome]:
        outcomes: list[pb.CancelOutcome] = []
        ops: list[Op] = []
        now = self.clock()
        cause = f"rpc:UpdateJob user={who.user}"
        for job_id in req.job_ids:
            try:
                job = self.job(job_id)
                self.policy.check_job(who, job, "update")
                changed = [job]
                if req.action == pb.JOB_UPDATE_TOP:
                    changed = self._top(job, cause, now)
                elif req.action == pb.JOB_UPDATE_FIELDS:
                    self._update_fields(who, job, req, cause, now)
                elif req.action in (pb.JOB_UPDATE_REQUEUE, pb.JOB_UPDATE_REQUEUE_HOLD):
                    self._requeue_request(who, job, req.action, cause, now)
                else:
                    self._apply_hold(who, job, req.action, cause, now)
                ops.extend(self._save(j) for j in changed)
                outcomes.append(pb.CancelOutcome(job_id=job_id, ok=True))
            except CorralError as exc:
                outcomes.append(_failure(job_id, exc))
        if ops:
            await self.store.commit(*ops)
            self.wake()
        self._flush_signals()  # scontrol requeue's kills, once the request is durable
        return outcomes

    def _update_fields(
        self, who: Identity, job: pb.Job, req: pb.UpdateJobRequest, cause: str, now: float
    ) -> None:
        """scontrol update job: what a pending job asks for; a running job's limit."""
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
            limit = req.time_limit_s
            longer = (limit < 0 and job.time_limit_s >= 0) or 0 <= job.time_limit_s < limit
            if longer and not operator:
                raise PermissionDenied(
                    "Access/permission denied: only an operator may extend a time limit"
                )
            spec.time_limit_s = limit if limit != 0 else -1
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
        if req.HasField("priority"):
            if not operator and req.priority > job.priority:
                raise PermissionDenied(
                    "Access/permission denied: only an operator may raise a priority"
                )
            changes.append(f"Priority={req.priority}")
        if not changes:
            raise InvalidRequest("No changes specified")
        if job.state == js.PENDING:
            accepted = validate_spec(
                spec, self.config, self._capacity(), lambda: user_groups(job.user, job.gid)
            )
            spec.partitions[:] = accepted.partitions
            job.partition = accepted.partitions[0]
            job.time_limit_s = accepted.time_limit_s
        elif req.HasField("time_limit_s"):
            job.time_limit_s = spec.time_limit_s
        job.spec.CopyFrom(spec)
        if req.HasField("priority"):
            job.admin_priority = req.priority
        if job.state == js.PENDING:
            self._fill_request_totals(job)
            self._requests.pop(job.job_id, None)
            if not job.hold:
                apply_factors(job, self.priorities.factors(job, now))
        js.transition(job, "updated", cause=cause, now=now, detail=" ".join(changes))

    def _top(self, job: pb.Job, cause: str, now: float) -> list[pb.Job]:
        """Put ``job`` first among its owner's pending jobs with the same partition,
        account and QOS, trading priorities within that set so nobody else loses.
        Returns the jobs whose priority it set."""
        if job.state != js.PENDING:
            raise JobStateConflict("Job is no longer pending execution")
        peers = [
            j
            for j in self.jobs.values()
            if j.state == js.PENDING
            and (not j.hold or j is job)
            and (j.uid, j.partition, j.account, j.qos)
            == (job.uid, job.partition, job.account, job.qos)
        ]
        ranked = sorted(peers, key=lambda j: (-j.priority, j.submit_time, j.job_id))
        values = [j.priority for j in ranked]
        ranked.remove(job)
        changed = []
        for peer, value in zip([job, *ranked], values, strict=True):
            if peer.priority != value or peer is job:
                peer.admin_priority = value
                peer.priority = value
                self._requests.pop(peer.job_id, None)
                js.transition(peer, "updated", cause=cause, now=now, detail="top")
                changed.append(peer)
        return changed

    def _requeue_request(
        self, who: Identity, job: pb.Job, action: int, cause: str, now: float
    ) -> None:
        """scontrol requeue[hold]: stop the job everywhere; its exit report requeues it."""
        if job.state == js.PENDING:
            raise JobStateConflict("Job is pending execution")
        if job.state != js.RUNNING or job.spec.allocation_only:
            raise JobStateConflict("Job is not running: only a running batch job is requeued")
        if job.spec.no_requeue:
            raise JobStateConflict("Requested operation is presently disabled (--no-requeue)")
        js.transition(job, "updated", cause=cause, now=now, detail="requeue requested")
        self._requeue_on_exit.add(job.job_id)
        if action == pb.JOB_UPDATE_REQUEUE_HOLD:
            admin = self.policy.is_operator(who)
            self._hold_on_requeue[job.job_id] = pb.HOLD_ADMIN if admin else pb.HOLD_USER
        self._terminate_steps_elsewhere(job)
        self._pending_signals.append((self._batch_node(job), self._terminate_request(job)))

    def _apply_hold(self, who: Identity, job: pb.Job, action: int, cause: str, now: float) -> None:
        if job.state in js.FINISHED:
            raise JobStateConflict("Job has already finished")
        if job.state != js.PENDING:
            return  # Slurm accepts holding a running job: it only matters if it is requeued
        if action in (pb.JOB_UPDATE_HOLD, pb.JOB_UPDATE_USER_HOLD):
            admin = action == pb.JOB_UPDATE_HOLD and self.policy.is_operator(who)
            job.hold = pb.HOLD_ADMIN if admin else pb.HOLD_USER
            job.reason = "JobHeldAdmin" if admin else "JobHeldUser"
            job.priority = 0
            js.transition(job, "held", cause=cause, now=now)
        elif action == pb.JOB_UPDATE_RELEASE:
            if job.hold == pb.HOLD_ADMIN:
                self.policy.check_operator(who, "releasing an admin hold")
            job.hold = pb.HOLD_NONE
            job.reason = ""
            apply_factors(job, self.priorities.factors(job, now))
            js.transition(job, "released", cause=cause, now=now)
        else:
            raise InvalidRequest("unknown job update action")

    # ------------------------------------------------------------ node operations

    def _node(self, name: str) -> NodeRecord:
        node = self.nodes.get(name)
        if node is None:
            raise InvalidNodeName(f"Invalid node name specified: {name}")
        return node

    async def register_node(self, req: pb.RegisterNodeRequest) -> NodeRecord:
        node = self._node(req.name)
        now = self.clock()
        if not req.address or len(req.address) > 256:
            raise InvalidRequest("a node must register the address of its agent")
        node.address = req.address
        node.resources = req.resources
        node.boot_time, node.version, node.os = req.boot_time, req.version, req.os
        node.registered = True
        node.responding_again()
        node.last_heartbeat = now
        log.info(
            "node registered",
            node=node.name,
            address=node.address,
            cpus=node.resources.cpus,
            gpus=len(node.resources.gpus),
            running=len(req.running_job_ids),
        )
        await self._apply_updates(node, req.unreported)
        await self.node_faults(node, req.health)
        await self._reconcile(node, set(req.running_job_ids))
        # fencing: what it runs beyond what it may keep is killed before it gets work
        node.fencing = bool(set(req.running_job_ids) - set(self.jobs_kept_by(node.name)))
        if node.fencing:
            log.warning("node back with jobs it may not keep: fencing", node=node.name)
        self.wake()
        return node

    def jobs_kept_by(self, name: str) -> list[int]:
        """The jobs a registering node may keep running (it kills every other)."""
        return failures.keep_for(name, self.jobs.values())

    async def _reconcile(self, node: NodeRecord, running: set[int]) -> None:
        """Settle jobs ctld places on ``node`` that the node, registering, does not run.

        With the node's unreported updates already applied, such a job never reached the
        node (ctld died between committing RUNNING and dispatching it) or the node lost
        it (noded restarted). A launch still in flight is not missing: the node's list
        was taken before it arrived.
        """
        ops: list[Op] = []
        cause = f"node:{node.name} registered without it"
        for job in list(self.jobs.values()):
            if (
                job.state not in js.ON_NODE
                or job.batch_host != node.name
                or job.job_id in running
                or job.job_id in self._launching
                or job.spec.allocation_only  # no batch step on any node
            ):
                continue
            if job.state == js.COMPLETING:  # cancelled, and nothing is left to stop
                self._finish(job, pb.JobStatusUpdate(job_id=job.job_id), cause)
            else:
                log.warning("job missing on its node", job_id=job.job_id, node=node.name)
                self._node_failed(job, node, f"node {node.name} does not run it", cause)
            ops.append(self._save(job))
        if ops:
            await self.store.commit(*ops)

    def heartbeat(self, req: pb.HeartbeatRequest) -> bool:
        """Record a heartbeat; False means ctld wants the node to register again."""
        node = self._node(req.name)
        if not node.registered or node.down:
            return False  # a node back from DOWN registers again, and is fenced then
        node.last_heartbeat = self.clock()
        if node.late:
            node.late = False
            log.info("node responding again", node=node.name)
            self.wake()
        if node.fencing and set(req.running_job_ids) <= set(self.jobs_kept_by(node.name)):
            node.fencing = False
            log.info("node fenced: only its own jobs run there", node=node.name)
            self.wake()
        return True

    async def report_status(self, req: pb.ReportJobStatusRequest) -> None:
        """Apply what a node reports about its jobs; repeats of a report change nothing."""
        await self._apply_updates(self._node(req.node), req.updates)

    async def _apply_updates(self, node: NodeRecord, updates: Iterable[pb.JobStatusUpdate]) -> None:
        ops: list[Op] = []
        for upd in updates:
            job = self.jobs.get(upd.job_id)
            if job is not None and upd.kind == Update.KIND_STEP_ENDED:
                if self._step_part_ended(job, node, upd):
                    ops.append(self._save(job))
                continue
            if job is None or job.state not in js.ON_NODE or job.batch_host != node.name:
                continue  # already finished (a retried report) or not this node's job
            if failures.stale_report(job, upd):
                continue  # about a copy from before a requeue
            cause = f"node:{node.name} report"
            try:
                if job.state == js.COMPLETING and upd.kind in (
                    Update.KIND_EXITED,
                    Update.KIND_LAUNCH_FAILED,
                ):
                    # cancelled meanwhile: however it ended on the node, it ends CANCELLED
                    self._requeue_on_exit.discard(job.job_id)
                    if (
                        upd.kind == Update.KIND_LAUNCH_FAILED
                        and upd.end_reason == END_PROLOG_FAILED
                    ):
                        ops.extend(self._drain(node, "Prolog error", upd.time or self.clock()))
                    ended = upd if upd.kind == Update.KIND_EXITED else Update(time=upd.time)
                    self._finish(job, ended, cause)
                elif upd.kind == Update.KIND_EXITED and upd.end_reason in (
                    Update.END_NODE_FAIL,
                    Update.END_STALLED,
                ):
                    job.usage.CopyFrom(upd.usage)
                    self._node_failed(job, node, upd.detail or "lost on its node", cause)
                elif upd.kind == Update.KIND_EXITED:
                    if job.job_id in self._requeue_on_exit:
                        self._requeue_on_exit.discard(job.job_id)
                        job.usage.CopyFrom(upd.usage)
                        self._requeue(
                            job,
                            cause=cause,
                            detail=upd.detail or "requeued on request",
                            hold=self._hold_on_requeue.pop(job.job_id, pb.HOLD_NONE),
                        )
                    else:
                        self._finish(job, upd, cause)
                elif (
                    upd.kind == Update.KIND_LAUNCH_FAILED
                    and upd.end_reason == Update.END_PROLOG_FAILED
                ):
                    # Slurm's rule: the node is suspect, the job is not; it runs elsewhere
                    self._requeue(job, cause=cause, detail=upd.detail[:512])
                    ops.extend(self._drain(node, "Prolog error", upd.time or self.clock()))
                elif upd.kind == Update.KIND_LAUNCH_FAILED:
                    js.transition(
                        job,
                        "launch_failed",
                        cause=cause,
                        now=self.clock(),
                        detail=upd.detail[:1024],
                    )
                    job.end_time = upd.time or self.clock()
                    job.exit_code = 1
                    job.reason = f"launch failed: {upd.detail}"[:200]
                    self._release(job)
                elif upd.kind == Update.KIND_IDLE_GPUS:
                    if not self._idle_gpus(job, upd, cause):
                        continue
                else:
                    continue
            except InvalidTransition as exc:
                # one impossible report must not block the node's others (nor re-registration)
                log.error("node report not applicable", node=node.name, error=str(exc))
                continue
            ops.append(self._save(job))
        if ops:
            await self.store.commit(*ops)
            self.wake()
        self._flush_signals()

    def _idle_gpus(self, job: pb.Job, upd: pb.JobStatusUpdate, cause: str) -> bool:
        """Flag (or clear) a job whose GPUs sit idle; cancel or requeue it if so configured."""
        policy = self.config.idle_gpus
        if upd.time <= 0:
            if not job.idle_gpus_since:
                return False
            job.idle_gpus_since = 0
            if job.reason == "IdleGPUs":
                job.reason = "None"
            js.transition(job, "updated", cause=cause, now=self.clock(), detail="GPUs busy again")
            return True
        if job.idle_gpus_since:
            return False  # a repeat
        job.idle_gpus_since = upd.time
        job.reason = "IdleGPUs"  # squeue %r and scontrol's Reason= show the flag
        detail = f"GPUs under {policy.threshold_pct:g}% since {upd.time:.0f}"
        js.transition(job, "updated", cause=cause, now=self.clock(), detail="idle " + detail)
        log.warning("idle GPUs", job_id=job.job_id, action=policy.action, since=upd.time)
        if job.state == js.RUNNING and policy.action == "cancel":
            sig = self._cancel_job(job, "policy:idle_gpus cancel", self.clock())
            if sig is not None:
                self._pending_signals.append(sig)
        elif job.state == js.RUNNING and policy.action == "requeue":
            # it stays RUNNING while the node stops it; its exit report requeues it
            self._requeue_on_exit.add(job.job_id)
            self._pending_signals.append(
                (
                    self._batch_node(job),
                    self._terminate_request(job),
                )
            )
        return True

    # ------------------------------------------------------------ steps

    async def create_step(self, who: Identity, spec: pb.StepSpec) -> pb.Step:
        """srun inside an allocation: lay the step out on the job's nodes and record it."""
        job = self.job(spec.job_id)
        self.policy.check_job(who, job, "run a step in")
        if job.state != js.RUNNING:
            raise JobStateConflict(
                f"Job {job.job_id} is not running (it is {js.state_name(job.state)})"
            )
        validate_gpu_bind(spec.gpu_bind)
        for what, value in (("step name", spec.name), ("submit line", spec.submit_line)):
            if len(value) > 65536:
                raise InvalidOption(f"the {what} is too long")
        addresses = {
            a.node: self.nodes[a.node].address for a in job.allocations if a.node in self.nodes
        }
        held: dict[str, tuple[int, set[int]]] = {}
        for other in job.steps:
            if other.state == js.RUNNING:
                for node, (cpus, gpus) in holdings(other).items():
                    have_cpus, have_gpus = held.get(node, (0, set()))
                    held[node] = (have_cpus + cpus, have_gpus | gpus)
        layout = plan_step(job, spec, addresses, held)
        now = self.clock()
        step = pb.Step(
            job_id=job.job_id,
            step_id=job.next_step_id,
            name=spec.name[:256] or "step",
            state=js.RUNNING,
            start_time=now,
            nodelist=hostlist.compress([n.node for n in layout]),
            ntasks=sum(len(n.ranks) for n in layout),
            nodes=layout,
            spec=spec,
        )
        job.next_step_id += 1
        job.steps.append(step)
        js.transition(
            job,
            "updated",
            cause=f"rpc:CreateStep user={who.user}",
            now=now,
            detail=f"step {step.step_id} started: {step.ntasks} task(s) on {step.nodelist}",
        )
        await self.store.commit(self._save(job))
        return step

    def _step(self, job: pb.Job, step_id: int) -> pb.Step:
        for step in job.steps:
            if step.step_id == step_id:
                return step
        raise InvalidJobId(f"Invalid job id specified: step {job.job_id}.{step_id} does not exist")

    def step_for_node(self, job_id: int, step_id: int, node: str) -> tuple[pb.Job, pb.Step]:
        """What a node may run for srun: a running step of a running job, with tasks there."""
        job = self.job(job_id)
        if job.state != js.RUNNING:
            raise JobStateConflict(f"Job {job_id} is not running")
        step = self._step(job, step_id)
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
        job = self.job(req.job_id)
        self.policy.check_job(who, job, "complete a step of")
        step = self._step(job, req.step_id)
        if step.state != js.RUNNING:
            return  # a repeat, or ended with its job
        self._end_step(step, req.exit_code, req.exit_signal, req.cancelled)
        js.transition(
            job,
            "updated",
            cause=f"rpc:CompleteStep user={who.user}",
            now=self.clock(),
            detail=f"step {step.step_id} {js.state_name(step.state)} "
            f"exit {step.exit_code}:{step.exit_signal}",
        )
        await self.store.commit(self._save(job))

    def _step_part_ended(self, job: pb.Job, node: NodeRecord, upd: pb.JobStatusUpdate) -> bool:
        """A node's tasks of a step are gone. Once every node of the step said so, the step
        has ended even if srun never reports (it was killed): it must not hold the job's
        CPUs and GPUs for ever."""
        try:
            step = self._step(job, upd.step_id)
        except CorralError:
            return False
        if step.state != js.RUNNING or node.name not in {n.node for n in step.nodes}:
            return False
        key = (job.job_id, step.step_id)
        done = self._step_nodes_done.setdefault(key, set())
        done.add(node.name)
        step.exit_code = max(step.exit_code, max(0, min(upd.exit_code, 255)))
        step.exit_signal = step.exit_signal or max(0, min(upd.exit_signal, 64))
        if done < {n.node for n in step.nodes}:
            return False
        del self._step_nodes_done[key]
        self._end_step(step, step.exit_code, step.exit_signal, cancelled=False)
        js.transition(
            job,
            "updated",
            cause=f"node:{node.name} report",
            now=self.clock(),
            detail=f"step {step.step_id} ended on every node",
        )
        self.wake()
        return True

    def _end_step(self, step: pb.Step, exit_code: int, exit_signal: int, cancelled: bool) -> None:
        step.exit_code = max(0, min(exit_code, 255))
        step.exit_signal = max(0, min(exit_signal, 64))
        step.end_time = self.clock()
        if cancelled:
            step.state = js.CANCELLED
        elif step.exit_code or step.exit_signal:
            step.state = js.FAILED
        else:
            step.state = js.COMPLETED

    def _end_running_steps(self, job: pb.Job, final: int) -> None:
        """A job that ends ends its steps (their tasks die with it)."""
        for step in job.steps:
            if step.state == js.RUNNING:
                step.state = js.CANCELLED if final != js.TIMEOUT else js.TIMEOUT
                step.end_time = self.clock()

    def _terminate_steps_elsewhere(self, job: pb.Job) -> None:
        """Stop the job's step tasks on its nodes other than the batch host (which its
        own terminate covers)."""
        for alloc in job.allocations:
            node = self.nodes.get(alloc.node)
            if node is None or alloc.node == job.batch_host:
                continue
            self._pending_signals.append(
                (
                    node,
                    self._terminate_request(job),
                )
            )

    async def cancel_steps(
        self, who: Identity, req: pb.CancelJobsRequest
    ) -> list[pb.CancelOutcome]:
        """scancel JOBID.STEP (with -s: signal the step's tasks only)."""
        outcomes: list[pb.CancelOutcome] = []
        ops: list[Op] = []
        for ref in req.steps:
            try:
                job = self.job(ref.job_id)
                self.policy.check_job(who, job, "signal" if req.signal else "cancel")
                step = self._step(job, ref.step_id)
                if step.state != js.RUNNING or job.state not in js.ON_NODE:
                    raise JobStateConflict()
                sig = req.signal or int(signal_mod.SIGKILL)
                if not req.signal:  # scancel N.S: the step ends CANCELLED whatever srun says
                    self._end_step(step, 0, sig, cancelled=True)
                for sn in step.nodes:
                    node = self.nodes.get(sn.node)
                    if node is not None:
                        self._pending_signals.append(
                            (
                                node,
                                pb.SignalJobRequest(
                                    job_id=job.job_id, signal=sig, step_id=step.step_id
                                ),
                            )
                        )
                js.transition(
                    job,
                    "signalled",
                    cause=f"rpc:CancelJobs user={who.user}",
                    now=self.clock(),
                    detail=f"step {step.step_id} signal {sig}",
                )
                ops.append(self._save(job))
                outcomes.append(pb.CancelOutcome(job_id=job.job_id, ok=True))
            except CorralError as exc:
                outcomes.append(_failure(ref.job_id, exc))
        if ops:
            await self.store.commit(*ops)
        self._flush_signals()
        return outcomes

    def _flush_signals(self) -> None:
        for sig_node, sig_req in self._pending_signals:
            self._spawn(self._send_signal(sig_node, sig_req))
        self._pending_signals.clear()

    async def complete_job(self, who: Identity, req: pb.CompleteJobRequest) -> None:
        """salloc or srun releases the allocation it made."""
        job = self.job(req.job_id)
        self.policy.check_job(who, job, "complete")
        if not job.spec.allocation_only:
            raise JobStateConflict(f"Job {job.job_id} is a batch job: it ends when its script does")
        if job.state != js.RUNNING:
            return  # already ended (cancelled, timed out, or a repeat)
        final = js.COMPLETED if not (req.exit_code or req.exit_signal) else js.FAILED
        self._end_allocation(
            job,
            final,
            cause=f"rpc:CompleteJob user={who.user}",
            exit_code=req.exit_code,
            exit_signal=req.exit_signal,
        )
        await self.store.commit(self._save(job))
        self._flush_signals()
        self.wake()

    def _end_allocation(
        self, job: pb.Job, final: int, *, cause: str, exit_code: int, exit_signal: int
    ) -> None:
        job.exit_code = max(0, min(exit_code, 255))
        job.exit_signal = max(0, min(exit_signal, 64))
        job.end_time = self.clock()
        reasons: dict[int, str] = {js.TIMEOUT: "TimeLimit", js.FAILED: "NonZeroExitCode"}
        job.reason = reasons.get(final, "None")
        self._end_running_steps(job, final)
        for alloc in job.allocations:  # whatever steps still run there go
            node = self.nodes.get(alloc.node)
            if node is not None:
                self._pending_signals.append(
                    (
                        node,
                        self._terminate_request(job),
                    )
                )
        js.transition(
            job,
            "exited",
            cause=cause,
            now=self.clock(),
            to=final,
            detail=f"allocation released, exit {job.exit_code}:{job.exit_signal}",
        )
        self._release(job)
        self.ledger.add_finished(job)
        self._remember_run(job)

    async def enforce_allocation_limits(self) -> None:
        """salloc/srun allocations have no noded process to time them: ctld does."""
        now = self.clock()
        ops: list[Op] = []
        for job in list(self.jobs.values()):
            if (
                job.spec.allocation_only
                and job.state == js.RUNNING
                and job.time_limit_s > 0
                and now >= job.start_time + job.time_limit_s
            ):
                log.info("allocation reached its time limit", job_id=job.job_id)
                self._end_allocation(
                    job, js.TIMEOUT, cause="ctld:time limit", exit_code=0, exit_signal=0
                )
                ops.append(self._save(job))
        if ops:
            await self.store.commit(*ops)
            self._flush_signals()
            self.wake()

    # ------------------------------------------------------------ node health

    def _drain(self, node: NodeRecord, reason: str, when: float, uid: int = 0) -> list[Op]:
        """Drain ``node`` (durably); a node already drained keeps its first reason."""
        if node.drain:
            return []
        node.drain = True
        user = self.user_name(uid)
        node.set_reason(reason[:256], when, user=user, uid=uid)
        log.warning("node drained", node=node.name, reason=reason, by=user)
        self.wake()
        return [Op(drains_put=[NodeDrain(node.name, node.reason, when, uid)])]

    async def node_faults(self, node: NodeRecord, events: Iterable[pb.NodeHealthEvent]) -> None:
        """A node reports faults (GPU XID, ECC, lost GPU, epilog): drain it."""
        ops: list[Op] = []
        for ev in events:
            log.error("node fault", node=node.name, reason=ev.reason, detail=ev.detail[:512])
            ops.extend(self._drain(node, ev.reason or "node fault", ev.time or self.clock()))
        if ops:
            await self.store.commit(*ops)

    async def update_node(self, who: Identity, req: pb.UpdateNodeRequest) -> None:
        """scontrol update NodeName=... State=DRAIN|RESUME|UNDRAIN|DOWN Reason=...

        DRAIN lets running jobs finish and places nothing new; DOWN requeues (or fails)
        its jobs now; RESUME returns it: a DOWN node registers again first (and is
        fenced: what it still runs of jobs that moved is killed).
        """
        self.policy.check_operator(who, "update node")
        state = req.state.upper()
        if state not in ("DRAIN", "RESUME", "UNDRAIN", "DOWN"):
            raise InvalidRequest(f"Invalid node state specified: {req.state}")
        if state == "DRAIN" and not req.reason.strip():
            raise InvalidRequest("You must specify a reason when DRAINING a node")
        if state == "DOWN" and not req.reason.strip():
            raise InvalidRequest("You must specify a reason when DOWNING a node")
        if not req.names:
            raise InvalidNodeName("No node name specified")
        nodes = [self._node(name) for name in req.names]
        now = self.clock()
        ops: list[Op] = []
        for node in nodes:
            if state == "DOWN":
                await self.node_down(node, req.reason.strip(), cause=f"rpc:UpdateNode {who.user}")
                node.set_reason(req.reason.strip()[:256], now, user=who.user, uid=who.uid)
                continue
            if state in ("RESUME", "UNDRAIN") and node.down and state == "RESUME":
                node.down = False
                node.registered = False  # it registers again, and is fenced then
                if not node.drain:
                    node.set_reason("", 0.0, user="")
                log.info("node resumed from DOWN", node=node.name, by=who.user)
            if state == "DRAIN":
                if node.drain:  # an operator's drain replaces the reason
                    node.drain = False
                ops.extend(self._drain(node, req.reason.strip(), now, who.uid))
            elif node.drain:
                node.drain = False
                node.set_reason("", 0.0, user="")
                if node.registered and not node.responding:
                    node.set_reason("Not responding", now)
                ops.append(Op(drains_delete=[node.name]))
                log.info("node resumed", node=node.name, by=who.user)
        if ops:
            await self.store.commit(*ops)
        self.version += 1
        self.wake()

    @staticmethod
    def user_name(uid: int) -> str:
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)

    def _finish(self, job: pb.Job, upd: pb.JobStatusUpdate, cause: str) -> None:
        job.usage.CopyFrom(upd.usage)
        if upd.end_reason == Update.END_TIMEOUT:
            final = js.TIMEOUT
        elif upd.end_reason == Update.END_OUT_OF_MEMORY:
            final = js.OUT_OF_MEMORY
        elif job.state == js.COMPLETING or upd.signalled_by_request:
            final = js.CANCELLED
        elif upd.exit_signal:
            final = js.FAILED
        elif upd.exit_code == 0:
            final = js.COMPLETED
        else:
            final = js.FAILED
        job.exit_code = max(0, min(upd.exit_code, 255))
        job.exit_signal = max(0, min(upd.exit_signal, 64))
        job.end_time = max(upd.time, job.start_time) if upd.time else self.clock()
        job.reason = {
            js.TIMEOUT: "TimeLimit",
            js.OUT_OF_MEMORY: "OutOfMemory",
            js.FAILED: "NonZeroExitCode" if upd.exit_code else "None",
        }.get(final, "None")
        js.transition(
            job,
            "exited",
            cause=cause,
            now=self.clock(),
            to=final,
            detail=f"exit {job.exit_code}:{job.exit_signal}",
        )
        if any(step.state == js.RUNNING for step in job.steps):
            # the batch script is gone: its steps on the other nodes go too (Slurm's rule)
            self._terminate_steps_elsewhere(job)
        self._end_running_steps(job, final)
        self._release(job)
        self.ledger.add_finished(job)
        self._remember_run(job)
        log.info(
            "job ended",
            job_id=job.job_id,
            node=job.batch_host,
            state=js.state_name(final),
            exit_code=job.exit_code,
            signal=job.exit_signal,
        )

    def _remember_run(self, job: pb.Job) -> None:
        if job.start_time > 0 and job.time_limit_s > 0 and job.end_time >= job.start_time:
            self.history.append((job.end_time - job.start_time, float(job.time_limit_s)))

    def explain(self, who: Identity, job_id: int) -> pb.ExplainJobResponse:
        """corral why: the job, its rank, what holds it up and what would help."""
        job = self.job(job_id)
        resp = pb.ExplainJobResponse(now=self.clock())
        resp.job.CopyFrom(job)
        del resp.job.events[:]
        resp.job.spec.ClearField("script")
        resp.job.spec.ClearField("environment")
        if job.state != js.PENDING:
            return resp
        allowed = [
            p.name
            for p in self.config.partitions
            if p.state == "UP" and (not p.allow_accounts or job.account in p.allow_accounts)
        ]
        found = explain_job(
            self.snapshot(),
            job_id,
            history_ratios(list(self.history)),
            lambda other: self.jobs[other].start_time if other in self.jobs else 0.0,
            allowed,
        )
        if found is None:
            return resp
        resp.rank, resp.ahead = found.rank, found.ahead
        if found.forecast is not None and found.forecast.start != INFINITY:
            resp.forecast_start = found.forecast.start
            resp.likely_start = found.likely_start
            resp.earliest_start = found.earliest_start
        resp.history_ratio, resp.history_jobs = found.history_ratio, found.history_jobs
        for b in found.blockers:
            other = self.jobs.get(b.job_id)
            resp.blockers.add(
                job_id=b.job_id,
                user=other.user if other else "",
                nodes=hostlist.compress(list(b.nodes)),
                expected_end=b.expected_end if b.expected_end != INFINITY else 0,
                likely_end=b.likely_end if b.likely_end != INFINITY else 0,
            )
        for a in found.alternatives:
            resp.alternatives.add(change=a.change, start=a.start, now=a.now)
        return resp

    def _release(self, job: pb.Job) -> None:
        for alloc in job.allocations:
            node = self.nodes.get(alloc.node)
            if node is not None:
                node.release(job.job_id, alloc.cpus, alloc.mem_mb, list(alloc.gpu_indices))

    # ------------------------------------------------------------ scheduling

    def snapshot(self) -> Snapshot:
        nodes = tuple(
            NodeView(
                name=n.name,
                cpus_total=n.resources.cpus,
                mem_total_mb=n.resources.memory_mb,
                gpus_total=len(n.resources.gpus),
                cpus_free=max(0, n.resources.cpus - n.alloc_cpus),
                mem_free_mb=max(0, n.resources.memory_mb - n.alloc_mem_mb),
                gpus_free=tuple(i for i in n.gpu_indices if i not in n.alloc_gpus),
                gpu_type=n.gpu_type,
                schedulable=n.schedulable,
                idle=not n.job_ids,
                gpu_indices=tuple(n.gpu_indices),
            )
            for n in self.nodes.values()
        )
        parts = tuple(
            PartitionView(p.name, p.nodes, p.state, p.max_nodes, p.max_time_s, p.priority_tier)
            for p in self.config.partitions
        )
        now = self.clock()
        on_node = [j for j in self.jobs.values() if j.state in js.ON_NODE]
        recalc = self.priorities.recalc_due(now)
        if recalc:
            self.priorities.cluster_cpus = sum(n.resources.cpus for n in self.nodes.values())
            self.priorities.refresh(now, on_node)
        pending: list[JobRequest] = []
        never: list[pb.Job] = []
        # tasks an array may still start under its %N throttle, counted down this pass
        array_room: dict[int, int] = {}
        for j in on_node:
            if j.array_job_id:
                array_room[j.array_job_id] = array_room.get(j.array_job_id, 0) + 1
        throttles: dict[int, int] = {}
        for job_id in list(self._pending):
            job = self.jobs.get(job_id)
            if job is None or job.state != js.PENDING:
                del self._pending[job_id]  # left the queue since: forget it lazily
                self._requests.pop(job_id, None)
                continue
            if job.hold:
                continue  # its reason (JobHeldUser/Admin) was set when it was held
            if recalc and apply_factors(job, self.priorities.factors(job, now)):
                self.touch(job)
            blocked = self._blocked_reason(job, now)
            if not blocked and job.array_job_id and "%" in job.spec.array:
                if job.array_job_id not in throttles:
                    limit = parse_array(job.spec.array).max_running
                    throttles[job.array_job_id] = limit - array_room.get(job.array_job_id, 0)
                if throttles[job.array_job_id] <= 0:
                    blocked = "JobArrayTaskLimit"
                else:
                    throttles[job.array_job_id] -= 1
            if blocked:
                if job.reason != blocked:
                    job.reason = blocked
                    self.touch(job)
                if blocked == "DependencyNeverSatisfied":
                    never.append(job)
                continue
            req = self._requests.get(job_id)
            if req is None or req.priority != job.priority:
                req = request_from_spec(job.spec, job_id, job.spec.partitions, job.time_limit_s)
                req = dataclasses.replace(
                    req,
                    priority=job.priority,
                    user=job.user,
                    account=job.account,
                    qos=job.qos,
                    reservation=job.spec.reservation,
                    submit_time=job.submit_time,
                )
                self._requests[job_id] = req
            pending.append(req)
        if never and self.config.scheduler.kill_invalid_depend:
            self._spawn(self._cancel_never_satisfied(never))
        pending.sort(key=lambda r: (-r.priority, r.submit_time, r.job_id))
        running = tuple(
            RunningView(
                job_id=j.job_id,
                end_time=j.start_time + j.time_limit_s if j.time_limit_s >= 0 else INFINITY,
                placements=tuple(
                    Placement(a.node, a.cpus, a.mem_mb, tuple(a.gpu_indices)) for a in j.allocations
                ),
                user=j.user,
                qos=j.qos,
            )
            for j in on_node
        )
        return Snapshot(
            version=self.version,
            now=now,
            nodes=nodes,
            partitions=parts,
            pending=tuple(pending),
            running=running,
            reservations=self.reservations.views(),
            settings=self.settings,
        )

    def _blocked_reason(self, job: pb.Job, now: float) -> str:
        """Why a pending job cannot be considered at all this pass ("" if it can)."""
        if job.eligible_time > now:
            return "BeginTime"
        if job.spec.dependency:
            state = deps.evaluate(job, self._lookup, now, self._singleton_held, self._array_tasks)
            if state is deps.DepState.WAITING:
                return "Dependency"
            if state is deps.DepState.NEVER:
                return "DependencyNeverSatisfied"
        return ""

    def _array_tasks(self, array_id: int) -> list[pb.Job]:
        first = self.jobs.get(array_id)
        if first is None or not first.array_job_id:
            return []
        return [j for j in self.jobs.values() if j.array_job_id == array_id]

    def _singleton_held(self, job: pb.Job) -> bool:
        return any(
            o.job_id < job.job_id
            and o.user == job.user
            and o.spec.name == job.spec.name
            and o.state in js.ACTIVE
            for o in self.jobs.values()
        )

    async def _cancel_never_satisfied(self, jobs: list[pb.Job]) -> None:
        now = self.clock()
        ops = []
        for job in jobs:
            if job.state != js.PENDING:
                continue
            js.transition(
                job,
                "cancelled",
                cause="sched:kill_invalid_depend",
                now=now,
                detail="dependency can never be satisfied",
            )
            job.end_time = now
            ops.append(self._save(job))
        if ops:
            await self.store.commit(*ops)

    async def schedule_pass(self) -> None:
        self.passes += 1
        began = time.perf_counter()
        snap = self.snapshot()
        plan = schedule(snap)
        self.last_pass_s = time.perf_counter() - began
        self.last_considered = plan.considered
        await self.apply_plan(plan, pass_no=self.passes)

    async def apply_plan(self, plan: Plan, *, pass_no: int) -> None:
        if plan.snapshot_version != self.version:
            log.info("stale plan dropped", plan_version=plan.snapshot_version, version=self.version)
            self.wake()
            return
        now = self.clock()
        for job_id, reason in plan.reasons.items():
            job = self.jobs.get(job_id)
            if job is None or job.state != js.PENDING:
                continue
            forecast = plan.forecasts.get(job_id)
            changed = job.reason != reason
            job.reason = reason
            if forecast is None:
                changed |= job.expected_start != 0 or bool(job.forecast_nodes)
                job.expected_start, job.forecast_nodes = 0, ""
                job.forecast_reserved = False
                del job.waits_for[:]
            elif (
                job.expected_start != forecast.start
                or list(job.waits_for) != list(forecast.waits_for)
                or job.forecast_reserved != forecast.reserved
            ):
                changed = True
                job.expected_start = forecast.start if forecast.start != INFINITY else 0
                job.forecast_nodes = hostlist.compress(list(forecast.nodes))
                job.forecast_reserved = forecast.reserved
                job.waits_for[:] = forecast.waits_for
            if changed:
                self.touch(job)
        ops: list[Op] = []
        launches: list[pb.Job] = []
        for start in plan.starts:
            job = self.jobs.get(start.job_id)
            if job is None or job.state != js.PENDING:
                continue
            for p in start.placements:
                self.nodes[p.node].allocate(job.job_id, p.cpus, p.mem_mb, list(p.gpu_indices))
            del job.allocations[:]
            for p in start.placements:
                job.allocations.add(
                    node=p.node, cpus=p.cpus, mem_mb=p.mem_mb, gpu_indices=list(p.gpu_indices)
                )
            job.partition = start.partition
            job.nodelist = hostlist.compress([p.node for p in start.placements])
            job.batch_host = start.placements[0].node
            job.stdout_path, job.stderr_path = batch_output_paths(
                job_id=job.job_id,
                job_name=job.spec.name,
                user=job.user,
                node=job.batch_host,
                work_dir=job.spec.work_dir,
                stdout_pattern=job.spec.stdout_pattern,
                stderr_pattern=job.spec.stderr_pattern,
                array_job_id=job.array_job_id,
                array_task_id=job.array_task_id if job.HasField("array_task_id") else None,
            )
            job.num_nodes = len(start.placements)
            job.num_cpus = sum(p.cpus for p in start.placements)
            job.mem_mb = sum(p.mem_mb for p in start.placements)
            job.num_gpus = sum(len(p.gpu_indices) for p in start.placements)
            job.start_time = now
            job.reason = "None"
            job.expected_start, job.forecast_nodes = 0, ""
            job.forecast_reserved = False
            del job.waits_for[:]
            js.transition(
                job,
                "started",
                cause=f"sched:pass={pass_no}",
                now=now,
                detail=f"nodes={job.nodelist}",
            )
            ops.append(self._save(job))
            launches.append(job)
        if not ops:
            return
        self.version += 1
        self.starts_total += len(launches)
        await self.store.commit(*ops)  # RUNNING is durable before any node hears of it
        for job in launches:
            if job.spec.allocation_only:
                continue  # salloc/srun hold it: nothing runs until they start steps
            self._launching.add(job.job_id)  # from now until the node has answered
            self._spawn(self._launch(job))

    async def _launch(self, job: pb.Job) -> None:
        node = self.nodes[job.batch_host]
        request = pb.LaunchJobRequest(
            job=job,
            cluster=self.config.cluster_name,
            kill_wait_s=self.config.controller.kill_wait_s,
        )
        try:
            await self.dispatcher.launch(node, request)
            log.info("job launched", job_id=job.job_id, node=node.name)
        except CorralError as exc:
            if job.state != js.RUNNING:
                return
            log.warning(
                "launch failed, requeued", job_id=job.job_id, node=node.name, error=str(exc)
            )
            node.late = True  # nothing more goes there until it heartbeats again
            self._requeue(job, cause=f"dispatch:{node.name} unreachable", detail=str(exc))
            await self.store.commit(self._save(job))
            self.wake()
        finally:
            self._launching.discard(job.job_id)

    def _requeue(
        self,
        job: pb.Job,
        *,
        cause: str,
        detail: str,
        run_state: int = pb.JOB_STATE_REQUEUED,
        hold: int = pb.HOLD_NONE,
    ) -> None:
        """Put a RUNNING job back in the queue; it keeps its age and counts a restart.

        The run that ended is kept for sacct -D; with controller.requeue_delay_s the job
        waits (reason BeginTime); --requeue=expedite puts it first in the queue.
        """
        js.check(job, "requeued", cause)  # before anything changes: never half a requeue
        now = self.clock()
        failures.record_run(job, run_state, detail, now)
        self._release(job)
        del job.allocations[:]
        job.nodelist = job.batch_host = ""
        job.start_time = 0
        job.restart_count += 1
        js.transition(job, "requeued", cause=cause, now=now, detail=detail[:512])
        self._fill_request_totals(job)
        job.reason = "Resources"
        delay = self.config.controller.requeue_delay_s
        if delay > 0:
            job.eligible_time = now + delay
            job.reason = "BeginTime"
        if job.spec.requeue_expedite:
            job.admin_priority = job.priority = failures.expedite_priority(
                self.jobs[i] for i in self._pending if i in self.jobs
            )
        if hold != pb.HOLD_NONE:
            job.hold = hold  # type: ignore[assignment]
            job.reason = "JobHeldAdmin" if hold == pb.HOLD_ADMIN else "JobHeldUser"
            job.priority = 0
            js.transition(job, "held", cause=cause, now=now)
        self._enqueue(job)

    # ------------------------------------------------------------ queries

    def priority_weights(self) -> dict[str, int]:
        w = self.priorities.weights
        return {
            "AGE": w.age,
            "FAIRSHARE": w.fairshare,
            "JOBSIZE": w.job_size,
            "PARTITION": w.partition,
            "QOS": w.qos,
        }

    def share_rows(self, accounts: Iterable[str], users: Iterable[str]) -> list[pb.ShareRow]:
        """sshare's rows, with usage as of now (running jobs counted so far)."""
        now = self.clock()
        self.priorities.refresh(now, [j for j in self.jobs.values() if j.state in js.ON_NODE])
        want_accounts, want_users = set(accounts), set(users)
        out = []
        for row in self.priorities.rows:
            if want_accounts and row.account not in want_accounts:
                continue
            if want_users and row.user and row.user not in want_users:
                continue
            out.append(
                pb.ShareRow(
                    account=row.account,
                    user=row.user,
                    depth=row.depth,
                    raw_shares=row.raw_shares,
                    norm_shares=row.norm_shares,
                    raw_usage=row.raw_usage,
                    norm_usage=row.norm_usage,
                    effective_usage=row.effective_usage,
                    fairshare=row.fairshare,
                )
            )
        return out

    def node_list(self, names: Iterable[str]) -> list[pb.Node]:
        wanted = list(names)
        if wanted:
            expanded = [n for expr in wanted for n in hostlist.expand(expr)]
            out = [self._node(n).to_wire() for n in expanded]
        else:
            out = [n.to_wire() for n in self.nodes.values()]
        now = self.clock()
        active: dict[str, pb.Reservation] = {}
        for resv in self.reservations.by_name.values():
            if resv.start_time <= now < resv.end_time:
                for name in hostlist.expand(resv.nodes):
                    active.setdefault(name, resv)
        for node in out:
            holder = active.get(node.name)
            if holder is not None:
                node.reservation, node.maint = holder.name, "MAINT" in holder.flags
        return out

    def partition_list(self, names: Iterable[str]) -> list[pb.Partition]:
        wanted = set(names)
        out = []
        default = self.config.default_partition
        for p in self.config.partitions:
            if wanted and p.name not in wanted:
                continue
            members = [self.nodes[n] for n in p.nodes]
            out.append(
                pb.Partition(
                    name=p.name,
                    nodes=hostlist.compress(list(p.nodes)),
                    is_default=default is not None and default.name == p.name,
                    state=p.state,
                    max_time_s=p.max_time_s,
                    default_time_s=p.default_time_s,
                    max_nodes=p.max_nodes,
                    total_nodes=len(members),
                    total_cpus=sum(n.resources.cpus for n in members),
                    total_gpus=sum(len(n.resources.gpus) for n in members),
                    priority_tier=p.priority_tier,
                    allow_accounts=p.allow_accounts,
                )
            )
        if wanted and not out:
            raise InvalidRequest(f"Partition {sorted(wanted)[0]} not found")
        return out


def _failure(job_id: int, exc: CorralError) -> pb.CancelOutcome:
    """A per-job failure in a multi-job request (scancel, scontrol hold/update/top)."""
    return pb.CancelOutcome(job_id=job_id, ok=False, error=type(exc).__name__, message=exc.message)
