"""seff JOBID: a job's CPU and memory efficiency as Slurm's contrib seff prints it, and
its GPUs' (corral/efficiency.py computes; the web page shows the same figures).

The job comes from the accounting store (QueryAccounting); a running job's figures
are its batch script's so far (GetStepStats), as noded last sampled them.
"""

from __future__ import annotations

import sys

from client.common import client
from client.fmt import group_name
from client.views.job import Job
from client.views.step import StepStat
from client.views.usage import Usage
from corral.efficiency import job_efficiency, lines
from corral.errors import CorralError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.wire import json_types as t

PROG = "seff"
VERSION = "2.1"  # the seff these lines follow
USAGE = (
    "Usage: seff [Options] <Jobid>\n"
    "       Options:\n"
    "       -h    Help menu\n"
    "       -v    Version\n"
    "       -d    Debug mode: display raw Slurm data\n"
)


def report(raw: t.Job, now: float, live: t.JobUsage | None = None) -> list[str]:
    """seff's lines for ``raw`` (a QueryAccounting job); ``live``: a running job's
    batch figures so far (a GetStepStats step's node usage)."""
    job = Job(raw)
    state = job.state_name
    usage = Usage(live) if live else job.usage
    eff = job_efficiency(job, state, now=now, usage=usage)
    out = [f"Job ID: {job.job_id}"]
    if job.is_array_task:
        out.append(f"Array Job ID: {job.array_job_id}_{job.array_task_id}")
    out.append(f"Cluster: {job.cluster}")
    out.append(f"User/Group: {job.user}/{group_name(job.gid)}")
    if state in ("PENDING", "RUNNING"):
        out.append(f"State: {state}")
    else:
        code = 0 if state in ("CANCELLED", "TIMEOUT") else job.exit_code
        out.append(f"State: {state} (exit code {code})")
    out.extend(lines(eff, pending=state == "PENDING"))
    if state == "PENDING":
        out.append("Efficiency not available for jobs in the PENDING state.")
    return out


def main_body(argv: Sequence[str]) -> int:
    args = list(argv)
    flags = [a for a in args if a.startswith("-")]
    ids = [a for a in args if not a.startswith("-")]
    if "-v" in flags:
        sys.stdout.write(f"seff Version {VERSION}\n")
        return 1  # as Slurm's seff
    if "-h" in flags or len(ids) != 1 or any(f not in ("-d", "-h", "-v") for f in flags):
        sys.stdout.write(USAGE)
        return 1
    wanted = ids[0]
    base = wanted.split(".")[0]
    array, _, task = base.partition("_")
    if not array.isdigit() or (task and not task.isdigit()):
        sys.stderr.write("Job not found.\n")
        return 2
    api = client()
    reply = api.query_accounting({"filter": {"jobIds": [base]}})
    jobs = [Job(j) for j in reply.get("jobs", [])]
    if task:  # 40_2: the array's task 2 (its own job record)
        more = api.query_accounting(
            {"filter": {"jobIds": [str(int(array) + i) for i in range(int(task) + 1)]}}
        )
        jobs = [
            j
            for j in map(Job, more.get("jobs", []))
            if j.array_job_id == int(array) and j.is_array_task and j.array_task_id == int(task)
        ]
    if not jobs:
        sys.stderr.write("Job not found.\n")
        return 2
    job = jobs[-1]
    live = None
    if job.state_name == "RUNNING":
        try:
            stats = api.get_step_stats({"jobId": str(job.job_id), "step": "batch"})
            for step in map(StepStat, stats.get("steps", [])):
                for node in step.nodes:
                    live = node.live.raw.get("usage")
        except CorralError:
            live = None
    now = float(reply.get("now") or 0)
    sys.stdout.write("".join(line + "\n" for line in report(job.raw, now, live)))
    return 0


def main() -> None:
    from client.common import run

    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
