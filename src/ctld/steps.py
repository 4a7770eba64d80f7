"""Job steps: where srun's tasks go inside an allocation (pure; Cluster records them).

Slurm's defaults: a step uses every node of the allocation unless -N, -w or -n ask for
fewer; -n defaults to the job's task count (one per node when the job gave none);
ranks go to nodes in blocks (node 0 gets the first ones) or cyclically with
--distribution=cyclic. Steps share the allocation: several may run at once.
"""

from __future__ import annotations

from corral import hostlist
from corral.errors import CorralError, InvalidOption
from corral.wire import corral_pb2 as pb

MAX_TASKS = 65536


class StepLayoutError(CorralError):
    """The step does not fit the allocation (srun: Unable to create step ...)."""

    exit_code = 1


def plan_step(job: pb.Job, spec: pb.StepSpec, addresses: dict[str, str]) -> list[pb.StepNode]:
    """The step's nodes, each with its ranks and GPUs; StepLayoutError if it cannot fit."""
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
        nodes.append(
            pb.StepNode(
                node=alloc.node,
                address=addresses.get(alloc.node, ""),
                node_id=i,
                ranks=mine,
                gpu_indices=gpus,
                cpus=alloc.cpus,
            )
        )
    return nodes


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
