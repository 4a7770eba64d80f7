"""A job's typed --signal, --array and --dependency: the JobSpec fields 700+.

ctld types a spec once at submit (``type_spec``, from what ``corral.jobsyntax``
parsed while validating it); every later reader (ctld's snapshot, dependencies,
preemption and maintenance warnings; noded's time-limit warning and array variables)
reads the typed fields through the functions here, and the job carries them to the
store, to noded and to the commands. A spec without them was typed by no ctld: a row
stored before they existed (ctld's store types it as it loads it: ``fill``), a job
sent by an older ctld, one built by hand; the functions here type it from its
strings with the same parser, so each syntax still has one parser.

The commands read the typed fields as JSON and never import this module (it imports
protobuf).
"""

from __future__ import annotations

import contextlib

from corral import jobsyntax as syn
from corral.errors import CorralError
from corral.wire import corral_pb2 as pb

_UINT32 = 2**32 - 1
_UINT64 = 2**64 - 1

Parsed = tuple[tuple[syn.Dependency, ...], bool]  # what jobsyntax.parse_dependency returns


def type_spec(
    spec: pb.JobSpec,
    warn: syn.WarnSignal | None,
    array: syn.ArraySpec | None,
    deps: Parsed | None,
) -> None:
    """Store the parsed values in ``spec``'s typed fields, replacing whatever was there
    (a client's own values are not believed)."""
    spec.ClearField("warn_signal")
    spec.ClearField("array_tasks")
    spec.ClearField("dependencies")
    if warn is not None:
        spec.warn_signal.CopyFrom(typed_signal(warn))
    if array is not None:
        spec.array_tasks.CopyFrom(typed_array(array))
    if deps is not None:
        spec.dependencies.CopyFrom(typed_dependencies(*deps))


def typed_signal(warn: syn.WarnSignal) -> pb.WarnSignal:
    return pb.WarnSignal(signal=warn.signal, seconds=warn.seconds, batch_only=warn.batch_only)


def typed_array(array: syn.ArraySpec) -> pb.ArrayTasks:
    typed = pb.ArrayTasks(count=array.count, first=array.first, last=array.last, step=array.step)
    if array.throttled:
        typed.max_running = min(array.max_running, _UINT32)
    return typed


def typed_dependencies(deps: tuple[syn.Dependency, ...], any_of: bool) -> pb.Dependencies:
    """The conditions as the store keeps them. Numbers no job or task can have are
    clamped to the field's largest (still none), which a submit refuses anyway."""
    out = pb.Dependencies(any_of=any_of)
    for dep in deps:
        cond = out.conditions.add(kind=dep.kind)
        for ref in dep.refs:
            typed = cond.jobs.add(
                job_id=min(ref.job_id, _UINT64), delay_min=min(ref.delay_min, _UINT32)
            )
            if ref.task_id is not None:
                typed.task_id = min(ref.task_id, _UINT32)
    return out


def warn_signal(spec: pb.JobSpec) -> syn.WarnSignal | None:
    """The job's --signal (None: none). Raises InvalidOption only for an untyped spec
    whose string does not parse."""
    if spec.HasField("warn_signal"):
        w = spec.warn_signal
        return syn.WarnSignal(w.signal, w.seconds, w.batch_only)
    return syn.parse_warn_signal(spec.signal) if spec.signal else None


def array_tasks(spec: pb.JobSpec) -> pb.ArrayTasks | None:
    """The job's --array (None: not an array). Raises as ``warn_signal``."""
    if spec.HasField("array_tasks"):
        return spec.array_tasks
    return typed_array(syn.parse_array(spec.array)) if spec.array else None


def array_throttle(spec: pb.JobSpec) -> int | None:
    """The %N of the job's --array (None: no throttle, or an untyped --array that does
    not parse: a scheduling pass reads this and must not fail on one job)."""
    if spec.HasField("array_tasks"):
        typed = spec.array_tasks
    elif spec.array:
        try:
            typed = typed_array(syn.parse_array(spec.array))
        except CorralError:
            return None
    else:
        return None
    return typed.max_running if typed.HasField("max_running") else None


def dependencies(spec: pb.JobSpec) -> pb.Dependencies | None:
    """The job's --dependency (None: none). Raises as ``warn_signal``."""
    if spec.HasField("dependencies"):
        return spec.dependencies
    return typed_dependencies(*syn.parse_dependency(spec.dependency)) if spec.dependency else None


def fill(spec: pb.JobSpec) -> None:
    """Type a spec stored before the typed fields existed (its strings were checked at
    its submit). A string that no longer parses is left untyped: its readers treat it
    as they always did (a dependency that can never be met, no --signal)."""
    if spec.signal and not spec.HasField("warn_signal"):
        with contextlib.suppress(CorralError):
            spec.warn_signal.CopyFrom(typed_signal(syn.parse_warn_signal(spec.signal)))
    if spec.array and not spec.HasField("array_tasks"):
        with contextlib.suppress(CorralError):
            spec.array_tasks.CopyFrom(typed_array(syn.parse_array(spec.array)))
    if spec.dependency and not spec.HasField("dependencies"):
        with contextlib.suppress(CorralError):
            spec.dependencies.CopyFrom(typed_dependencies(*syn.parse_dependency(spec.dependency)))


def tasks_per_node(job: pb.Job) -> list[int]:
    """Each allocated node's task count (SLURM_TASKS_PER_NODE), Slurm's block layout."""
    nodes = max(len(job.allocations), 1)
    if job.spec.ntasks_per_node:
        return [job.spec.ntasks_per_node] * nodes
    ntasks = max(job.num_tasks, job.spec.ntasks, nodes)
    base, extra = divmod(ntasks, nodes)
    return [base + (1 if i < extra else 0) for i in range(nodes)]
