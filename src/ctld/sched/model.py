"""Plain, immutable types the scheduling core reads and writes.

Times are seconds on the snapshot's clock (``Snapshot.now``); ``INFINITY`` stands for
"no end" (an UNLIMITED job, a reservation without an end).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter

INFINITY = math.inf


@dataclass(frozen=True)
class NodeView:
    name: str
    cpus_total: int
    mem_total_mb: int
    gpus_total: int
    cpus_free: int
    mem_free_mb: int
    gpus_free: tuple[int, ...]  # free GPU indices, ascending
    gpu_type: str = ""
    schedulable: bool = True  # up and not drained
    idle: bool = True  # nothing allocated (for --exclusive)
    gpu_indices: tuple[int, ...] | None = None  # all indices; None: 0..gpus_total-1
    # GPU sharing (Slurm's gres/shard): each GPU offers this many shards (0: none). A GPU
    # holding shard jobs is in ``shards_used`` (index, shards taken), never in ``gpus_free``
    shards_per_gpu: int = 0
    shards_used: tuple[tuple[int, int], ...] = ()
    features: frozenset[str] = frozenset()  # what it registered ("container")
    # power saving: a node powered down or powering up is planned on but busy until then
    # (its resume_timeout counted), so forecasts include the boot and nothing starts there
    available_at: float = 0.0


@dataclass(frozen=True)
class PartitionView:
    name: str
    nodes: tuple[str, ...]
    state: str = "UP"
    max_nodes: int = 0
    max_time_s: int = -1
    priority_tier: int = 1
    spare_nodes: int = 0  # its last N idle nodes: for jobs with ``spares_ok`` only


@dataclass(frozen=True)
class Placement:
    node: str
    cpus: int
    mem_mb: int
    gpu_indices: tuple[int, ...]
    # shards of ``gpu_indices[0]`` (one GPU, shared with other shard jobs); 0: whole GPUs
    shards: int = 0


@dataclass(frozen=True)
class RunningView:
    """A job holding resources now, and when it is expected to let them go."""

    job_id: int
    end_time: float  # start + time limit; INFINITY when unlimited
    placements: tuple[Placement, ...]
    user: str = ""
    qos: str = ""
    start_time: float = 0.0
    predicted_s: float = 0.0  # its predicted run time (predict.py); 0: none, use the limit
    account: str = ""
    priority: int = 0
    # whether a preemptor may take its resources (a running batch job not already being
    # preempted; its QOS's mode decides the rest)
    preemptable: bool = True


@dataclass(frozen=True)
class ReservationView:
    """An advance reservation: its nodes are kept for its users during [start, end)."""

    name: str
    start: float
    end: float
    nodes: tuple[str, ...]
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()


_class_ids: dict[tuple[object, ...], int] = {}
_next_class = [1]


def _class_id(klass: tuple[object, ...]) -> int:
    """The number of a class of requests; new ones numbered on (a memo only: when it
    grows large it starts over, and numbers are never given twice, so equal classes
    may then get two numbers, which costs sharing, never correctness)."""
    got = _class_ids.get(klass)
    if got is None:
        if len(_class_ids) >= 100_000:
            _class_ids.clear()
        got = _class_ids[klass] = _next_class[0]
        _next_class[0] += 1
    return got


# JobRequest fields left out of its class: what tells alike jobs apart without changing
# what the core decides for a job of the class (the queue's order is the snapshot's;
# a held job is not a candidate). Every other field is in it.
NOT_IN_CLASS = frozenset({"job_id", "priority", "blocked_reason", "submit_time", "eligible_time"})

_class_fields: dict[type, Callable[[JobRequest], tuple[object, ...]]] = {}


def _class_key(req: JobRequest) -> tuple[object, ...]:
    """The fields of ``req`` that make its class: its dataclass's fields (a subclass's
    too) but NOT_IN_CLASS and derived ones (``init=False``), in declaration order."""
    get = _class_fields.get(type(req))
    if get is None:
        names = [f.name for f in fields(req) if f.init and f.name not in NOT_IN_CLASS]
        get = _class_fields[type(req)] = attrgetter(*names)
    return get(req)


@dataclass(frozen=True)
class QosView:
    """What preemption needs of a QOS (Slurm's preempt/qos)."""

    name: str
    priority: int = 0
    preempts: tuple[str, ...] = ()  # QOSes whose running jobs its pending jobs may preempt
    mode: str = "off"  # what preempting one of its jobs does: "requeue", "cancel", "off"
    grace_s: int = 0  # how long a preempted job of this QOS has between SIGTERM and KILL


@dataclass(frozen=True)
class Claim:
    """Resources promised to a pending preemptor while its victims leave them: nobody
    else may plan on them."""

    job_id: int
    placements: tuple[Placement, ...]
    victims: tuple[int, ...] = ()  # its victims still on their nodes
    partition: str = ""


@dataclass(frozen=True)
class JobRequest:
    """One pending job as the scheduler sees it (already defaulted by ctld)."""

    job_id: int
    partitions: tuple[str, ...]  # candidates, in the user's order
    nodes_min: int = 1
    nodes_max: int = 0  # 0: same as nodes_min
    ntasks: int = 1
    ntasks_per_node: int = 0
    cpus_per_task: int = 1
    mem_per_node_mb: int = 0
    mem_per_cpu_mb: int = 0
    gpus_per_node: int = 0
    gpus_total: int = 0
    gpus_per_task: int = 0
    shards_per_node: int = 0  # --gres=shard:K: K shards of one GPU on each node
    gpu_type: str = ""
    exclusive: bool = False
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    time_limit_s: int = -1  # -1: unlimited
    priority: int = 0
    blocked_reason: str = ""  # e.g. JobHeldUser: not a candidate this pass
    user: str = ""
    account: str = ""
    qos: str = ""
    reservation: str = ""
    submit_time: float = 0.0
    eligible_time: float = 0.0  # when it could first start (--begin); 0: submit_time
    predicted_s: int = 0  # predicted run time (predict.py), <= the limit; 0: the limit
    # node features every node of it must have (a --container-image job: "container")
    features: tuple[str, ...] = ()
    # --elastic: placed at the largest size from nodes_max down to nodes_min that fits
    # now; ``prefer``: nodes its previous run kept healthy, its batch host first
    elastic: bool = False
    prefer: tuple[str, ...] = ()
    spares_ok: bool = False  # requeued after a node failure: may take a partition's spares
    # requeued after a node failure: the nodes its run kept healthy, claimed for it until
    # ``reclaim_until`` (no other job starts there meanwhile: sched/reclaim.py)
    reclaim: tuple[str, ...] = ()
    reclaim_until: float = 0.0
    # everything the core reads of a job but its id, priority, age and blocked reason,
    # as a small number (equal for equal classes): jobs of one class that cannot start
    # now leave their later class-mates unable too (a pass only takes resources away),
    # so the core decides that once per class. Made of every field but NOT_IN_CLASS's,
    # so a field added here is in the class unless it is named there.
    klass: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "klass", _class_id(_class_key(self)))

    def with_priority(self, priority: int) -> JobRequest:
        """This request at another priority (the queue's recalculation): a copy
        without building the class again."""
        copy = object.__new__(JobRequest)
        copy.__dict__.update(self.__dict__)
        copy.__dict__["priority"] = priority
        return copy


