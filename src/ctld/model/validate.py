"""Submit-time checks of a JobSpec: everything ctld must refuse before it stores a job.

Each refusal is an InvalidRequest subclass with Slurm's message, so sbatch prints
what Slurm would and no job is created. The spec arrives from the network: every
field is bounded here, whatever the client claims to have checked.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from corral import containerspec, hostlist
from corral.config import CONTAINER_FEATURE, ClusterConfig, PartitionConfig
from corral.errors import (
    CorralError,
    InvalidAccount,
    InvalidOption,
    InvalidPartition,
    InvalidRequest,
    NodeConfigUnavailable,
)
from corral.jobspec import Parsed, type_spec
from corral.jobsyntax import ArraySpec, parse_array, parse_dependency, parse_warn_signal
from corral.limits import MAX_ENV_BYTES, MAX_SCRIPT_BYTES, MAX_SUBMIT_LINE
from corral.mailaddress import check_mail_user
from corral.mailtypes import parse_mail_types
from corral.slurmfmt import UNLIMITED
from corral.textcheck import check_one_line
from corral.wire import corral_pb2 as pb
from ctld.sched import JobRequest, job_shape
from ctld.sched.shape import Shape, fits_empty

MAX_NAME = 256
MAX_PATH = 4096
MAX_COUNT = 1 << 20


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    cpus: int  # 0: not known yet (never registered, not configured)
    mem_mb: int
    gpus: int
    gpu_type: str
    shards_per_gpu: int = 0


@dataclass(frozen=True)
class Accepted:
    """What a submit learnt of a spec, once: the defaults ctld fills in, its per-node
    shape, and its --array and --dependency as parsed (the spec holds them typed too)."""

    partitions: tuple[str, ...]
    time_limit_s: int
    shape: Shape
    array: ArraySpec | None = None
    dependencies: Parsed | None = None


def _check_text(value: str, what: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidOption(f"{what} is longer than {limit} characters")
    if "\x00" in value:
        raise InvalidOption(f"{what} contains a NUL byte")


def check_job_name(name: str) -> None:
    """A job name is one line of text: it reaches mail subjects, squeue's columns, a
    terminal and ``%x`` in file names (Slurm bounds only its length; corral refuses
    control characters too, docs/security.md "Job mail")."""
    _check_text(name, "job name", MAX_NAME)
    check_one_line(name, "job name")


def check_mail(spec: pb.JobSpec, config: ClusterConfig) -> None:
    """--mail-type known (and mail on, if any is asked for), --mail-user mail addresses;
    at submit and at ``scontrol update MailType=/MailUser=``."""
    if spec.mail_type:
        _check_text(spec.mail_type, "--mail-type", 256)
        if parse_mail_types(spec.mail_type) and not config.mail.enabled:
            raise InvalidOption(
                f"--mail-type={spec.mail_type}: this cluster sends no mail (no [mail] "
                "smtp_host or program in its config); submit without --mail-type"
            )
    _check_text(spec.mail_user, "--mail-user", 256)
    if spec.mail_user:
        check_mail_user(spec.mail_user)


# JobRequest's fields named as JobSpec's are copied from the spec: a new scheduling
# flag (a JobSpec field and a JobRequest field of one name) needs no line here. The
# others, and those given by a different rule, are set in request_from_spec.
_SPEC_FIELDS = {f.name: f for f in pb.JobSpec.DESCRIPTOR.fields}
_BY_RULE = {"ntasks", "cpus_per_task", "nodelist", "exclude", "partitions", "time_limit_s"}
_COPIED = tuple(
    f.name
    for f in dataclasses.fields(JobRequest)
    if f.init and f.name in _SPEC_FIELDS and f.name not in _BY_RULE
)
_REPEATED = frozenset(n for n in _COPIED if _SPEC_FIELDS[n].is_repeated)


def node_lists(spec: pb.JobSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """-w and -x expanded (hostlist syntax)."""
    return (
        tuple(hostlist.expand(spec.nodelist)) if spec.nodelist else (),
        tuple(hostlist.expand(spec.exclude)) if spec.exclude else (),
    )


def request_from_spec(
    spec: pb.JobSpec,
    job_id: int = 0,
    partitions: Iterable[str] = (),
    time_limit_s: int = UNLIMITED,
    **fields: Any,
) -> JobRequest:
    """The core's view of what ``spec`` asks, built in one go; ``fields`` set the rest
    (the snapshot's priority, user, ...) and may give ``nodelist``/``exclude`` already
    expanded."""
    given: dict[str, Any] = {
        n: tuple(getattr(spec, n)) if n in _REPEATED else getattr(spec, n) for n in _COPIED
    }
    if "nodelist" not in fields or "exclude" not in fields:
        given["nodelist"], given["exclude"] = node_lists(spec)
    given.update(
        job_id=job_id,
        partitions=tuple(partitions),
        ntasks=spec.ntasks or 1,
        cpus_per_task=spec.cpus_per_task or 1,
        gpus_total=spec.gpus,
        time_limit_s=time_limit_s,
        features=container_features(spec.container),
    )
    given.update(fields)
    return JobRequest(**given)


def container_features(container: pb.ContainerSpec) -> tuple[str, ...]:
    """The node features a job's (or step's) container needs: ``container`` when it
    runs in one (an image, or a named container of an earlier step)."""
    return (CONTAINER_FEATURE,) if container.image or container.name else ()


def totals(spec: pb.JobSpec, shape: Shape) -> dict[str, int]:
    """What squeue shows for a pending job: requested nodes, tasks, CPUs, memory, GPUs
    (the fields of a job, set with the change that makes or requeues it)."""
    return {
        "num_nodes": shape.nodes,
        "num_tasks": spec.ntasks or shape.nodes * shape.tasks_per_node,  # -N2 -n5: 5
        "num_cpus": shape.nodes * shape.cpus_per_node,
        "mem_mb": shape.nodes * shape.mem_per_node_mb,
        "num_gpus": shape.nodes * shape.gpus_per_node,
    }


def user_groups(user: str, gid: int) -> frozenset[str]:
    """The names of ``user``'s groups on the controller host (for AllowGroups)."""
    import grp

    try:
        gids = os.getgrouplist(user, gid)
    except (KeyError, OSError):
        gids = [gid]
    names = set()
    for g in gids:
        try:
            names.add(grp.getgrgid(g).gr_name)
        except KeyError:
            continue
    return frozenset(names)


