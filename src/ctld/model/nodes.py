"""ctld's view of one node: what it has, what is allocated on it, whether it is usable."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from corral.config import NodeConfig
from corral.gres import gpu_type_from_model
from corral.storytext import NODE_HISTORY
from corral.wire import corral_pb2 as pb

NS = pb.NodeState
POWER_ON = pb.NODE_POWER_ON
POWERED_DOWN = pb.NODE_POWER_POWERED_DOWN
POWERING_UP = pb.NODE_POWER_POWERING_UP
POWERING_DOWN = pb.NODE_POWER_POWERING_DOWN
HISTORY = NODE_HISTORY  # a node's recent changes kept, in memory (corral history NODE)

# what the scheduler's view of a node is made of (node_views.py): setting one of these
# logs the node's name in VIEW_CHANGES (its allocations move ``alloc_rev``)
VIEW_INPUTS = frozenset(
    {
        "alloc_rev",
        "resources",
        "config",
        "registered",
        "responding",
        "power",
        "power_since",
        "power_down_pending",
        "drain",
        "down",
        "late",
        "fencing",
    }
)


class ViewChanges:
    """The names of the nodes whose view inputs were set, in order, for every reader
    (each remembers how far it read). Past ``LIMIT`` names the log starts over in a new
    ``epoch``: a reader of an older one looks at every node again."""

    LIMIT = 100_000

    def __init__(self) -> None:
        self.epoch = 0
        self.log: list[str] = []

    def add(self, name: str) -> None:
        if len(self.log) >= self.LIMIT:
            self.log = []
            self.epoch += 1
        self.log.append(name)


# one for the process: nodes of several clusters (tests) share it, harmlessly (a reader
# looks again at a node of its own that has the same name)
VIEW_CHANGES = ViewChanges()


@dataclass(frozen=True)
class NodeEvent:
    """A node's change (``ctld/model/nodestate.py``): what happened, who or what made it (its
    cause), and when."""

    event: str
    cause: str
    time: float
    detail: str = ""

    def to_wire(self) -> pb.NodeChange:
        return pb.NodeChange(event=self.event, cause=self.cause, time=self.time, detail=self.detail)


@dataclass
class NodeRecord:
    name: str
    config: NodeConfig
    partitions: list[str]
    resources: pb.NodeResources = field(default_factory=pb.NodeResources)
    address: str = ""  # where srun reaches its tasks
    agent_address: str = ""  # where ctld reaches NodeAgent (mutual TLS); "": address
    stream_address: str = ""  # srun's framed task stream (noded/stream.py)
    instance: str = ""  # the registered noded's instance token (a new one each start)
    # the registered noded took over all its predecessor ran (supervisors kept it): a
    # new instance that did is no restart of the node's jobs
    took_over: bool = False
    restarted_at: float = 0.0  # when another noded than the known one last registered
    registered: bool = False
    responding: bool = False
    down: bool = False  # declared DOWN (silent past heartbeat.timeout_s, or an operator's)
    late: bool = False  # a heartbeat is overdue (Slurm's NOT_RESPONDING, "*")
    admin_down: bool = False  # an operator's State=DOWN: it stays DOWN until RESUME
    fencing: bool = False  # back with jobs it may not keep: nothing placed until they are gone
    drain: bool = False
    reason: str = ""
    reason_time: float = 0.0
    reason_user: str = ""
    reason_uid: int = 0
    last: NodeEvent | None = None  # its last change, with its cause (nodestate.py)
    reason_change: NodeEvent | None = None  # the change that set ``reason``
    # its recent changes, oldest first (nodestate.py appends each, ``last`` included)
    history: deque[NodeEvent] = field(
        default_factory=lambda: deque(maxlen=HISTORY), compare=False, repr=False
    )
    last_heartbeat: float = 0.0
    deaf_mark: float = 0.0  # ctld's stalled seconds (loopwatch) when last_heartbeat was set
    heard_deaf_s: float = 0.0  # its last beat said it had not heard ctld this long
    boot_time: float = 0.0
    version: str = ""
    os: str = ""
    alloc_cpus: int = 0
    alloc_mem_mb: int = 0
    alloc_gpus: set[int] = field(default_factory=set)  # GPUs given whole
    alloc_shards: dict[int, int] = field(default_factory=dict)  # shared GPU -> shards given
    job_ids: set[int] = field(default_factory=set)
    # moved on by every allocate and release: the snapshot's view of the node is rebuilt
    # only when this, its resources or whether it is schedulable changed (snapshot.py)
    alloc_rev: int = field(default=0, compare=False)
    # power saving (nodestate.py's power events; ctld/powersave/power.py decides when)
    power: int = POWER_ON  # pb.NodePower
    power_since: float = 0.0  # when ``power`` last changed
    power_down_pending: bool = False  # POWER_DOWN asked: powered down once idle ("!")
    powered_down_s: float = 0.0  # seconds powered down before ``power_since`` (energy)
    dynamic: bool = False  # registered without being in the config (slurmd -Z)

    def __post_init__(self) -> None:
        if not self.resources.cpus and self.config.cpus:
            # configured size stands in until the node registers its real one
            self.resources.cpus = self.config.cpus
            self.resources.memory_mb = self.config.memory_mb
            for i in range(self.config.gpus.count):
                self.resources.gpus.add(
                    index=i, model=self.config.gpus.model, memory_mb=self.config.gpus.memory_mb
                )

    # derived from ``resources`` once per registration, not on every pass and submit (a
    # regex and a walk over proto messages, times 1,000 nodes, dominated both)
    _derived_from: pb.NodeResources | None = field(default=None, repr=False, compare=False)
    _gpu_type: str = field(default="", repr=False, compare=False)
    _gpu_indices: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _features: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def _derive(self) -> None:
        res = self.resources
        if self._derived_from is res:
            return
        if self.config.gpus.type:
            self._gpu_type = self.config.gpus.type
        else:
            self._gpu_type = gpu_type_from_model(res.gpus[0].model) if res.gpus else ""
        self._gpu_indices = tuple(sorted(g.index for g in res.gpus))
        self._features = frozenset(res.features)
        self._derived_from = res

    @property
    def gpu_type(self) -> str:
        self._derive()
        return self._gpu_type

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        self._derive()
        return self._gpu_indices

    @property
    def features(self) -> frozenset[str]:
        """What it registered (NodeResources.features): "container" (its runtime)."""
        self._derive()
        return self._features

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name in VIEW_INPUTS:
            VIEW_CHANGES.add(self.name)

    @property
    def schedulable(self) -> bool:
        return (
            self.registered
            and self.responding
            and self.power == POWER_ON
            and not (self.drain or self.down or self.late or self.fencing)
            and not self.power_down_pending
        )

    def powered_down_for(self, now: float) -> float:
        """Seconds this node has been powered down since ctld started, up to ``now``."""
        if self.power == POWERED_DOWN:
            return self.powered_down_s + max(0.0, now - self.power_since)
        return self.powered_down_s

    @property
    def state(self) -> int:
        busy = bool(self.job_ids)
        if self.drain:
            return NS.NODE_STATE_DRAINING if busy else NS.NODE_STATE_DRAIN
        if self.down or (self.registered and not self.responding):
            return NS.NODE_STATE_DOWN
        if not self.registered and self.power == POWER_ON:
            return NS.NODE_STATE_UNKNOWN
        if not busy:
            return NS.NODE_STATE_IDLE
        full = self.alloc_cpus >= self.resources.cpus or (
            bool(self.resources.gpus) and self.gpus_in_use() >= len(self.resources.gpus)
        )
        return NS.NODE_STATE_ALLOCATED if full else NS.NODE_STATE_MIXED

    def allocate(
        self, job_id: int, cpus: int, mem_mb: int, gpus: list[int], shards: int = 0
    ) -> None:
        """``shards``: of ``gpus[0]`` (shared); the rest of ``gpus`` whole."""
        self.alloc_cpus += cpus
        self.alloc_mem_mb += mem_mb
        if shards and gpus:
            self.alloc_shards[gpus[0]] = self.alloc_shards.get(gpus[0], 0) + shards
            gpus = gpus[1:]
        self.alloc_gpus.update(gpus)
        self.job_ids.add(job_id)
        self.alloc_rev += 1

    def release(
        self, job_id: int, cpus: int, mem_mb: int, gpus: list[int], shards: int = 0
    ) -> None:
        if job_id not in self.job_ids:
            return
        self.alloc_rev += 1
        self.job_ids.discard(job_id)
        self.alloc_cpus = max(0, self.alloc_cpus - cpus)
        self.alloc_mem_mb = max(0, self.alloc_mem_mb - mem_mb)
        if shards and gpus:
            left = self.alloc_shards.get(gpus[0], 0) - shards
            if left > 0:
                self.alloc_shards[gpus[0]] = left
            else:
                self.alloc_shards.pop(gpus[0], None)  # the GPU is whole again
            gpus = gpus[1:]
        self.alloc_gpus.difference_update(gpus)

    def gpus_in_use(self) -> int:
        """GPUs given whole or shared."""
        return len(self.alloc_gpus | set(self.alloc_shards))

    def to_wire(self, only: Collection[str] | None = None) -> pb.Node:
        """The node as GetNodes answers it; ``only``: just these fields (a field mask's
        top-level names), each computed only if asked: at 12,500 nodes a whole record
        each was most of a masked GetNodes."""
        if only is None:
            return pb.Node(**{name: get(self) for name, get in _WIRE.items()})
        return pb.Node(**{name: _WIRE[name](self) for name in only if name in _WIRE})


# each field of a pb.Node ctld makes from a NodeRecord, and how
_WIRE: dict[str, Callable[[NodeRecord], Any]] = {
    "name": lambda n: n.name,
    "address": lambda n: n.address,
    "state": lambda n: n.state,
    "reason": lambda n: n.reason,
    "resources": lambda n: n.resources,
    "alloc_cpus": lambda n: n.alloc_cpus,
    "alloc_mem_mb": lambda n: n.alloc_mem_mb,
    "alloc_gpus": lambda n: n.gpus_in_use(),
    "shards_per_gpu": lambda n: n.config.gpus.shards_per_gpu,
    "alloc_shards": lambda n: sum(n.alloc_shards.values()),
    "partitions": lambda n: n.partitions,
    "last_heartbeat": lambda n: n.last_heartbeat,
    "boot_time": lambda n: n.boot_time,
    "version": lambda n: n.version,
    "os": lambda n: n.os,
    "reason_time": lambda n: n.reason_time,
    "job_ids": lambda n: sorted(n.job_ids),
    "gpu_type": lambda n: n.gpu_type,
    "reason_user": lambda n: n.reason_user or ("root" if n.reason else ""),
    "reason_uid": lambda n: n.reason_uid,
    "not_responding": lambda n: (
        n.late or (n.down and not n.admin_down) or (n.registered and not n.responding)
    ),
    "last_change": lambda n: n.last.to_wire() if n.last is not None else None,
    "reason_change": lambda n: n.reason_change.to_wire() if n.reason_change is not None else None,
    "power": lambda n: n.power,
    "power_down_pending": lambda n: n.power_down_pending,
    "cloud": lambda n: n.config.cloud,
    "dynamic": lambda n: n.dynamic,
}
