"""What the heartbeat carries besides liveness: each running batch script's and step's
usage so far (sstat), and every GPU's utilization, memory and health (the metrics).

Sampled when a heartbeat is built: memory, virtual memory and CPU time of each
batch script's and step's processes here (a batch script's figures leave out its
steps' processes, as Slurm's batch step does), GPU figures from the backend. A GPU
that stops answering, or that had a fault (XID, ECC), reports that fault until noded
restarts; ctld drains the node on the fault itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil
import structlog

from corral.wire import corral_pb2 as pb
from noded.gpu import GpuBackend, HealthEvent
from noded.launcher import Launcher
from noded.progress import checkpoint_mark
from noded.steps import StepRunner

log = structlog.get_logger("noded")


@dataclass
class Figures:
    """One batch script's or step's samples on this node."""

    max_rss_kb: int = 0
    rss_sum_kb: int = 0
    max_vmem_kb: int = 0
    vmem_sum_kb: int = 0
    samples: int = 0
    cpu_by_pid: dict[tuple[int, float], tuple[float, float]] = field(default_factory=dict)

    def add(self, pids: Iterable[int]) -> list[int]:
        rss = vms = 0
        seen = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                with proc.oneshot():
                    mem = proc.memory_info()
                    t = proc.cpu_times()
                    self.cpu_by_pid[(pid, proc.create_time())] = (t.user, t.system)
                rss += mem.rss
                vms += mem.vms
                seen.append(pid)
        self.samples += 1
        self.max_rss_kb = max(self.max_rss_kb, rss // 1024)
        self.rss_sum_kb += rss // 1024
        self.max_vmem_kb = max(self.max_vmem_kb, vms // 1024)
        self.vmem_sum_kb += vms // 1024
        return sorted(seen)

    def to_wire(self, live: pb.LiveUsage) -> None:
        n = max(self.samples, 1)
        u = live.usage
        u.max_rss_kb, u.ave_rss_kb = self.max_rss_kb, self.rss_sum_kb // n
        u.user_cpu_s = sum(c[0] for c in self.cpu_by_pid.values())
        u.system_cpu_s = sum(c[1] for c in self.cpu_by_pid.values())
        u.samples = self.samples
        live.max_vmem_kb, live.ave_vmem_kb = self.max_vmem_kb, self.vmem_sum_kb // n


class LiveSampler:
    def __init__(self, launcher: Launcher, steps: StepRunner | None, gpus: GpuBackend) -> None:
        self.launcher = launcher
        self.steps = steps
        self.gpus = gpus
        self.gpu_indices: list[int] = []
        self.faults: dict[int, str] = {}  # GPU index -> what noded found
        self.figures: dict[tuple[int, int | None], Figures] = {}

    def fault(self, event: HealthEvent) -> None:
        if event.gpu_index >= 0:
            self.faults[event.gpu_index] = event.reason()

    def usage(self) -> list[pb.LiveUsage]:
        out: list[pb.LiveUsage] = []
        step_pids: dict[int, set[int]] = {}
        keep: set[tuple[int, int | None]] = set()
        for (job_id, step_id), running in list((self.steps.steps if self.steps else {}).items()):
            if running.procs is None:
                continue
            key: tuple[int, int | None] = (job_id, step_id)
            keep.add(key)
            pids = running.procs.pids() | {t.process.pid for t in running.tasks}
            step_pids.setdefault(job_id, set()).update(pids)
            live = pb.LiveUsage(job_id=job_id, step_id=step_id, ntasks=len(running.tasks))
            live.first_rank = min((t.rank for t in running.tasks), default=0)
            live.pids.extend(self.figures.setdefault(key, Figures()).add(pids))
            self.figures[key].to_wire(live)
            out.append(live)
        for job_id, job in list(self.launcher.jobs.items()):
            if job.procs is None or job.process is None or job.process.returncode is not None:
                continue
            key = (job_id, None)
            keep.add(key)
            pids = job.procs.pids() - step_pids.get(job_id, set())
            live = pb.LiveUsage(job_id=job_id, ntasks=1)
            live.pids.extend(self.figures.setdefault(key, Figures()).add(pids))
            self.figures[key].to_wire(live)
            live.checkpoint_time = checkpoint_mark(job.checkpoint_dir)
            u = live.usage
            u.gpu_util_max, u.gpu_util_mean = job.gpu.util_max, job.gpu.util_mean
            u.gpu_mem_max_mb, u.gpu_mem_mean_mb = job.gpu.mem_max_mb, job.gpu.mem_mean_mb
            out.append(live)
        for gone in set(self.figures) - keep:
            del self.figures[gone]
        return out

    def gpu_status(self) -> list[pb.GpuStatus]:
        if not self.gpu_indices:
            return []
        try:
            samples = {s.index: s for s in self.gpus.sample(self.gpu_indices, ())}
        except Exception:
            log.warning("GPU sample for the heartbeat failed", exc_info=True)
            samples = {}
        out = []
        for i in self.gpu_indices:
            s = samples.get(i)
            fault = self.faults.get(i, "" if s is not None else f"GPU {i} not answering")
            out.append(
                pb.GpuStatus(
                    index=i,
                    util_pct=s.util_pct if s else 0.0,
                    memory_used_mb=s.memory_used_mb if s else 0.0,
                    fault=fault,
                )
            )
        return out

    def collect(self) -> tuple[list[pb.LiveUsage], list[pb.GpuStatus]]:
        """The heartbeat's figures; a failure here costs the figures, never the beat."""
        try:
            return self.usage(), self.gpu_status()
        except Exception:
            log.exception("live figures failed")
            return [], []
