"""The parts of ctld's ``State`` beside its job and node maps, one job each.

- ``JobIndex``: indexes over the job map, kept by the commit step: the queue (pending
  ids in submit order, a memo of their scheduler requests), the active jobs and their
  counts, each array's tasks, every job's revision, what was saved of each job;
- ``Versions``: what tells the scheduler that the state moved (the version a plan is
  checked against, its wake-up);
- ``AccountingView``: what ctld derives from sacctmgr's database (QOS table, limits,
  priorities) and the fair-share usage;
- ``RunHistory``: how finished jobs ran, for predictions and ``corral why``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from corral.config import ClusterConfig
from corral.wire import corral_pb2 as pb
from ctld.model.accounting import Accounting
from ctld.model.jobstate import ON_NODE
from ctld.model.priorities import Priorities
from ctld.model.qos import QosTable
from ctld.model.usage import UsageLedger
from ctld.sched import JobRequest
from ctld.sched.model import LimitSet
from ctld.sched.predict import RunTimePredictor


class JobIndex:
    """Indexes over the job map; each follows the jobs through the commit step."""

    def __init__(self) -> None:
        # pending job ids in queue order, and their scheduler requests (built once)
        self.pending: dict[int, None] = {}
        self.requests: dict[int, JobRequest] = {}
        # pending and running jobs by (account, user, qos): what submit-time limits count
        # (kept by the commit step, so a submit does not walk every job)
        self.active_counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        # ids of the jobs counted there (a superset of the running ones: a pass finds
        # them without walking the finished jobs kept for min_job_age), and each
        # array's tasks in memory (scancel N, squeue -j N without a walk)
        self.active_ids: set[int] = set()
        # ids of the jobs holding resources on nodes (RUNNING, COMPLETING): what each
        # snapshot build and the monitor read, without walking 100,000 pending ones
        self.on_node_ids: set[int] = set()
        self.array_tasks: dict[int, set[int]] = {}
        # the job ids in memory, ascending: GetJobs pages past an id by bisection, not
        # by sorting the map each page. A new id (the largest: ids only grow) is
        # appended; a forgotten one stays until they are a quarter of the list
        self._ids_sorted: list[int] = []
        self._ids_stale = True
        self._ids_gone = 0
        # job id -> revision, bumped on every change (persisted or not) to the job
        self.revisions: dict[int, int] = {}
        # how many of each job's events are in the store, and the runs of requeued jobs
        # that ended since the job was last saved (job_runs rows)
        self.saved_events: dict[int, int] = {}
        self.ended_runs: dict[int, list[pb.Job]] = {}
        self.launching: set[int] = set()  # jobs whose LaunchJob RPC is in flight
        self.gone: dict[int, pb.Job | None] = {}  # purged jobs a dependency asked about
        # finished jobs kept compact (ctld/model/records.py): their script and environment
        self.held_spec: dict[int, bytes] = {}

    def add(self, job: pb.Job) -> None:
        if job.array_job_id:
            self.array_tasks.setdefault(job.array_job_id, set()).add(job.job_id)
        self.placed(job)
        ids = self._ids_sorted
        if not self._ids_stale and (not ids or job.job_id > ids[-1]):
            ids.append(job.job_id)
        else:
            self._ids_stale = True

    def placed(self, job: pb.Job) -> None:
        """Note whether ``job`` now holds resources on nodes (the commit step calls it
        for every job a change touched)."""
        if job.state in ON_NODE:
            self.on_node_ids.add(job.job_id)
        else:
            self.on_node_ids.discard(job.job_id)

    def ids_sorted(self, jobs: dict[int, pb.Job]) -> list[int]:
        """Every id of ``jobs`` (the job map this index follows), ascending, and perhaps
        some forgotten since (a reader skips an id ``jobs`` no longer has)."""
        if self._ids_stale or self._ids_gone > max(1024, len(self._ids_sorted) // 4):
            self._ids_sorted, self._ids_stale, self._ids_gone = sorted(jobs), False, 0
        return self._ids_sorted

    def forget(self, job: pb.Job) -> None:
        self._ids_gone += 1
        self.on_node_ids.discard(job.job_id)
        array_id = job.array_job_id
        if array_id and (tasks := self.array_tasks.get(array_id)) is not None:
            tasks.discard(job.job_id)
            if not tasks:
                del self.array_tasks[array_id]
        self.saved_events.pop(job.job_id, None)
        self.revisions.pop(job.job_id, None)
        self.held_spec.pop(job.job_id, None)

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

    def touch(self, job: pb.Job) -> None:
        """Note that ``job`` changed (readers cache what they derive from it by revision)."""
        self.revisions[job.job_id] = self.revisions.get(job.job_id, 0) + 1

    def enqueue(self, job: pb.Job, jobs: dict[int, pb.Job]) -> None:
        """Put a PENDING job in the queue, ordered by submit time (requeues keep their age)."""
        self.requests.pop(job.job_id, None)
        last = jobs.get(next(reversed(self.pending))) if self.pending else None
        if last is not None and job.submit_time < last.submit_time:
            queued = [i for i in self.pending if i in jobs]
            order = sorted([*queued, job.job_id], key=lambda i: (jobs[i].submit_time, i))
            self.pending = dict.fromkeys(order)
        else:
            self.pending[job.job_id] = None

    def dequeue(self, job_id: int) -> None:
        self.pending.pop(job_id, None)
        self.requests.pop(job_id, None)


class Versions:
    """What a plan is checked against, and the scheduler's wake-up."""

    def __init__(self, check_release: Callable[[], bool] | None = None) -> None:
        self.version = 0  # bumped on every change a scheduling pass depends on
        # the bumps of ``version`` by submits and starts at submit: when nothing else
        # moved it since a pass, that pass's waiting jobs still cannot start
        self.arrivals = 0
        # the bumps by changes that only ended jobs: they free resources, so jobs the
        # last pass left waiting may start; a start at submit then weighs them too
        self.releases = 0
        # the scheduler's check of an end (True: it decides whether a pass is needed)
        self.check_release = check_release
        self.wake_event = asyncio.Event()

    def wake(self) -> None:
        """Ask for a scheduling pass; many wake-ups before it runs coalesce into one."""
        self.version += 1
        self.wake_event.set()


class AccountingView:
    """sacctmgr's database (seeded from the config until the store is loaded), what ctld
    derives from it (``State.install_accounting`` refreshes that) and the usage ledger."""

    def __init__(self, config: ClusterConfig, usage_factor: Callable[[str], float]) -> None:
        self.ledger = UsageLedger(config.priority, usage_factor)
        self.priorities = Priorities(config, self.ledger)
        self.qos = QosTable(config)  # the one QOS lookup
        self.accounting = Accounting(config)
        self.limits = LimitSet()
        self.version = 0  # bumped by every install


class RunHistory:
    """How finished jobs ran: how far they ran into their limits, and run times per
    user for predictions (a job's prediction as its request was last built is kept
    while it runs)."""

    def __init__(self) -> None:
        self.recent: collections.deque[tuple[float, float]] = collections.deque(maxlen=2000)
        self.predictor = RunTimePredictor()
        self.predicted: dict[int, int] = {}

    def remember(self, job: pb.Job) -> None:
        self.predicted.pop(job.job_id, None)
        if job.start_time > 0 and job.end_time >= job.start_time:
            elapsed = job.end_time - job.start_time
            self.predictor.observe(job.user, elapsed, job.time_limit_s)
            if job.time_limit_s > 0:
                self.recent.append((elapsed, float(job.time_limit_s)))
