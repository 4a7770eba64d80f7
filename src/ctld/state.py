"""What ctld knows: the job and node maps, the queue index, and how a change is committed.

Every module that changes ctld's state gets this one object. The in-memory state is
authoritative while ctld runs, and every change is committed to the store before it
is acknowledged or acted on (write-ahead). All methods run on the one asyncio loop, so
there is no locking; the only concurrency is the store's writer thread, which commits
in queue order.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import pwd
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import structlog

from corral.clock import Clock
from corral.config import ClusterConfig
from corral.errors import InvalidJobId, InvalidNodeName
from corral.wire import corral_pb2 as pb
from ctld import jobstate as js
from ctld.accounting import Accounting
from ctld.gpu_samples import GpuSamples
from ctld.live import LiveFigures
from ctld.nodes import NodeRecord
from ctld.priorities import Priorities
from ctld.qos import QosTable
from ctld.reservations import Reservations
from ctld.sched import JobRequest, job_shape
from ctld.sched.model import LimitSet
from ctld.sched.predict import RunTimePredictor
from ctld.store import Op, Store, insert_job, update_job
from ctld.usage import UsageLedger
from ctld.validate import NodeCapacity, request_from_spec, set_totals
from ctld.victims import Preemptions

log = structlog.get_logger("ctld")


class State:
    def __init__(self, config: ClusterConfig, store: Store, *, clock: Clock) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.jobs: dict[int, pb.Job] = {}
        self.nodes: dict[str, NodeRecord] = {}
        for entry in config.nodes:
            for name in entry.names:
                parts = [p.name for p in config.partitions if name in p.nodes]
                self.nodes[name] = NodeRecord(name=name, config=entry, partitions=parts)
        self.next_job_id = 1
        self.version = 0  # bumped on every change a scheduling pass depends on
        # the bumps of ``version`` by submits and starts at submit: when nothing else
        # moved it since a pass, that pass's waiting jobs still cannot start
        self.arrivals = 0
        # the bumps by changes that only ended jobs: they free resources, so jobs the
        # last pass left waiting may start; a start at submit then weighs them too
        self.releases = 0
        # the scheduler's check of an end (True: it decides whether a pass is needed)
        self.check_release: Callable[[], bool] | None = None
        self.start_time = clock()
        self.saved_events: dict[int, int] = {}
        # runs of requeued jobs that ended since the job was last saved (job_runs rows)
        self.ended_runs: dict[int, list[pb.Job]] = {}
        # job id -> revision, bumped on every change (persisted or not) to the job
        self.revisions: dict[int, int] = {}
        self._capacity: dict[str, tuple[pb.NodeResources, NodeCapacity]] = {}
        # pending job ids in queue order, and their scheduler requests (built once)
        self.pending: dict[int, None] = {}
        self.requests: dict[int, JobRequest] = {}
        self.wake_event = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.launching: set[int] = set()  # jobs whose LaunchJob RPC is in flight
        self.ledger = UsageLedger(config.priority, self._usage_factor)
        self.priorities = Priorities(config, self.ledger)
        self.reservations = Reservations(config, clock)
        self.gone: dict[int, pb.Job | None] = {}  # purged jobs a dependency asked about
        # (elapsed, time limit) of recently finished jobs: how far jobs run into limits
        self.history: collections.deque[tuple[float, float]] = collections.deque(maxlen=2000)
        # run times per user, for predictions (scheduler.predict); a job's prediction
        # as its request was last built, kept while it runs
        self.predictor = RunTimePredictor()
        self.predicted: dict[int, int] = {}
        # sacctmgr's database (seeded from the config until the store is loaded); what
        # ctld derives from it is refreshed by install_accounting
        self.qos = QosTable(config)  # the one QOS lookup: install_accounting refreshes it
        self.preemptions = Preemptions()
        self.gpu_samples = GpuSamples()  # noded's GPU samples: each GPU now, each job's series
        self.accounting = Accounting(config)
        # pending and running jobs by (account, user, qos): what submit-time limits count
        # (kept by the commit step, so a submit does not walk every job)
        self.active_counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        # ids of the jobs counted there (a superset of the running ones: a pass finds
        # them without walking the finished jobs kept for min_job_age), and each
        # array's tasks in memory (scancel N, squeue -j N without a walk)
        self.active_ids: set[int] = set()
        self.array_tasks: dict[int, set[int]] = {}
        self.limits = LimitSet()
        self.accounting_version = 0
        # told of every committed change's jobs and their new events, once durable
        # (metrics' counters and histograms, mail): they must not raise or block
        self.live = LiveFigures()  # the nodes' last samples: sstat, the metrics
        self.observers: list[Callable[[pb.Job, Sequence[pb.JobEvent]], None]] = []
        self.install_accounting(self.accounting)

    def _usage_factor(self, qos: str) -> float:
        return next((q.usage_factor for q in self.config.qos if q.name == qos), 1.0)

    def install_accounting(self, acc: Accounting) -> None:
        """Make ``acc`` the accounting database everything reads: the QOS table (the
        config's ``qos``, which priorities and preemption read), the fair-share tree and
        the limits the scheduler enforces."""
        self.accounting = acc
        self.config = dataclasses.replace(self.config, qos=acc.qos_table())
        self.priorities.set_qos(self.config.qos)
        self.qos.replace(self.config.qos)
        self.priorities.set_tree(acc.share_tree())
        self.priorities.with_users(
            (j.account, j.user) for j in self.jobs.values() if j.state in js.ACTIVE
        )
        self.limits = acc.limit_set()
        self.accounting_version += 1
        self.wake()  # a limit raised may let jobs start

    # ------------------------------------------------------------ loading

    def load(self) -> None:
        """Rebuild the state from the store (the truth) after a start or restart."""
        now = self.clock()
        acc = Accounting(self.config)
        acc.load(self.store.load_accounting())
        self.install_accounting(acc)
        self.next_job_id = self.store.next_job_id()
        loaded = self.store.load_jobs(
            active_states=js.ACTIVE, finished_after=now - self.config.controller.min_job_age_s
        )
        for job in loaded:
            self.add(job)
            self.saved_events[job.job_id] = len(job.events)
            if job.state in js.ACTIVE:
                self.count_active(job, +1)
            if job.state == js.PENDING:
                self.enqueue(job)
            if job.state in js.ON_NODE:
                for alloc in job.allocations:
                    node = self.nodes.get(alloc.node)
                    if node is not None:
                        node.allocate(
                            job.job_id,
                            alloc.cpus,
                            alloc.mem_mb,
                            list(alloc.gpu_indices),
                            alloc.shards,
                        )
        self.reservations.load(self.store.load_reservations())
        for drain in self.store.load_drains():
            if (node := self.nodes.get(drain.name)) is not None:
                node.drain = True
                node.set_reason(
                    drain.reason,
                    drain.reason_time,
                    user=user_name(drain.reason_uid),
                    uid=drain.reason_uid,
                )
        for down in self.store.load_downs():  # an operator's DOWN outlives a restart
            if (node := self.nodes.get(down.name)) is not None:
                node.down = node.admin_down = True
                node.set_reason(
                    down.reason,
                    down.reason_time,
                    user=user_name(down.reason_uid),
                    uid=down.reason_uid,
                )
        horizon = now - 10 * self.config.priority.decay_half_life_s  # older adds < 0.1%
        for job in sorted(self.store.finished_since(horizon), key=lambda j: j.end_time):
            self.ledger.add_finished(job)
            self.remember_run(job)
        for run in self.store.earlier_runs_since(horizon):  # requeued jobs' earlier runs
            self.ledger.add_finished(run)
        self.priorities.with_users((j.account, j.user) for j in loaded)
        log.info("state loaded", jobs=len(loaded), next_job_id=self.next_job_id)
        self.wake()

    def forget_finished(self) -> None:
        """Forget finished jobs older than min_job_age (they stay in the store for sacct)."""
        horizon = self.clock() - self.config.controller.min_job_age_s
        for job_id in [
            j.job_id for j in self.jobs.values() if j.state in js.FINISHED and j.end_time < horizon
        ]:
            array_id = self.jobs.pop(job_id).array_job_id
            if array_id and (tasks := self.array_tasks.get(array_id)) is not None:
                tasks.discard(job_id)
                if not tasks:
                    del self.array_tasks[array_id]
            self.saved_events.pop(job_id, None)
            self.revisions.pop(job_id, None)

    def add(self, job: pb.Job) -> None:
        """A job enters memory (loaded, or committed at submit)."""
        self.jobs[job.job_id] = job
        if job.array_job_id:
            self.array_tasks.setdefault(job.array_job_id, set()).add(job.job_id)

    def count_active(self, job: pb.Job, step: int) -> None:
        """``job`` entered (+1) or left (-1) the active states."""
        key = (job.account, job.user, job.qos)
        self.active_counts[key] += step
        if self.active_counts[key] <= 0:
            del self.active_counts[key]
        if step > 0:
            self.active_ids.add(job.job_id)
        else:
            self.active_ids.discard(job.job_id)

    def array(self, array_id: int) -> list[pb.Job]:
        """The tasks of array ``array_id`` in memory, by job id."""
        return [self.jobs[i] for i in sorted(self.array_tasks.get(array_id, ()))]

    def on_node(self) -> list[pb.Job]:
        """The jobs holding resources on nodes (RUNNING or COMPLETING), by job id (the
        order of ``jobs``: ids only grow)."""
        jobs = self.jobs
        ids = sorted(
            i for i in self.active_ids if (j := jobs.get(i)) is not None and j.state in js.ON_NODE
        )
        return [jobs[i] for i in ids]

    # ------------------------------------------------------------ the queue

    def enqueue(self, job: pb.Job) -> None:
        """Put a PENDING job in the queue, ordered by submit time (requeues keep their age)."""
        self.requests.pop(job.job_id, None)
        last = self.jobs.get(next(reversed(self.pending))) if self.pending else None
        if last is not None and job.submit_time < last.submit_time:
            queued = [i for i in self.pending if i in self.jobs]
            order = sorted([*queued, job.job_id], key=lambda i: (self.jobs[i].submit_time, i))
            self.pending = dict.fromkeys(order)
        else:
            self.pending[job.job_id] = None

    def wake(self) -> None:
        """Ask for a scheduling pass; many wake-ups before it runs coalesce into one."""
        self.version += 1
        self.wake_event.set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ------------------------------------------------------------ persistence

    def observe(self, told: Sequence[tuple[pb.Job, Sequence[pb.JobEvent]]]) -> None:
        for job, events in told:
            if not events:
                continue
            for observer in self.observers:
                try:
                    observer(job, events)
                except Exception:  # an observer's bug never fails a durable change
                    log.exception("job observer failed", job_id=job.job_id)

    def touch(self, job: pb.Job) -> None:
        """Note that ``job`` changed (readers cache what they derive from it by revision)."""
        self.revisions[job.job_id] = self.revisions.get(job.job_id, 0) + 1

    def save(self, job: pb.Job, *, new: bool = False) -> Op:
        self.touch(job)
        start = self.saved_events.get(job.job_id, 0)
        if new:
            op = insert_job(job)
        else:
            runs = self.ended_runs.pop(job.job_id, [])
            op = update_job(job, job.events[start:], runs)
        self.saved_events[job.job_id] = len(job.events)
        return op

    # ------------------------------------------------------------ lookups

    def job(self, job_id: int) -> pb.Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise InvalidJobId()
        return job

    def node(self, name: str) -> NodeRecord:
        node = self.nodes.get(name)
        if node is None:
            raise InvalidNodeName(f"Invalid node name specified: {name}")
        return node

    def lookup(self, job_id: int) -> pb.Job | None:
        """A job in memory, or (once, then cached: it has ended) from the store."""
        job = self.jobs.get(job_id)
        if job is not None:
            return job
        if job_id not in self.gone:
            found = self.store.query_jobs(
                job_ids=[job_id], users=[], states=[], start_after=0, end_before=0, limit=1
            )
            self.gone[job_id] = found[0] if found else None
        return self.gone[job_id]

    def capacity(self) -> dict[str, NodeCapacity]:
        # every submit asks: each node's entry is rebuilt only when it registered anew
        cache = self._capacity
        out = {}
        for n in self.nodes.values():
            hit = cache.get(n.name)
            if hit is None or hit[0] is not n.resources:
                res = n.resources
                hit = (
                    res,
                    NodeCapacity(
                        n.name,
                        res.cpus,
                        res.memory_mb,
                        len(res.gpus),
                        n.gpu_type,
                        n.config.gpus.shards_per_gpu,
                    ),
                )
                cache[n.name] = hit
            out[n.name] = hit[1]
        return out

    # ------------------------------------------------------------ shared bookkeeping

    def release(self, job: pb.Job) -> None:
        for alloc in job.allocations:
            node = self.nodes.get(alloc.node)
            if node is not None:
                node.release(
                    job.job_id, alloc.cpus, alloc.mem_mb, list(alloc.gpu_indices), alloc.shards
                )

    def remember_run(self, job: pb.Job) -> None:
        self.predicted.pop(job.job_id, None)
        if job.start_time > 0 and job.end_time >= job.start_time:
            elapsed = job.end_time - job.start_time
            self.predictor.observe(job.user, elapsed, job.time_limit_s)
            if job.time_limit_s > 0:
                self.history.append((elapsed, float(job.time_limit_s)))


def fill_request_totals(job: pb.Job) -> None:
    """What squeue shows for a pending job (a requeued one: its allocation's are gone)."""
    set_totals(job, job_shape(request_from_spec(job.spec)))


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
