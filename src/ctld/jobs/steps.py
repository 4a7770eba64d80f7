"""Job steps: where srun's tasks go inside an allocation (pure; Cluster records them).

Slurm's defaults: a step uses every node of the allocation unless -N, -w or -n ask for
fewer; -n defaults to the job's task count (one per node when the job gave none);
ranks go to nodes in blocks (node 0 gets the first ones) or cyclically with
--distribution=cyclic. A step holds the job's CPUs and GPUs on its nodes unless
--exact (only its tasks' share) or --overlap (nothing); one that does not fit beside
the running steps gets StepBusy, and srun waits and retries, as Slurm's does.
"""

from __future__ import annotations

from corral import hostlist
from corral.errors import CorralError, InvalidOption, StepBusy, StepLayoutError
from corral.wire import corral_pb2 as pb

MAX_TASKS = 65536


Held = dict[str, tuple[int, set[int]]]  # node -> (CPUs, GPU indices) running steps hold


def holdings(step: pb.Step) -> Held:
    """What a running step keeps from the others (Slurm's rules, 22.05): by default a
    step holds all of the job's CPUs and GPUs on its nodes; with --exact only its tasks'
    CPUs and, with --gpus-per-task, their GPUs; with --overlap nothing."""
    if step.spec.overlap:
        return {}
    out: Held = {}
    for n in step.nodes:
        gpus = set(n.gpu_indices) if (not step.spec.exact or step.spec.gpus_per_task) else set()
        out[n.node] = (n.cpus, gpus)
    return out


