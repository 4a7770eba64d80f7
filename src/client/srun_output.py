"""Where srun puts its tasks' output: its own stdout/stderr, whole lines at a time
(``-l`` labels them with the rank, ``-u`` passes bytes as they come), or the files
``-o``/``-e`` name, their patterns expanded per task as Slurm's srun does."""

from __future__ import annotations

import os
import sys

from client.views.job import Job
from client.views.step import Step
from corral.patterns import expand_pattern

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from corral.wire import json_types as t


class Output:
    """Where the tasks' bytes go: srun's stdout/stderr (optionally labelled) or files."""

    def __init__(self, cli: dict[str, Any], job: t.Job, step: t.Step) -> None:
        self.label = bool(cli.get("label"))
        self.unbuffered = bool(cli.get("unbuffered"))
        self.patterns = {False: cli.get("output"), True: cli.get("error") or cli.get("output")}
        self.job, self.step = Job(job), Step(step)
        self.partial: dict[tuple[int, bool], bytes] = {}
        self.files: dict[str, Any] = {}
        self.node_of = {r: n for n in self.step.nodes for r in n.ranks}
        self.array_job_id, self.array_task_id = array_ids(job)

    def _target(self, rank: int, is_err: bool) -> Any:
        pattern = self.patterns[is_err]
        if not pattern:
            return sys.stderr.buffer if is_err else sys.stdout.buffer
        node = self.node_of.get(rank)
        path = expand_pattern(
            pattern,
            job_id=self.job.job_id,
            job_name=self.job.spec.name,
            user=self.job.user,
            node=node.node if node else "",
            node_id=node.node_id if node else 0,
            array_job_id=self.array_job_id,
            array_task_id=self.array_task_id,
            task_id=rank,
            step=str(self.step.step_id),
        )
        fh = self.files.get(path)
        if fh is None:
            fh = self.files[path] = open(path, "wb")  # noqa: SIM115 (closed in close())
        return fh

    def write(self, rank: int, is_err: bool, data: bytes | bytearray) -> None:
        """Whole lines only (Slurm's default), so tasks interleave by line, never mid-line;
        -u passes bytes through as they come."""
        out = self._target(rank, is_err)
        if self.unbuffered and not self.label:
            out.write(data)
            out.flush()
            return
        key = (rank, is_err)
        if not self.label:  # the whole lines at once: one search, no split
            cut = data.rfind(b"\n") + 1
            if not cut:
                self.partial[key] = self.partial.get(key, b"") + data
                return
            out.write(self.partial.pop(key, b""))
            out.write(data[:cut])
            if cut < len(data):
                self.partial[key] = bytes(data[cut:])
            out.flush()
            return
        joined = self.partial.pop(key, b"") + data
        *lines, rest = joined.split(b"\n")
        if rest:
            self.partial[key] = rest
        if lines:
            prefix = f"{rank}: ".encode()
            out.write(b"".join(prefix + line + b"\n" for line in lines))
            out.flush()

    def close(self) -> None:
        for (rank, is_err), rest in list(self.partial.items()):
            prefix = f"{rank}: ".encode() if self.label else b""
            self._target(rank, is_err).write(prefix + rest)
        self.partial.clear()
        sys.stdout.flush()
        for fh in self.files.values():
            fh.close()


def array_ids(raw: t.Job) -> tuple[int, int | None]:
    """The job's array master id and task index for %A and %a: ctld's record of the job,
    else (an older ctld) SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID when srun runs inside
    that very job, as Slurm's srun reads them."""
    job = Job(raw)
    if job.is_array_task:
        return job.array_job_id, job.array_task_id
    env = os.environ
    inside = env.get("SLURM_JOB_ID") == str(job.job_id)
    master, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if inside and master.isdecimal() and task.isdecimal():
        return int(master), int(task)
    return 0, None
