"""A job's efficiency as Slurm's ``seff`` computes it, plus its GPUs: one computation
that the ``seff`` command and ctld's web page share, so they never disagree.

Pure: numbers in, numbers out (no clock, no I/O, no protobuf at run time, so a command
that reads jobs as JSON can call ``efficiency`` without importing protobuf).

seff's rules (contribs/seff/seff in Slurm's source):

- core-walltime = elapsed x allocated CPUs; CPU efficiency = CPU time (user + system)
  / core-walltime;
- memory requested = ``--mem`` x nodes, or ``--mem-per-cpu`` x CPUs; memory
  efficiency = MaxRSS / memory requested;
- a pending job (never started) has neither.

Beyond seff: GPU utilization (mean and peak over noded's samples) and GPU memory (the
peak on one GPU, against one GPU's memory when the caller knows it).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.slurmfmt import SACCT, format_duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sized
    from typing import Protocol

    # what job_efficiency reads: a corral_pb2.Job (ctld) and client/views' Job (seff,
    # from JSON) both have it, under the proto's own names
    class UsageFigures(Protocol):
        @property
        def user_cpu_s(self) -> float: ...
        @property
        def system_cpu_s(self) -> float: ...
        @property
        def max_rss_kb(self) -> int: ...
        @property
        def gpu_util_mean(self) -> float: ...
        @property
        def gpu_util_max(self) -> float: ...
        @property
        def gpu_mem_max_mb(self) -> float: ...
        @property
        def samples(self) -> int: ...

    class SpecFigures(Protocol):
        @property
        def mem_per_node_mb(self) -> int: ...
        @property
        def mem_per_cpu_mb(self) -> int: ...

    class JobFigures(Protocol):
        @property
        def start_time(self) -> float: ...
        @property
        def end_time(self) -> float: ...
        @property
        def num_cpus(self) -> int: ...
        @property
        def num_nodes(self) -> int: ...
        @property
        def mem_mb(self) -> int: ...
        @property
        def num_gpus(self) -> int: ...
        @property
        def allocations(self) -> Sized: ...
        @property
        def spec(self) -> SpecFigures: ...
        @property
        def usage(self) -> UsageFigures: ...


@dataclass(frozen=True)
class Efficiency:
    elapsed_s: float  # Job Wall-clock time
    cpus: int
    nodes: int
    cpu_used_s: float  # CPU Utilized (user + system)
    core_walltime_s: float  # elapsed x CPUs
    cpu_pct: float | None  # CPU Efficiency; None: no core-walltime (never ran)
    mem_used_kb: int  # Memory Utilized (MaxRSS)
    mem_requested_mb: int  # for the whole job; 0: none requested
    mem_per: str  # "node" or "core": how it was requested (seff's "(X/node)")
    mem_per_mb: int  # the request per node or per core
    mem_pct: float | None  # Memory Efficiency; None: nothing requested
    gpus: int
    gpu_util_mean_pct: float | None  # over its GPUs and samples; None: no GPUs or samples
    gpu_util_max_pct: float | None
    gpu_mem_max_mb: float  # the most its processes held on one GPU
    gpu_mem_pct: float | None  # of one GPU's memory; None: unknown
    samples: int  # noded's samples behind the figures
    running: bool  # seff warns that a running job's figures may mislead


def efficiency(
    *,
    elapsed_s: float,
    cpus: int,
    nodes: int,
    cpu_used_s: float,
    max_rss_kb: int,
    mem_per_node_mb: int = 0,
    mem_per_cpu_mb: int = 0,
    mem_total_mb: int = 0,
    gpus: int = 0,
    gpu_util_mean: float = 0.0,
    gpu_util_max: float = 0.0,
    gpu_mem_max_mb: float = 0.0,
    gpu_memory_mb: float = 0.0,
    samples: int = 0,
    running: bool = False,
) -> Efficiency:
    """seff's figures from plain numbers. ``mem_total_mb`` stands in when neither
    ``--mem`` nor ``--mem-per-cpu`` was given (the partition's default, as allocated);
    ``gpu_memory_mb`` is one GPU's memory (0: unknown)."""
    elapsed_s = max(0.0, elapsed_s)
    cpus, nodes = max(0, cpus), max(0, nodes)
    core_walltime = elapsed_s * cpus
    cpu_pct = cpu_used_s / core_walltime * 100 if core_walltime > 0 else None
    if mem_per_cpu_mb:
        mem_per, per_mb, requested = "core", mem_per_cpu_mb, mem_per_cpu_mb * cpus
    elif mem_per_node_mb:
        mem_per, per_mb, requested = "node", mem_per_node_mb, mem_per_node_mb * max(1, nodes)
    else:
        mem_per, requested = "node", mem_total_mb
        per_mb = mem_total_mb // max(1, nodes)
    mem_pct = max_rss_kb / (requested * 1024) * 100 if requested > 0 else None
    sampled = gpus > 0 and samples > 0
    return Efficiency(
        elapsed_s=elapsed_s,
        cpus=cpus,
        nodes=nodes,
        cpu_used_s=cpu_used_s,
        core_walltime_s=core_walltime,
        cpu_pct=cpu_pct,
        mem_used_kb=max_rss_kb,
        mem_requested_mb=requested,
        mem_per=mem_per,
        mem_per_mb=per_mb,
        mem_pct=mem_pct,
        gpus=gpus,
        gpu_util_mean_pct=gpu_util_mean if sampled else None,
        gpu_util_max_pct=gpu_util_max if sampled else None,
        gpu_mem_max_mb=gpu_mem_max_mb,
        gpu_mem_pct=(
            gpu_mem_max_mb / gpu_memory_mb * 100 if sampled and gpu_memory_mb > 0 else None
        ),
        samples=samples,
        running=running,
    )


def job_efficiency(
    job: JobFigures,
    state: str,
    *,
    now: float = 0.0,
    usage: UsageFigures | None = None,
    gpu_memory_mb: float = 0.0,
) -> Efficiency:
    """seff's figures for ``job`` in ``state`` (Slurm's name: PENDING, RUNNING...): its
    elapsed time runs to its end, or to ``now`` while it runs; ``usage``: a running
    job's figures so far, when the caller has fresher ones than the job's record.
    seff and the web page both call this, so they read the same inputs the same way."""
    started = job.start_time > 0 and state != "PENDING"
    still_on = state in ("RUNNING", "COMPLETING")
    end = job.end_time if job.end_time > 0 and not still_on else now
    elapsed = end - job.start_time if started and end > 0 else 0.0
    used = usage if usage is not None else job.usage
    spec = job.spec
    return efficiency(
        elapsed_s=elapsed,
        cpus=job.num_cpus or 1,
        nodes=job.num_nodes or len(job.allocations) or 1,
        cpu_used_s=used.user_cpu_s + used.system_cpu_s,
        max_rss_kb=used.max_rss_kb,
        mem_per_node_mb=spec.mem_per_node_mb,
        mem_per_cpu_mb=spec.mem_per_cpu_mb,
        mem_total_mb=job.mem_mb,
        gpus=job.num_gpus,
        gpu_util_mean=used.gpu_util_mean,
        gpu_util_max=used.gpu_util_max,
        gpu_mem_max_mb=used.gpu_mem_max_mb,
        gpu_memory_mb=gpu_memory_mb,
        samples=used.samples,
        running=state == "RUNNING",
    )


def clock(seconds: float) -> str:
    """seff's time2str: [D-]HH:MM:SS (sacct's Elapsed form)."""
    return format_duration(max(seconds, 0.0), SACCT)


def kbytes(kb: float) -> str:
    """seff's kbytes2str: 0.00 MB, 512.00 KB, 1.50 GB."""
    if kb <= 0:
        return "0.00 MB"
    units = ("KB", "MB", "GB", "TB", "PB", "EB")
    exp = 0
    while kb >= 1024 and exp < len(units) - 1:
        kb /= 1024
        exp += 1
    return f"{kb:.2f} {units[exp]}"


def lines(eff: Efficiency, *, pending: bool = False) -> list[str]:
    """seff's figures as seff prints them (after its Job ID, Cluster, User/Group and
    State lines), then the GPU lines seff lacks."""
    out = []
    if eff.cpus == 1:
        out.append("Cores: 1")
    else:
        out.append(f"Nodes: {eff.nodes}")
        out.append(f"Cores per node: {eff.cpus // max(1, eff.nodes)}")
    if pending:
        return out
    out.append(f"CPU Utilized: {clock(eff.cpu_used_s)}")
    out.append(
        f"CPU Efficiency: {eff.cpu_pct or 0.0:.2f}% of {clock(eff.core_walltime_s)} core-walltime"
    )
    out.append(f"Job Wall-clock time: {clock(eff.elapsed_s)}")
    used = kbytes(eff.mem_used_kb)
    out.append(f"Memory Utilized: {used}" + (" (estimated maximum)" if eff.running else ""))
    if eff.mem_pct is not None:
        out.append(
            f"Memory Efficiency: {eff.mem_pct:.2f}% of {kbytes(eff.mem_requested_mb * 1024)} "
            f"({kbytes(eff.mem_per_mb * 1024)}/{eff.mem_per})"
        )
    if eff.gpu_util_mean_pct is not None:
        out.append(
            f"GPU Utilization: {eff.gpu_util_mean_pct:.2f}% mean, "
            f"{eff.gpu_util_max_pct or 0.0:.2f}% peak over {eff.gpus} GPU"
            + ("s" if eff.gpus != 1 else "")
        )
        mem = f"GPU Memory Utilized: {kbytes(eff.gpu_mem_max_mb * 1024)} (peak on one GPU)"
        if eff.gpu_mem_pct is not None:
            mem += f", {eff.gpu_mem_pct:.2f}% of one GPU's memory"
        out.append(mem)
    if eff.running:
        out.append("WARNING: Efficiency statistics may be misleading for RUNNING jobs.")
    return out