@dataclass(frozen=True)
class Settings:
    """How the core schedules; from the [scheduler] config section.

    ``reserve_depth``: how many blocked jobs, highest priority first, get a reservation
    that lower jobs must not delay (1: EASY; a large number: conservative; 0 with
    ``backfill`` off: strict first come first served). ``forecast_depth``: how many
    further blocked jobs get an expected start (the costly part of a pass).
    ``placement``: "pack" (best fit: small GPU jobs onto partly used nodes, shard jobs
    onto the GPU with the fewest shards left that fit),
    "firstfit" (the first nodes that fit, in name order), "frag" (best fit; among
    nodes as full, the one whose jobs outlast this one, then the one whose free GPUs
    are least likely to be needed whole by the jobs still to come), "fgd" (the node
    and GPU that least raise the expected fragmentation, FGD's rule, then best fit) or
    "random" (any node that fits, drawn from a seed in the snapshot: a baseline).
    ``predict``: plan with predicted run times (``predicted_s``) instead of limits for
    backfill fits and forecasts; advance reservations are always checked against
    limits, and jobs are still killed at their limits. ``backfill_order``: "priority"
    or "shortest" (backfill candidates behind the reserved jobs tried shortest
    predicted run first, as EASY-SJBF). ``starve_after_s``: the job eligible longest
    goes ahead of all others once that is longer than this, whatever its priority, and
    its reservation is planned and kept by limits (a starvation guard; 0: off).
    ``backfill_aged_s``: with shortest-first backfill, candidates eligible longer than
    this are tried first, oldest first (0: off; no config key, a variant bench.heldout
    measures with ``--set``, docs/scheduling.md "Not done").
    ``max_job_test``: how many pending jobs that cannot start one pass tries in full (Slurm's
    ``bf_max_job_test``); a job that starts, or whose class (``klass``) already failed
    in this pass, is not a try. Jobs past the limit are left out of the plan: they
    keep their reason and forecast. ``stack_forecasts``: with shortest-first backfill,
    how many of the forecasts made once the pass's starts are decided hold their slot
    (as a reservation would, by predictions), so that the jobs behind them are forecast
    after them rather than all into the same first gap; it changes no start. (With
    backfill in priority order forecasts are made while jobs still start: not stacked.)
    """

    backfill: bool = True
    reserve_depth: int = 1
    forecast_depth: int = 100
    placement: str = "pack"
    predict: bool = False
    backfill_order: str = "priority"
    max_job_test: int = 0  # fruitless full tries per pass (bf_max_job_test); 0: no limit
    starve_after_s: float = 0.0
    backfill_aged_s: float = 0.0
    qos_max_jobs_per_user: tuple[tuple[str, int], ...] = ()
    stack_forecasts: int = 0


