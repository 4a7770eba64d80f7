"""What the nodes measured last: running jobs' and steps' usage, every GPU's status.

Each heartbeat replaces its node's figures (memory only: they are samples, not
records; what a job used in the end comes with its exit report and is stored). sstat
reads the usage (``step_stats``), the metrics the GPUs. A node that stops beating
keeps its last figures until it is declared down; a step that ended drops out at its
node's next heartbeat.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from corral.errors import InvalidRequest
from corral.wire import corral_pb2 as pb

BATCH = "batch"


@dataclass
class NodeFigures:
    usage: dict[tuple[int, str], pb.LiveUsage] = field(default_factory=dict)
    gpus: dict[int, pb.GpuStatus] = field(default_factory=dict)


def step_key(live: pb.LiveUsage) -> str:
    return str(live.step_id) if live.HasField("step_id") else BATCH


class LiveFigures:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeFigures] = {}
        # each running batch job's last checkpoint mark (its checkpoint dir's last change),
        # kept past its node's loss: what a requeue counts as the work lost
        self.checkpoints: dict[int, float] = {}

    def record(self, beat: pb.HeartbeatRequest) -> None:
        figures: NodeFigures = NodeFigures()  # ctld's own record, not a job's
        for live in beat.usage:
            figures.usage[(live.job_id, step_key(live))] = live
            if live.checkpoint_time > self.checkpoints.get(live.job_id, 0.0):
                self.checkpoints[live.job_id] = live.checkpoint_time
        for gpu in beat.gpus:
            figures.gpus[gpu.index] = gpu
        self.nodes[beat.name] = figures

    def forget(self, node: str) -> None:
        self.nodes.pop(node, None)

    def gpus(self, node: str) -> dict[int, pb.GpuStatus]:
        figures = self.nodes.get(node)
        return figures.gpus if figures is not None else {}

    def step_stats(self, job: pb.Job, step: str, nodes: Iterable[str]) -> list[pb.StepStat]:
        """What ``job``'s steps used so far: ``step`` alone ("batch" or an id), or every
        step that runs ("": srun's steps; the batch script too when none runs, as
        sstat -a shows it)."""
        if step and step != BATCH and not step.isdigit():
            raise InvalidRequest(f"Bad job/step specified: {job.job_id}.{step}")
        found: dict[str, pb.StepStat] = {}
        for name in nodes:
            figures = self.nodes.get(name)
            if figures is None:
                continue
            for (job_id, key), live in figures.usage.items():
                if job_id != job.job_id or (step and key != step):
                    continue
                stat: pb.StepStat | None = found.get(key)  # the reply's, not a job's
                if stat is None:
                    stat = found[key] = pb.StepStat(step=key)
                stat.nodes.add(node=name, live=live)
        ntasks = {str(s.step_id): s.ntasks for s in job.steps}
        out = []
        for key in sorted(found, key=lambda k: (k != BATCH, int(k) if k.isdigit() else -1)):
            stat = found[key]
            stat.ntasks = ntasks.get(key) or sum(n.live.ntasks for n in stat.nodes)
            out.append(stat)
        return out