def plan_step(
    job: pb.Job,
    spec: pb.StepSpec,
    addresses: dict[str, str],
    held: Held | None = None,
    streams: dict[str, str] | None = None,
) -> list[pb.StepNode]:
    """The step's nodes, each with its ranks, CPUs and GPUs.

    StepLayoutError if it can never fit the allocation; StepBusy if it fits but other
    running steps (``held``) hold what it needs now.
    """
    held = held or {}
    allocs = list(job.allocations)
    if spec.nodelist:
        wanted = set(_names(spec.nodelist, "-w"))
        missing = wanted - {a.node for a in allocs}
        if missing:
            raise StepLayoutError(
                f"Requested node configuration is not available: {', '.join(sorted(missing))} "
                "not in the job's allocation"
            )
        allocs = [a for a in allocs if a.node in wanted]
    if spec.exclude:
        excluded = set(_names(spec.exclude, "-x"))
        allocs = [a for a in allocs if a.node not in excluded]
    if not allocs:
        raise StepLayoutError("Requested node configuration is not available: no nodes left")
    ntasks = spec.ntasks
    if spec.num_nodes:
        if spec.num_nodes > len(allocs):
            raise StepLayoutError(
                f"Requested node configuration is not available: -N {spec.num_nodes} but the "
                f"allocation has {len(allocs)} node(s)"
            )
        allocs = allocs[: spec.num_nodes]
    elif spec.ntasks_per_node and ntasks:
        allocs = allocs[: max(1, -(-ntasks // spec.ntasks_per_node))]
    elif ntasks and not spec.nodelist:
        allocs = allocs[: min(len(allocs), ntasks)]
    if not ntasks:
        if spec.ntasks_per_node:
            ntasks = spec.ntasks_per_node * len(allocs)
        elif spec.num_nodes or spec.nodelist:
            ntasks = len(allocs)
        else:
            ntasks = max(job.num_tasks, len(allocs))
    if ntasks > MAX_TASKS:
        raise InvalidOption(f"-n {ntasks} is out of range")
    if ntasks < len(allocs):
        raise StepLayoutError(
            f"Requested node configuration is not available: {ntasks} task(s) on "
            f"{len(allocs)} node(s)"
        )
    counts = _counts(ntasks, len(allocs), spec.ntasks_per_node)
    ranks = _ranks(counts, spec.distribution or "block")
    nodes: list[pb.StepNode] = []
    for i, (alloc, mine) in enumerate(zip(allocs, ranks, strict=True)):
        gpus = list(alloc.gpu_indices)
        if spec.gpus_per_task and len(mine) * spec.gpus_per_task > len(gpus):
            raise StepLayoutError(
                f"Requested node configuration is not available: {len(mine)} task(s) x "
                f"{spec.gpus_per_task} GPU(s) on {alloc.node}, which has {len(gpus)} of the job's"
            )
        if spec.cpus_per_task and len(mine) * spec.cpus_per_task > alloc.cpus:
            raise StepLayoutError(
                f"Requested node configuration is not available: {len(mine)} task(s) x "
                f"{spec.cpus_per_task} CPU(s) on {alloc.node}, which has {alloc.cpus} of the job's"
            )
        cpus, gpus = _take(alloc, spec, len(mine), gpus, held.get(alloc.node, (0, set())))
        nodes.append(
            pb.StepNode(
                node=alloc.node,
                address=addresses.get(alloc.node, ""),
                stream_address=(streams or {}).get(alloc.node, ""),
                node_id=i,
                ranks=mine,
                gpu_indices=gpus,
                cpus=cpus,
            )
        )
    return nodes


def _take(
    alloc: pb.NodeAllocation,
    spec: pb.StepSpec,
    tasks: int,
    gpus: list[int],
    held: tuple[int, set[int]],
) -> tuple[int, list[int]]:
    """The CPUs and GPUs the step gets on this node, or StepBusy."""
    held_cpus, held_gpus = held
    if spec.overlap:
        return alloc.cpus, gpus[: tasks * spec.gpus_per_task] if spec.gpus_per_task else gpus
    if not spec.exact:
        if held_cpus or held_gpus:
            raise StepBusy(f"Requested nodes are busy: other steps hold {alloc.node}")
        return alloc.cpus, gpus
    cpus = tasks * max(spec.cpus_per_task, 1)
    if held_cpus + cpus > alloc.cpus:
        raise StepBusy(
            f"Requested nodes are busy: {alloc.node} has {alloc.cpus - held_cpus} of the "
            f"job's CPUs free, the step needs {cpus}"
        )
    if not spec.gpus_per_task:
        return cpus, gpus  # sees the job's GPUs, holds none of them
    free = [g for g in gpus if g not in held_gpus]
    need = tasks * spec.gpus_per_task
    if need > len(free):
        raise StepBusy(
            f"Requested nodes are busy: {alloc.node} has {len(free)} of the job's GPUs free, "
            f"the step needs {need}"
        )
    return cpus, free[:need]


def _names(expr: str, flag: str) -> list[str]:
    try:
        return hostlist.expand(expr)
    except CorralError as exc:
        raise InvalidOption(f"{flag} {expr!r}: {exc}") from None


def _counts(ntasks: int, nodes: int, per_node: int) -> list[int]:
    if per_node:
        counts = [min(per_node, max(0, ntasks - i * per_node)) for i in range(nodes)]
        if sum(counts) < ntasks:
            raise StepLayoutError(
                f"Requested node configuration is not available: {ntasks} task(s) at "
                f"{per_node} per node need more than {nodes} node(s)"
            )
        return counts
    base, extra = divmod(ntasks, nodes)
    return [base + (1 if i < extra else 0) for i in range(nodes)]


def _ranks(counts: list[int], distribution: str) -> list[list[int]]:
    kind = distribution.split(":", 1)[0].lower()
    if kind not in ("block", "cyclic"):
        raise InvalidOption(f"Invalid --distribution: {distribution} (block or cyclic)")
    out: list[list[int]] = [[] for _ in counts]
    if kind == "block":
        rank = 0
        for i, c in enumerate(counts):
            out[i] = list(range(rank, rank + c))
            rank += c
        return out
    left, rank = list(counts), 0
    while any(left):
        for i in range(len(left)):
            if left[i]:
                out[i].append(rank)
                left[i] -= 1
                rank += 1
    return out
