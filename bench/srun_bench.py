"""srun: launch latency (``srun -n1 true``, ``srun -N2 -n16 true``) and I/O throughput.

Launch latency is the wall time of the whole command, inside an existing allocation
(as in a batch script) and outside one (srun allocates, runs, releases). Throughput is
a task writing to stdout as fast as it can through srun into /dev/null.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
    PYTHON,
    VENV_BIN,
    PhaseResult,
    Table,
    bench_cluster,
    log,
    ms,
    phase_main,
    summary,
    time_cmd,
)

SLURM_SRUN = "71 ms (p95 352 ms)"


def _allocation(cluster: Any) -> str:
    client = cluster.client()
    spec = {
        "workDir": str(cluster.work_dir),
        "name": "bench",
        "allocationOnly": True,
        "nodesMin": 2,
    }
    job_id = str(client.submit_job({"spec": spec})["jobId"])
    deadline = time.monotonic() + 30
    while client.get_jobs({"filter": {"jobIds": [job_id]}})["jobs"][0]["state"] != (
        "JOB_STATE_RUNNING"
    ):
        if time.monotonic() > deadline:
            raise TimeoutError("the allocation did not start")
        time.sleep(0.02)
    return job_id


def run(quick: bool = False) -> PhaseResult:
    runs = 5 if quick else 20
    result = PhaseResult("srun", {"runs": runs, "cluster": "2 nodes x 16 CPUs"})
    srun = str(VENV_BIN / "srun")
    with bench_cluster("srun") as cluster:
        env = cluster.env()
        cwd = cluster.work_dir
        job_id = _allocation(cluster)
        inside = {**env, "SLURM_JOB_ID": job_id}
        table = Table(
            f"srun launch latency, wall time of the command ({runs} runs each)",
            ["command", "p50", "p95", "max", "Slurm 22.05 here"],
        )
        data: dict[str, Any] = {}
        cases = [
            ("srun -n1 true (in an allocation)", [srun, "-n1", "true"], inside, "n/a"),
            ("srun -N2 -n16 true (in an allocation)", [srun, "-N2", "-n16", "true"], inside, "n/a"),
            ("srun -n1 true (allocates, then releases)", [srun, "-n1", "true"], env, SLURM_SRUN),
        ]
        for label, argv, cmd_env, ref in cases:
            log(f"srun: {label}")
            samples, error = time_cmd(argv, cmd_env, cwd, runs)
            if error:
                table.add(label, error, "", "", ref)
                continue
            s = summary(samples)
            data[label] = {**s, "samples_s": samples}
            table.add(label, ms(s["median"]), ms(s["p95"]), ms(s["max"]), ref)
        table.notes.append(
            "Floor: a Python command that imports grpc costs ~175-205 ms on this machine "
            "(anchors); srun is the one corral command that needs gRPC (its task streams)"
        )
        result.tables.append(table)

        size_mb = 20 if quick else 100
        code = (
            "import sys; b = b'x' * 1023 + b'\\n'\n"
            f"for _ in range({size_mb} * 1024): sys.stdout.buffer.write(b)"
        )
        io = Table(
            f"Output through srun into /dev/null ({size_mb} MiB per task)",
            ["command", "wall", "MiB/s (all tasks)"],
        )
        for label, argv in (
            (f"srun -n1 python (one task, {size_mb} MiB)", [srun, "-n1", PYTHON, "-c", code]),
            (
                f"srun -N2 -n2 python (two nodes, {2 * size_mb} MiB)",
                [srun, "-N2", "-n2", PYTHON, "-c", code],
            ),
        ):
            log(f"srun: {label}")
            samples, error = time_cmd(argv, inside, cwd, 1 if quick else 3, warmup=0)
            if error:
                io.add(label, error, "")
                continue
            wall = summary(samples)["median"]
            total = size_mb * (2 if "-n2" in argv else 1)
            io.add(label, f"{wall:.2f} s", f"{total / wall:.0f}")
            data[label] = {"wall_s": wall, "mib": total}
        io.notes.append("line-buffered per task by srun (Slurm's default), written to a pipe")
        result.tables.append(io)
        result.data = data
        cluster.client().complete_job({"jobId": job_id})
    return result


if __name__ == "__main__":
    phase_main(run)