def validate_spec(
    spec: pb.JobSpec,
    config: ClusterConfig,
    capacity: Mapping[str, NodeCapacity],
    groups: Callable[[], frozenset[str]] = frozenset,
) -> Accepted:
    """Check ``spec`` against the cluster and type its --signal, --array and
    --dependency (the one parse of each, stored in the spec); return what ctld learnt."""
    script = spec.script
    if spec.allocation_only:
        if script:
            raise InvalidOption("an allocation (salloc, srun) has no batch script")
    elif not script.startswith("#!"):
        raise InvalidOption(
            "This does not look like a batch script. The first line must start with #! "
            "followed by the path to an interpreter."
        )
    if len(script.encode()) > MAX_SCRIPT_BYTES:
        raise InvalidOption(f"Batch script is larger than {MAX_SCRIPT_BYTES} bytes")
    if "\x00" in script:
        raise InvalidOption("Batch script contains a NUL character")
    check_job_name(spec.name)
    for what, value in (
        ("working directory", spec.work_dir),
        ("--output", spec.stdout_pattern),
        ("--error", spec.stderr_pattern),
        ("--input", spec.stdin_path),
    ):
        _check_text(value, what, MAX_PATH)
    if not spec.work_dir.startswith("/"):
        raise InvalidOption("the working directory must be an absolute path")
    env_bytes = sum(len(k) + len(v) for k, v in spec.environment.items())
    if env_bytes > MAX_ENV_BYTES:
        raise InvalidOption(f"the job environment is larger than {MAX_ENV_BYTES} bytes")
    for key in spec.environment:
        if not key or "=" in key or "\x00" in key or "\x00" in spec.environment[key]:
            raise InvalidOption(f"invalid environment variable name {key[:40]!r}")
    _check_text(spec.comment, "comment", 4096)
    _check_text(spec.submit_line, "submit line", MAX_SUBMIT_LINE)
    _check_text(spec.account, "account", 64)
    for flag, count in (
        ("-N", spec.nodes_min),
        ("-N", spec.nodes_max),
        ("-n", spec.ntasks),
        ("--ntasks-per-node", spec.ntasks_per_node),
        ("-c", spec.cpus_per_task),
        ("--gpus", spec.gpus),
        ("--gpus-per-node", spec.gpus_per_node),
        ("--gres=shard", spec.shards_per_node),
    ):
        if count > MAX_COUNT:
            raise InvalidOption(f"{flag} {count} is out of range")
    if spec.shards_per_node and (spec.gpus or spec.gpus_per_node or spec.gpus_per_task):
        # one GPU's shards or whole GPUs: a job asks one or the other
        raise InvalidRequest("Invalid generic resource (gres) specification: shard with gpu")
    if spec.nodes_max and spec.nodes_max < spec.nodes_min:
        raise InvalidRequest("Node count specification invalid")
    warn = None
    if spec.signal:
        _check_text(spec.signal, "--signal", 64)
        warn = parse_warn_signal(spec.signal)  # noded acts on it: it must be well formed
    if spec.mem_per_node_mb and spec.mem_per_cpu_mb:
        raise InvalidOption("--mem and --mem-per-cpu are mutually exclusive")
    if spec.time_limit_s < UNLIMITED:
        raise InvalidOption("Requested time limit is invalid (missing or exceeds some limit)")
    check_mail(spec, config)
    check_container(spec.container, config)
    deps = parse_dependency(spec.dependency) if spec.dependency else None
    array = parse_array(spec.array) if spec.array else None
    try:
        req = request_from_spec(spec)
    except CorralError as exc:
        raise InvalidOption(f"invalid node list: {exc}") from None

    by_name = {p.name: p for p in config.partitions}
    names = list(spec.partitions)
    if not names:
        default = config.default_partition
        if default is None:
            raise InvalidPartition("No partition specified or system default partition")
        names = [default.name]
    parts: list[PartitionConfig] = []
    for name in names:
        if name not in by_name:
            raise InvalidPartition(f"Invalid partition name specified: {name}")
        if by_name[name].state in ("DRAIN", "INACTIVE"):
            raise InvalidPartition("Required partition not available (inactive or drain)")
        parts.append(by_name[name])
    if spec.account:
        allowed = [p for p in parts if not p.allow_accounts or spec.account in p.allow_accounts]
        if not allowed:
            raise InvalidAccount()
        parts = allowed
    if any(p.allow_groups for p in parts):
        mine = groups()
        parts = [p for p in parts if not p.allow_groups or mine & set(p.allow_groups)]
        if not parts:
            raise InvalidPartition("User's group not permitted to use this partition")
    for name in (*req.nodelist, *req.exclude):
        if name not in capacity:
            raise InvalidRequest(f"Invalid node name specified: {name}")

    shape = job_shape(req)
    if not any(_partition_can_ever_run(p, req, shape, capacity) for p in parts):
        raise NodeConfigUnavailable()
    first = parts[0]
    limit = spec.time_limit_s
    if limit == 0:
        limit = first.default_time_s if first.default_time_s != UNLIMITED else first.max_time_s
    if first.elastic and spec.nodes_max > max(spec.nodes_min, 1):
        spec.elastic = True  # the partition's default (docs/reliability.md)
    type_spec(spec, warn, array, deps)
    return Accepted(
        partitions=tuple(p.name for p in parts),
        time_limit_s=limit,
        shape=shape,
        array=array,
        dependencies=deps,
    )


