"""seff JOBID: a job's CPU and memory efficiency as Slurm's contrib seff prints it, and
its GPUs' (corral/efficiency.py computes; the web page shows the same figures).

The job comes from the accounting store (QueryAccounting); a running job's figures
are its batch script's so far (GetStepStats), as noded last sampled them.
"""

from __future__ import annotations

import sys

from client.common import client, job_state, num, real, text
from client.fmt import group_name
from corral.efficiency import efficiency, lines
from corral.errors import CorralError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from client.common import Json

PROG = "seff"
VERSION = "2.1"  # the seff these lines follow
USAGE = (
    "Usage: seff [Options] <Jobid>\n"
    "       Options:\n"
    "       -h    Help menu\n"
    "       -v    Version\n"
    "       -d    Debug mode: display raw Slurm data\n"
)


def report(job: Json, now: float, live: Json | None = None) -> list[str]:
    """seff's lines for ``job`` (a QueryAccounting job); ``live``: a running job's
    batch figures so far (a GetStepStats step's node usage)."""
    state = job_state(job)
    spec: Json = job.get("spec") or {}
    usage: Json = (live or job.get("usage")) or {}
    start, end = real(job, "startTime"), real(job, "endTime")
    started = bool(start) and state != "PENDING"
    elapsed = (
        ((end if end and state not in ("RUNNING", "COMPLETING") else now) - start)
        if started
        else 0.0
    )
    gpus = num(job, "numGpus")
    eff = efficiency(
        elapsed_s=elapsed,
        cpus=num(job, "numCpus") or 1,
        nodes=num(job, "numNodes") or len(job.get("allocations", [])) or 1,
        cpu_used_s=real(usage, "userCpuS") + real(usage, "systemCpuS"),
        max_rss_kb=num(usage, "maxRssKb"),
        mem_per_node_mb=num(spec, "memPerNodeMb"),
        mem_per_cpu_mb=num(spec, "memPerCpuMb"),
        mem_total_mb=num(job, "memMb"),
        gpus=gpus,
        gpu_util_mean=real(usage, "gpuUtilMean"),
        gpu_util_max=real(usage, "gpuUtilMax"),
        gpu_mem_max_mb=real(usage, "gpuMemMaxMb"),
        samples=num(usage, "samples"),
        running=state == "RUNNING",
    )
    out = [f"Job ID: {num(job, 'jobId')}"]
    if "arrayTaskId" in job:
        out.append(f"Array Job ID: {num(job, 'arrayJobId')}_{num(job, 'arrayTaskId')}")
    out.append(f"Cluster: {text(job, 'cluster')}")
    out.append(f"User/Group: {text(job, 'user')}/{group_name(num(job, 'gid'))}")
    if state in ("PENDING", "RUNNING"):
        out.append(f"State: {state}")
    else:
        code = 0 if state in ("CANCELLED", "TIMEOUT") else num(job, "exitCode")
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
    reply: Json = api.query_accounting({"filter": {"jobIds": [base]}})
    jobs = list(reply.get("jobs", []))
    if task:  # 40_2: the array's task 2 (its own job record)
        more: Json = api.query_accounting(
            {"filter": {"jobIds": [str(int(array) + i) for i in range(int(task) + 1)]}}
        )
        jobs = [
            j
            for j in more.get("jobs", [])
            if num(j, "arrayJobId") == int(array) and num(j, "arrayTaskId", -1) == int(task)
        ]
    if not jobs:
        sys.stderr.write("Job not found.\n")
        return 2
    job = jobs[-1]
    live = None
    if job_state(job) == "RUNNING":
        try:
            stats: Json = api.get_step_stats({"jobId": str(num(job, "jobId")), "step": "batch"})
            for step in stats.get("steps", []):
                for node in step.get("nodes", []):
                    live = (node.get("live") or {}).get("usage")
        except CorralError:
            live = None
    sys.stdout.write("".join(line + "\n" for line in report(job, real(reply, "now"), live)))
    return 0


def main() -> None:
    from client.common import run

    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
