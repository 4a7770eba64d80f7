"""A step's end: the state it ends in, and the end a step reaches when every node of it
reported its tasks gone (srun killed, never to report). Both the step handlers (srun's
CompleteStep, scancel JOBID.STEP) and the node reports end steps here.
"""

from __future__ import annotations

from corral.errors import CorralError, InvalidJobId
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.model.nodes import NodeRecord


def find_step(job: pb.Job, step_id: int) -> pb.Step:
    for step in job.steps:
        if step.step_id == step_id:
            return step
    raise InvalidJobId(f"Invalid job id specified: step {job.job_id}.{step_id} does not exist")


class StepEnds:
    def __init__(self, state: State) -> None:
        self.state = state
        self._nodes_done: dict[tuple[int, int], set[str]] = {}  # nodes whose part ended

    def part_ended(
        self, ch: Change, job: pb.Job, node: NodeRecord, upd: pb.JobStatusUpdate
    ) -> bool:
        """A node's tasks of a step are gone. Once every node of the step said so, the step
        has ended even if srun never reports (it was killed): it must not hold the job's
        CPUs and GPUs for ever."""
        try:
            step = find_step(job, upd.step_id)
        except CorralError:
            return False
        if step.state != js.RUNNING or node.name not in {n.node for n in step.nodes}:
            return False
        key = (job.job_id, step.step_id)
        done = self._nodes_done.setdefault(key, set())
        done.add(node.name)
        # the step's exit: the worst code its parts reported, the first signal
        code = max(step.exit_code, max(0, min(upd.exit_code, 255)))
        sig = step.exit_signal or max(0, min(upd.exit_signal, 64))
        if done < {n.node for n in step.nodes}:
            ch.step_part(job, step, exit_code=code, exit_signal=sig)
            return False
        del self._nodes_done[key]
        self.end_step(ch, job, step, code, sig, cancelled=False)
        ch.transition(
            job,
            "updated",
            cause=f"node:{node.name} report",
            detail=f"step {step.step_id} ended on every node",
        )
        return True

    def part_done(self, job: pb.Job, step: pb.Step, node: str) -> bool:
        """``node`` reported its part of the running ``step`` ended."""
        return node in self._nodes_done.get((job.job_id, step.step_id), ())

    def end_step(
        self,
        ch: Change,
        job: pb.Job,
        step: pb.Step,
        exit_code: int,
        exit_signal: int,
        cancelled: bool,
        reason: str = "",
    ) -> None:
        if cancelled or job.state == js.COMPLETING:
            # a step the job's cancel killed is CANCELLED, however its tasks died (Slurm)
            final = js.CANCELLED
        elif max(0, min(exit_code, 255)) or max(0, min(exit_signal, 64)):
            final = js.FAILED
        else:
            final = js.COMPLETED
        ch.end_step(
            job,
            step,
            final,
            self.state.clock(),
            exit_code=exit_code,
            exit_signal=exit_signal,
            reason=printable(reason, 512) if final == js.FAILED else "",
        )


def printable(text: str, limit: int) -> str:
    """A client's reason string, bounded, one line of printable characters."""
    return "".join(c if c.isprintable() else " " for c in text[:limit]).strip()