def check_container(container: pb.ContainerSpec, config: ClusterConfig) -> None:
    """--container-*: bounded and well formed (the client's checks, again), and a
    registry image only where [containers] allowed_sources has "registry". Fills
    ``parsed_mounts``: the mounts parsed here, once, are what noded mounts."""
    containerspec.check(
        image=container.image,
        mounts=container.mounts,
        workdir=container.workdir,
        name=container.name,
        save=container.save,
        env=container.env,
        allowed_sources=config.containers.allowed_sources,
    )
    del container.parsed_mounts[:]  # a client's own parse is not trusted
    for entry in containerspec.parse_mounts(container.mounts) if container.mounts else ():
        src, dst, flags = containerspec.mount_fields(entry)
        container.parsed_mounts.add(
            source=src, target=dst, read_only="ro" in flags, no_exec="noexec" in flags
        )


def _partition_can_ever_run(
    part: PartitionConfig, req: JobRequest, shape: Shape, capacity: Mapping[str, NodeCapacity]
) -> bool:
    names: Iterable[str] = part.nodes
    if req.nodelist:
        if any(n not in part.nodes for n in req.nodelist):
            return False
        names = dict.fromkeys(req.nodelist)
    if part.max_nodes and shape.nodes > part.max_nodes:
        return True  # Slurm keeps it pending with PartitionNodeLimit
    excluded = set(req.exclude)
    fitting = 0
    for name in names:  # until enough fit: a submit does not walk 12,500 nodes
        if name not in capacity or name in excluded:
            continue
        n = capacity[name]
        if n.cpus == 0 or (  # capacity unknown until it registers: the benefit of the doubt
            fits_empty(shape, n.cpus, n.mem_mb, n.gpus)
            and (not shape.shards_per_node or shape.shards_per_node <= n.shards_per_gpu)
            and (
                not req.gpu_type
                or not (shape.gpus_per_node or shape.shards_per_node)
                or req.gpu_type == n.gpu_type
            )
        ):
            fitting += 1
            if fitting >= shape.nodes:
                return True
    return fitting >= shape.nodes
