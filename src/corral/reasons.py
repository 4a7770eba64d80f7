"""Why a pending job waits: the one list of Slurm's pending reasons corral uses.

The scheduling core (ctld/sched), ctld and ``corral why`` all name reasons from here,
so a reason cannot be decided in one place and unknown to another. Pure standard
library: ctld/sched may import it (see docs/architecture.md, the dependency rule).
Values are Slurm's own names (squeue %r, scontrol's Reason=).
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # decided by the core (ctld/sched) from resources, limits and the queue
    RESOURCES = "Resources"
    PRIORITY = "Priority"
    PARTITION_DOWN = "PartitionDown"
    PARTITION_INACTIVE = "PartitionInactive"
    PARTITION_TIME_LIMIT = "PartitionTimeLimit"
    PARTITION_NODE_LIMIT = "PartitionNodeLimit"
    REQ_NODE_NOT_AVAIL = "ReqNodeNotAvail"
    # Slurm's words (its reason code is Resources) when too few of the partition's nodes
    # are up for the job: the rest are down or drained
    NODES_DOWN = (
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
        "partitions"
    )
    RESERVATION = "Reservation"
    # advance reservations leave too few of its nodes for its time limit (Slurm 22.05's
    # words, code ReqNodeNotAvail): a MAINT one among them, or only others (these say
    # "UnavailableNodes:" instead when nodes of its partition are down or drained)
    RESERVED_FOR_MAINTENANCE = "ReqNodeNotAvail, Reserved for maintenance"
    MAY_BE_RESERVED = "ReqNodeNotAvail, May be reserved for other job"
    # no node of its partitions offers a feature it needs (a container runtime)
    BAD_CONSTRAINTS = "BadConstraints"
    # power saving (ctld/core/pending.py): the nodes it will run on are being powered up
    POWERING_UP = "PoweringUp"
    QOS_MAX_JOBS_PER_USER = "QOSMaxJobsPerUserLimit"
    # accounting limits (sacctmgr), decided by the core from the limits in the snapshot
    ASSOC_GRP_GRES = "AssocGrpGRES"
    ASSOC_GRP_CPU = "AssocGrpCpuLimit"
    ASSOC_GRP_MEM = "AssocGrpMemLimit"
    ASSOC_GRP_JOBS = "AssocGrpJobsLimit"
    ASSOC_MAX_JOBS = "AssocMaxJobsLimit"
    ASSOC_MAX_WALL = "AssocMaxWallDurationPerJobLimit"
    QOS_GRP_GRES = "QOSGrpGRES"
    QOS_GRP_CPU = "QOSGrpCpuLimit"
    QOS_GRP_MEM = "QOSGrpMemLimit"
    QOS_GRP_JOBS = "QOSGrpJobsLimit"
    QOS_MAX_GRES_PER_USER = "QOSMaxGRESPerUser"
    QOS_MAX_CPU_PER_USER = "QOSMaxCpuPerUserLimit"
    QOS_MAX_MEM_PER_USER = "QOSMaxMemoryPerUser"
    QOS_MAX_WALL = "QOSMaxWallDurationPerJobLimit"
    # decided by ctld before a pass; they reach the core as JobRequest.blocked_reason
    JOB_HELD_USER = "JobHeldUser"
    JOB_HELD_ADMIN = "JobHeldAdmin"
    BEGIN_TIME = "BeginTime"
    DEPENDENCY = "Dependency"
    DEPENDENCY_NEVER_SATISFIED = "DependencyNeverSatisfied"
    JOB_ARRAY_TASK_LIMIT = "JobArrayTaskLimit"


HELD = frozenset({Reason.JOB_HELD_USER, Reason.JOB_HELD_ADMIN})
# the detail Slurm puts after ReqNodeNotAvail when it names the nodes: "..., UnavailableNodes:n1"
UNAVAILABLE_NODES = f"{Reason.REQ_NODE_NOT_AVAIL}, UnavailableNodes:"
# reasons of a job that waits its turn for resources (not for a fix by anyone): its start
# is the plan's, and unknown beyond the plan's depth
WAITS_ITS_TURN = frozenset(
    {Reason.RESOURCES, Reason.PRIORITY, Reason.RESERVED_FOR_MAINTENANCE, Reason.MAY_BE_RESERVED}
)

# ``corral why``'s words for each reason (every member has an entry: a unit test checks)
EXPLAINED: dict[str, str] = {
    Reason.RESOURCES: "the resources it asks for are busy",
    Reason.PRIORITY: "jobs with a higher priority are ahead of it for the same resources",
    Reason.DEPENDENCY: "it waits for its --dependency to be met",
    Reason.DEPENDENCY_NEVER_SATISFIED: "its --dependency can never be met (cancel it or change it)",
    Reason.JOB_HELD_USER: "you held it (scontrol release to let it run)",
    Reason.JOB_HELD_ADMIN: "an operator held it",
    Reason.BEGIN_TIME: "its --begin time has not come yet",
    Reason.PARTITION_TIME_LIMIT: "its time limit is above the partition's MaxTime",
    Reason.PARTITION_NODE_LIMIT: "it asks for more nodes than the partition allows",
    Reason.PARTITION_DOWN: "its partition is down",
    Reason.PARTITION_INACTIVE: "its partition is inactive",
    Reason.REQ_NODE_NOT_AVAIL: "a node it requires (-w, or its reservation's) is not available",
    Reason.NODES_DOWN: "too few of the nodes it could run on are up: the others are down or "
    "drained",
    Reason.RESERVATION: "it waits for its reservation to begin",
    Reason.RESERVED_FOR_MAINTENANCE: "a maintenance reservation holds the nodes it needs "
    "for its time limit",
    Reason.MAY_BE_RESERVED: "an advance reservation holds the nodes it needs for its time limit",
    Reason.BAD_CONSTRAINTS: "no node of its partition offers a feature it needs (a job "
    "with --container-image needs the `container` feature: sinfo -o '%N %f')",
    Reason.POWERING_UP: "the nodes it will run on are being powered up (resume_program); "
    "it starts when they register, within resume_timeout",
    Reason.QOS_MAX_JOBS_PER_USER: "you already run as many jobs as your QOS allows",
    Reason.ASSOC_GRP_GRES: "its account's running jobs hold all the GPUs its GrpTRES allows",
    Reason.ASSOC_GRP_CPU: "its account's running jobs hold all the CPUs its GrpTRES allows",
    Reason.ASSOC_GRP_MEM: "its account's running jobs hold all the memory its GrpTRES allows",
    Reason.ASSOC_GRP_JOBS: "its account already runs as many jobs as its GrpJobs allows",
    Reason.ASSOC_MAX_JOBS: "you already run as many jobs as your association's MaxJobs allows",
    Reason.ASSOC_MAX_WALL: "its time limit is above its association's MaxWall",
    Reason.QOS_GRP_GRES: "its QOS's running jobs hold all the GPUs its GrpTRES allows",
    Reason.QOS_GRP_CPU: "its QOS's running jobs hold all the CPUs its GrpTRES allows",
    Reason.QOS_GRP_MEM: "its QOS's running jobs hold all the memory its GrpTRES allows",
    Reason.QOS_GRP_JOBS: "its QOS already runs as many jobs as its GrpJobs allows",
    Reason.QOS_MAX_GRES_PER_USER: "your running jobs hold all the GPUs your QOS allows a user",
    Reason.QOS_MAX_CPU_PER_USER: "your running jobs hold all the CPUs your QOS allows a user",
    Reason.QOS_MAX_MEM_PER_USER: "your running jobs hold all the memory your QOS allows a user",
    Reason.QOS_MAX_WALL: "its time limit is above its QOS's MaxWall",
    Reason.JOB_ARRAY_TASK_LIMIT: "its array already runs as many tasks as its %N limit allows",
}


def reason_words(reason: str) -> str:
    """A pending reason in plain words: what squeue's reason means (``corral why``'s
    first line and the web queue say the same). A reason Slurm details with the nodes
    (ReqNodeNotAvail, UnavailableNodes:NODES) names them."""
    if reason.startswith(UNAVAILABLE_NODES):
        nodes = reason.removeprefix(UNAVAILABLE_NODES)
        return f"nodes it needs are not available: {nodes} down or drained"
    return EXPLAINED.get(reason, reason)
