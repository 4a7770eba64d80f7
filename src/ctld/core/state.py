"""What ctld knows: the job and node maps, the queue index, and how a change is committed.

Every module that changes ctld's state gets this one object. The in-memory state is
authoritative while ctld runs, and every change is committed to the store before it
is acknowledged or acted on (write-ahead). All methods run on the one asyncio loop, so
there is no locking; the only concurrency is the store's writer thread, which commits
in queue order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pwd
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

import structlog

from corral.clock import Clock
from corral.config import ClusterConfig, NodeConfig
from corral.errors import InvalidJobId, InvalidNodeName
from corral.wire import corral_pb2 as pb
from ctld.core.state_parts import AccountingView, JobIndex, RunHistory, Versions
from ctld.model import jobstate as js
from ctld.model import nodestate, records
from ctld.model.accounting import Accounting
from ctld.model.gpu_samples import GpuSamples
from ctld.model.live import LiveFigures
from ctld.model.nodes import NodeRecord
from ctld.model.reservations import Reservations
from ctld.model.validate import NodeCapacity, request_from_spec, totals
from ctld.model.victims import Preemptions
from ctld.sched import job_shape
from ctld.storage.store import NodeDrain, NodePower, Store

log = structlog.get_logger("ctld")


class State:
    """The job and node maps, and the parts kept beside them (``ctld/core/state_parts.py``):
    ``index`` (the queue and the other indexes over the jobs), ``versions`` (what a plan
    is checked against, the scheduler's wake-up), ``acct`` (the accounting database and
    what ctld derives from it), ``runs`` (how finished jobs ran), and the reservations
    and preemptions under way."""

    def __init__(
        self,
        config: ClusterConfig,
        store: Store,
        *,
        clock: Clock,
        check_release: Callable[[], bool] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.start_time = clock()
        self.next_job_id = 1
        self.jobs: dict[int, pb.Job] = {}
        self.nodes: dict[str, NodeRecord] = {}
        for entry in config.nodes:
            for name in entry.names:
                self.nodes[name] = self._new_node(name, entry, config)
        self._capacity: dict[str, tuple[pb.NodeResources, NodeCapacity]] = {}
        self.index = JobIndex()
        self.versions = Versions(check_release)
        self.acct = AccountingView(config, self._usage_factor)
        self.runs = RunHistory()
        self.reservations = Reservations(config, clock)
        self.preemptions = Preemptions()
        self.tasks: set[asyncio.Task[None]] = set()
        self.live = LiveFigures()  # the nodes' last samples: sstat, the metrics
        self.gpu_samples = GpuSamples()  # noded's GPU samples: each GPU now, each job's series
        # told of every committed change's jobs and their new events, once durable
        # (metrics' counters and histograms, mail): they must not raise or block
        self.observers: list[Callable[[pb.Job, Sequence[pb.JobEvent]], None]] = []
        self.install_accounting(self.acct.accounting)

    def _new_node(self, name: str, entry: NodeConfig, config: ClusterConfig) -> NodeRecord:
        parts = [p.name for p in config.partitions if name in p.nodes]
        node = NodeRecord(name=name, config=entry, partitions=parts)
        if entry.cloud:  # off until a job needs it (Slurm's State=CLOUD)
            row = NodeDrain(name, "", self.clock(), 0, "config:cloud")
            nodestate.restore(node, "cloud", row, "root")
        return node

    def install_nodes(self, config: ClusterConfig, kept: StoredNodes) -> None:
        """The nodes of ``config`` (a reconfigure; ctld/control/reconfig_apply.py): a node gone
        from it leaves the map (it holds no job: the reconfigure refused otherwise); a
        new one comes in as a start makes it, with what the store keeps for its name (a
        drain, an operator's DOWN, its power state: ``kept``); the others take their
        partitions and their entry. Dynamic nodes stay (their partitions are in
        ``config`` already)."""
        entries = {name: entry for entry in config.nodes for name in entry.names}
        for name in [n for n, node in self.nodes.items() if n not in entries and not node.dynamic]:
            del self.nodes[name]
            self._capacity.pop(name, None)
            self.live.forget(name)
            self.gpu_samples.latest.pop(name, None)
        for name, entry in entries.items():
            node = self.nodes.get(name)
            if node is None:
                node = self.nodes[name] = self._new_node(name, entry, config)
                self._restore(node, kept)
            elif node.config != entry:
                node.config = entry
        for node in self.nodes.values():
            parts = [p.name for p in config.partitions if node.name in p.nodes]
            if parts != node.partitions:
                node.partitions = parts

    def _restore(self, node: NodeRecord, kept: StoredNodes) -> None:
        """What the store keeps of ``node`` read back into it, as ``load`` does."""
        for event, rows in (("drained", kept.drains), ("downed", kept.downs)):
            for row in rows:
                if row.name == node.name:
                    nodestate.restore(node, event, row, user_name(row.reason_uid))
        for power in kept.power:
            if power.name == node.name:
                nodestate.restore_power(node, power)

    def _usage_factor(self, qos: str) -> float:
        return next((q.usage_factor for q in self.config.qos if q.name == qos), 1.0)

    def install_accounting(self, acc: Accounting) -> None:
        """Make ``acc`` the accounting database everything reads: the QOS table (the
        config's ``qos``, which priorities and preemption read), the fair-share tree and
        the limits the scheduler enforces."""
        view = self.acct
        view.accounting = acc
        self.config = dataclasses.replace(self.config, qos=acc.qos_table())
        view.priorities.set_qos(self.config.qos)
        view.qos.replace(self.config.qos)
        view.priorities.set_tree(acc.share_tree())
        view.priorities.with_users(
            (j.account, j.user) for j in self.jobs.values() if j.state in js.ACTIVE
        )
        view.limits = acc.limit_set()
        view.version += 1
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
            self.index.saved_events[job.job_id] = len(job.events)
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
        # a drain and an operator's DOWN outlive a restart, with their cause
        kept = self.stored_nodes()
        for node in self.nodes.values():  # powered down stays so (not judged silent)
            self._restore(node, kept)
        horizon = now - 10 * self.config.priority.decay_half_life_s  # older adds < 0.1%
        for job in sorted(self.store.finished_since(horizon), key=lambda j: j.end_time):
            self.acct.ledger.add_finished(job)
            self.runs.remember(job)
        for run in self.store.earlier_runs_since(horizon):  # requeued jobs' earlier runs
            self.acct.ledger.add_finished(run)
        self.acct.priorities.with_users((j.account, j.user) for j in loaded)
        self.compact(list(self.jobs))  # nothing holds the loaded records yet
        log.info("state loaded", jobs=len(loaded), next_job_id=self.next_job_id)
        self.wake()

    def stored_nodes(self) -> StoredNodes:
        """What the store keeps of nodes: drains, operators' DOWNs, power states."""
        st = self.store
        return StoredNodes(st.load_drains(), st.load_downs(), st.load_power())

    def forget_finished(self) -> None:
        """Forget finished jobs older than min_job_age (they stay in the store for sacct);
        keep the younger ones compact (ctld/model/records.py)."""
        horizon = self.clock() - self.config.controller.min_job_age_s
        for job_id in [
            j.job_id for j in self.jobs.values() if j.state in js.FINISHED and j.end_time < horizon
        ]:
            self.index.forget(self.jobs.pop(job_id))
        self.compact_finished()

    def compact_finished(self) -> None:
        """Finished jobs not yet compact lose their script and environment (held aside)."""
        held = self.index.held_spec
        self.compact([i for i, j in self.jobs.items() if j.state in js.FINISHED and i not in held])

    def compact(self, job_ids: Sequence[int]) -> None:
        """These jobs' records made compact (ctld/model/records.py): only where nothing else
        holds them, as the record is replaced."""
        held = self.index.held_spec
        for job_id in job_ids:
            if job_id not in held:
                self.jobs[job_id], held[job_id] = records.compact(self.jobs[job_id])

    def whole(self, job: pb.Job) -> pb.Job:
        """``job`` with its script and environment (a copy if it is kept compact)."""
        return records.whole(job, self.index.held_spec.get(job.job_id))

    def add(self, job: pb.Job) -> None:
        """A job enters memory (loaded, or committed at submit)."""
        self.jobs[job.job_id] = job
        self.index.add(job)

    def count_active(self, job: pb.Job, step: int) -> None:
        """``job`` entered (+1) or left (-1) the active states."""
        self.index.count_active(job, step)

    def array(self, array_id: int) -> list[pb.Job]:
        """The tasks of array ``array_id`` in memory, by job id."""
        return [self.jobs[i] for i in sorted(self.index.array_tasks.get(array_id, ()))]

    def on_node(self) -> list[pb.Job]:
        """The jobs holding resources on nodes (RUNNING or COMPLETING), by job id (the
        order of ``jobs``: ids only grow); O(running), whatever the queue's depth."""
        jobs = self.jobs
        ids = sorted(
            i
            for i in self.index.on_node_ids
            if (j := jobs.get(i)) is not None and j.state in js.ON_NODE
        )
        return [jobs[i] for i in ids]

    # ------------------------------------------------------------ the queue

    def enqueue(self, job: pb.Job) -> None:
        """Put a PENDING job in the queue, ordered by submit time (requeues keep their age)."""
        self.index.enqueue(job, self.jobs)

    def wake(self) -> None:
        """Ask for a scheduling pass; many wake-ups before it runs coalesce into one."""
        self.versions.wake()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ------------------------------------------------------------ persistence

    def observe(self, told: Sequence[tuple[pb.Job, Sequence[pb.JobEvent]]]) -> None:
        """Tell the observers what each job of a durable change went through."""
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
        self.index.touch(job)

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
        gone = self.index.gone
        if job_id not in gone:
            found = self.store.query_jobs(
                job_ids=[job_id], users=[], states=[], start_after=0, end_before=0, limit=1
            )
            gone[job_id] = found[0] if found else None
        return gone[job_id]

    def capacity(self) -> Capacities:
        """What each node has (every submit asks, for the nodes it looks at)."""
        return Capacities(self.nodes, self._capacity)

    # ------------------------------------------------------------ shared bookkeeping

    def release(self, job: pb.Job) -> None:
        for alloc in job.allocations:
            node = self.nodes.get(alloc.node)
            if node is not None:
                node.release(
                    job.job_id, alloc.cpus, alloc.mem_mb, list(alloc.gpu_indices), alloc.shards
                )

    def remember_run(self, job: pb.Job) -> None:
        self.runs.remember(job)


@dataclasses.dataclass(frozen=True)
class StoredNodes:
    """What the store keeps of nodes beyond a restart (read back at load, and for a node
    a reconfigure adds)."""

    drains: Sequence[NodeDrain] = ()
    downs: Sequence[NodeDrain] = ()
    power: Sequence[NodePower] = ()


class Capacities(Mapping[str, NodeCapacity]):
    """Each node's capacity, made when asked for and rebuilt only when it registered
    anew: a submit looks at the nodes until enough fit, not at every node."""

    def __init__(
        self, nodes: dict[str, NodeRecord], cache: dict[str, tuple[pb.NodeResources, NodeCapacity]]
    ) -> None:
        self.nodes = nodes
        self.cache = cache

    def __getitem__(self, name: str) -> NodeCapacity:
        n = self.nodes[name]
        hit = self.cache.get(name)
        if hit is None or hit[0] is not n.resources:
            res = n.resources
            capacity = NodeCapacity(
                n.name, res.cpus, res.memory_mb, len(res.gpus), n.gpu_type,
                n.config.gpus.shards_per_gpu,
            )  # fmt: skip
            hit = self.cache[name] = (res, capacity)
        return hit[1]

    def __contains__(self, name: object) -> bool:
        return name in self.nodes

    def __iter__(self) -> Iterator[str]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)


def request_totals(spec: pb.JobSpec) -> js.Fields:
    """What squeue shows for a pending job (a requeued one: its allocation's are gone)."""
    return dict(totals(spec, job_shape(request_from_spec(spec))))


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