@dataclass(frozen=True)
class TresLimit:
    """A limit on CPUs, memory and GPUs together; -1: that one is not limited."""

    cpus: int = -1
    mem_mb: int = -1
    gpus: int = -1


@dataclass(frozen=True)
class AssocLimit:
    """One association's limits (sacctmgr's), as the core enforces them.

    ``key`` is "account/user", or "account/" for an account's own association;
    ``parent`` the key of the association above it ("" for the root). ``grp`` and
    ``grp_jobs`` bound the running jobs of its whole subtree; ``max_jobs`` the running
    jobs of one user association (already inherited from above by ctld); ``max_wall_s``
    a job's time limit. -1: no limit.
    """

    key: str
    parent: str
    grp: TresLimit = TresLimit()
    grp_jobs: int = -1
    max_jobs: int = -1
    max_wall_s: int = -1


@dataclass(frozen=True)
class QosLimit:
    """A QOS's limits: ``grp`` / ``grp_jobs`` over all its running jobs, ``per_user``
    over one user's running jobs in it (MaxTRESPerUser), ``max_wall_s`` per job."""

    name: str
    grp: TresLimit = TresLimit()
    grp_jobs: int = -1
    per_user: TresLimit = TresLimit()
    max_wall_s: int = -1


@dataclass(frozen=True)
class LimitSet:
    assocs: tuple[AssocLimit, ...] = ()
    qos: tuple[QosLimit, ...] = ()


@dataclass(frozen=True)
class Demand:
    """What the jobs to come are expected to ask of one node, and how often (a weight).

    Fragmentation-aware placement keeps nodes able to serve these.
    """

    gpus: int
    cpus: int = 0
    mem_mb: int = 0
    weight: float = 1.0
    shards: int = 0  # shards of one GPU (instead of whole GPUs)


@dataclass(frozen=True)
class Snapshot:
    version: int
    now: float
    nodes: tuple[NodeView, ...]
    partitions: tuple[PartitionView, ...]
    pending: tuple[JobRequest, ...]  # highest priority first
    running: tuple[RunningView, ...] = ()
    reservations: tuple[ReservationView, ...] = ()
    settings: Settings = field(default_factory=Settings)
    # for placement "frag": the expected demand; empty: the pending jobs' own shapes
    demands: tuple[Demand, ...] = ()
    limits: LimitSet = field(default_factory=LimitSet)  # accounting limits (sacctmgr)
    qos: tuple[QosView, ...] = ()  # preemption: which QOS may preempt which, and how
    claims: tuple[Claim, ...] = ()  # preemptors' promised resources


@dataclass(frozen=True)
class Start:
    job_id: int
    partition: str
    placements: tuple[Placement, ...]
    # it fits in front of a reserved job only by its predicted run time (to its limit
    # it would overlap the reservation): a wrong prediction may delay that job
    on_prediction: bool = False


@dataclass(frozen=True)
class Forecast:
    """When a blocked job is expected to start, where, and what it waits for."""

    job_id: int
    start: float
    partition: str
    nodes: tuple[str, ...]
    reserved: bool  # a reservation lower jobs may not delay (top of the queue)
    waits_for: tuple[int, ...] = ()  # running jobs whose end frees what it needs


@dataclass(frozen=True)
class Preemption:
    """Running jobs to preempt so that a pending job can start on what they free."""

    job_id: int  # the preemptor
    partition: str
    placements: tuple[Placement, ...]  # where it will run: claimed until it starts
    victims: tuple[int, ...]  # fewest, lowest first: the core's pick


@dataclass(frozen=True)
class Plan:
    snapshot_version: int
    starts: tuple[Start, ...] = ()
    reasons: dict[int, str] = field(default_factory=dict)  # pending job -> Slurm reason
    forecasts: dict[int, Forecast] = field(default_factory=dict)
    considered: int = 0  # pending jobs looked at in this pass
    preemptions: tuple[Preemption, ...] = ()
