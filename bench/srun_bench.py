"""srun: launch latency (``srun -n1 true``, ``srun -N2 -n16 true``) and I/O throughput.

Launch latency is the wall time of the whole command, inside an existing allocation
(as in a batch script) and outside one (srun allocates, runs, releases). Throughput is
a task writing to stdout as fast as it can through srun into /dev/null.

The machine is shared: run it as ``nice -n 19 .venv/bin/python -m bench.srun_bench``
(the tables record the load average they were measured under).
"""

from __future__ import annotations

import os
import subprocess
import sys
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
)
from corral.testing import wait_for

SLURM_SRUN = "71 ms (p95 352 ms); 26 ms in a quiet run"


def _allocation(cluster: Any) -> str:
    client = cluster.client()
    spec = {
        "workDir": str(cluster.work_dir),
        "name": "bench",
        "allocationOnly": True,
        "nodesMin": 2,
    }
    job_id = str(client.submit_job({"spec": spec})["jobId"])
    wait_for(
        lambda: (
            client.get_jobs({"filter": {"jobIds": [job_id]}})["jobs"][0]["state"]
            == "JOB_STATE_RUNNING"
        ),
        30,
        "the allocation to start",
    )
    return job_id


def _cpu_s(pid: int) -> float:
    """A process's own CPU time so far (user + system), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed_runs(
    argv: list[str],
    env: dict[str, str],
    cwd: Any,
    runs: int,
    daemons: dict[str, int],
    warmup: int = 1,
) -> tuple[list[float], list[float], dict[str, float], str | None]:
    """Wall times and the command's own CPU times (wait4's rusage) of ``runs`` runs after
    one warm-up, and the daemons' CPU per run: CPU is what the load of a shared machine
    does not inflate much, wall time is what a user waits."""
    walls: list[float] = []
    cpus: list[float] = []
    before = {name: _cpu_s(pid) for name, pid in daemons.items()}
    for i in range(runs + warmup):
        if i == warmup:
            before = {name: _cpu_s(pid) for name, pid in daemons.items()}
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip()[-120:]
            return walls, cpus, {}, f"error (rc={proc.returncode}: {tail})"
        if i >= warmup:
            walls.append(wall)
            cpus.append(usage.ru_utime + usage.ru_stime)
    per_run = {name: (_cpu_s(pid) - before[name]) / runs for name, pid in daemons.items()}
    return walls, cpus, per_run, None


def run(quick: bool = False) -> PhaseResult:
    runs = 5 if quick else 20
    result = PhaseResult("srun", {"runs": runs, "cluster": "2 nodes x 16 CPUs"})
    srun = str(VENV_BIN / "srun")
    with bench_cluster("srun") as cluster:
        env = cluster.env()
        # an installed corral has its bytecode: never time compiling it on every call
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cwd = cluster.work_dir
        job_id = _allocation(cluster)
        inside = {**env, "SLURM_JOB_ID": job_id}
        table = Table(
            f"srun launch latency, wall time of the command ({runs} runs each)",
            ["command", "min", "p50", "p95", "CPU: command", "ctld", "nodeds", "Slurm 22.05 here"],
        )
        data: dict[str, Any] = {}
        daemons = {name: proc.pid for name, proc in cluster.procs.items()}
        cases = [
            (
                "python3 -I -S -c pass (the floor)",
                [sys.executable, "-I", "-S", "-c", "pass"],
                env,
                "n/a",
            ),
            ("srun -n1 true (in an allocation)", [srun, "-n1", "true"], inside, "26 ms (issue 16)"),
            ("srun -N2 -n16 true (in an allocation)", [srun, "-N2", "-n16", "true"], inside, "n/a"),
            ("srun -n1 true (allocates, then releases)", [srun, "-n1", "true"], env, SLURM_SRUN),
        ]
        for label, argv, cmd_env, ref in cases:
            log(f"srun: {label}")
            samples, cpus, per_run, error = _timed_runs(argv, cmd_env, cwd, runs, daemons)
            if error:
                table.add(label, error, "", "", "", "", "", ref)
                continue
            s = summary(samples)
            ctld = per_run.get("ctld", 0.0)
            nodeds = sum(v for k, v in per_run.items() if k != "ctld")
            data[label] = {
                **s,
                "samples_s": samples,
                "cpu_s": summary(cpus),
                "ctld_cpu_s": ctld,
                "noded_cpu_s": nodeds,
            }
            table.add(
                label,
                ms(s["min"]),
                ms(s["median"]),
                ms(s["p95"]),
                ms(summary(cpus)["median"]),
                ms(ctld),
                ms(nodeds),
                ref,
            )
        table.notes.append(
            "srun imports no grpc or protobuf: CreateStep/CompleteStep over the HTTP gateway, "
            "the tasks over the framed task stream (docs/architecture.md); Slurm's figure: "
            "the anchors' p50 (p95), and issue 16's quiet run"
        )
        table.notes.append(
            "CPU: the command's own user+system time (p50), and the daemons' per run: what "
            "a loaded machine inflates least; min: the run that waited least for a core"
        )
        table.notes.append(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores)")
        result.tables.append(table)

        size_mb = 50 if quick else 500
        code = (  # 64 KiB writes of 1 KiB lines: the writer costs little beside srun
            "import sys; b = (b'x' * 1023 + b'\\n') * 64\n"
            f"for _ in range({size_mb} * 16): sys.stdout.buffer.write(b)"
        )
        io = Table(
            f"Output through srun into /dev/null ({size_mb} MiB per task)",
            ["command", "wall", "MiB/s (all tasks)", "MB/s", "CPU per GiB: srun", "nodeds"],
        )
        for label, argv in (
            (f"srun -n1 python (one task, {size_mb} MiB)", [srun, "-n1", PYTHON, "-c", code]),
            (
                f"srun -N2 -n2 python (two nodes, {2 * size_mb} MiB)",
                [srun, "-N2", "-n2", PYTHON, "-c", code],
            ),
        ):
            log(f"srun: {label}")
            samples, cpus, per_run, error = _timed_runs(
                argv, inside, cwd, 1 if quick else 3, daemons, warmup=0
            )
            if error:
                io.add(label, error, "", "", "", "")
                continue
            wall = summary(samples)["median"]
            total = size_mb * (2 if "-n2" in argv else 1)
            gib = total / 1024
            nodeds = sum(v for k, v in per_run.items() if k != "ctld")
            io.add(
                label,
                f"{wall:.2f} s",
                f"{total / wall:.0f}",
                f"{total * 1.048576 / wall:.0f}",
                f"{summary(cpus)['median'] / gib:.2f} s",
                f"{nodeds / gib:.2f} s",
            )
            data[label] = {"wall_s": wall, "mib": total, "srun_cpu_s": cpus, "noded_cpu_s": nodeds}
        io.notes.append(
            "line-buffered per task by srun (Slurm's default), written to /dev/null; the wall "
            "time includes srun's start, the step and the task's own writing (a Python loop "
            "of 64 KiB writes, on the same 2 cores)"
        )
        io.notes.append(
            "CPU per GiB: what one GiB costs srun and the nodeds (the tasks excluded): the "
            "rate a core could carry when the machine is not shared is about 1 / that"
        )
        result.tables.append(io)
        result.data = data
        cluster.client().complete_job({"jobId": job_id})
    return result


if __name__ == "__main__":
    phase_main(run)
