"""Accounting through the real path on both stores (SQLite and PostgreSQL): sacct's
fields compared with expected text, sreport and `corral report` over jobs that ran, and
fair-share usage that accumulates and decays with the configured half-life, also after
ctld reloads it from the store."""

from __future__ import annotations

import math
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from client.sacct import cpu_time
from client.sreport import report_window
from corral.slurmfmt import format_elapsed, format_timestamp
from corral.testing import LocalCluster, wait_for
from corral.testing.cluster import ClusterFactory
from tests.conftest import pg_schema, pg_url_or_skip

BIN = pathlib.Path(sys.executable).parent
HALF_LIFE_S = 20  # short, so decay shows within a test
pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FIELDS = (
    "JobID,JobIDRaw,JobName,User,Group,Account,Partition,QOS,State,ExitCode,DerivedExitCode,"
    "Elapsed,ElapsedRaw,Submit,Start,End,Eligible,Timelimit,NNodes,NCPUS,AllocCPUS,ReqMem,"
    "MaxRSS,TotalCPU,AllocTRES,ReqTRES,NodeList,Reason,Restarts,WorkDir,TRESUsageInMax"
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def cluster(
    request: pytest.FixtureRequest, module_cluster_factory: ClusterFactory
) -> Iterator[LocalCluster]:
    extra = f"\n[priority]\ndecay_half_life = {HALF_LIFE_S}\n"
    if request.param == "sqlite":
        yield module_cluster_factory(nodes=2, gpus_per_node=4, extra_config=extra)
        return
    with pg_schema(pg_url_or_skip()) as url:
        c = module_cluster_factory(nodes=2, gpus_per_node=4, extra_config=extra, store_url=url)
        try:
            yield c
        finally:
            c.stop()  # before its schema goes


def run(cluster: LocalCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    work = cluster.state_dir / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        env=cluster.env(),
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )


def out(cluster: LocalCluster, *argv: str) -> str:
    proc = run(cluster, *argv)
    assert proc.returncode == 0, (argv, proc.stderr)
    return proc.stdout


def sbatch(cluster: LocalCluster, *argv: str) -> str:
    return out(cluster, "sbatch", "--parsable", *argv).strip()


@pytest.fixture(scope="module")
def jobs(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    """Three finished jobs: a GPU job, a failing one, one whose srun step failed."""
    ids = {
        "gpu": sbatch(
            cluster,
            "-J",
            "gpujob",
            "--gres=gpu:2",
            "-c",
            "2",
            "--mem=1G",
            "-t",
            "10",
            "--wrap",
            "sleep 1",
        ),
        "fail": sbatch(cluster, "-J", "failer", "-t", "5", "--wrap", "exit 3"),
        "step": sbatch(
            cluster,
            "-J",
            "stepper",
            "-t",
            "5",
            "--wrap",
            "srun sh -c 'exit 5'; exit 0",
        ),
    }
    return {k: cluster.wait_state(v, "COMPLETED", "FAILED", timeout=60) for k, v in ids.items()}


def when(job: dict[str, Any], key: str) -> str:
    return format_timestamp(float(job.get(key, 0)))


def expected_line(job: dict[str, Any], **fields: str) -> str:
    """The allocation line, field by field, from the job's record and what it asked."""
    start, end = float(job["startTime"]), float(job["endTime"])
    usage = job.get("usage") or {}
    values = {
        "JobID": str(job["jobId"]),
        "JobIDRaw": str(job["jobId"]),
        "User": "root",
        "Group": "root",
        "Account": job.get("account", ""),
        "Partition": "debug",
        "QOS": "normal",
        "ExitCode": "0:0",
        "DerivedExitCode": "0:0",
        "Elapsed": format_elapsed(int(end - start)),
        "ElapsedRaw": str(int(end - start)),
        "Submit": when(job, "submitTime"),
        "Start": when(job, "startTime"),
        "End": when(job, "endTime"),
        "Eligible": when(job, "eligibleTime"),
        "NNodes": "1",
        "MaxRSS": "",  # measured per step: on the batch line
        # what noded measured (nothing for a job gone before its first sample)
        "TotalCPU": cpu_time(float(usage.get("userCpuS", 0)) + float(usage.get("systemCpuS", 0)))
        if usage
        else "",
        "NodeList": job["nodelist"],
        "Reason": "None",
        "Restarts": "0",
        "WorkDir": str(job["spec"]["workDir"]),
        "TRESUsageInMax": "",
        **fields,
    }
    return "|".join(values[f] for f in FIELDS.split(","))


def test_sacct_fields_compared_with_expected_text(
    cluster: LocalCluster, jobs: dict[str, dict[str, Any]]
) -> None:
    gpu, fail, step = jobs["gpu"], jobs["fail"], jobs["step"]
    ids = ",".join(str(j["jobId"]) for j in (gpu, fail, step))
    got = out(cluster, "sacct", "-X", "-P", "-n", "-j", ids, "-o", FIELDS).splitlines()
    one_cpu = "billing=1,cpu=1,node=1"
    assert got == [
        expected_line(
            gpu,
            JobName="gpujob",
            State="COMPLETED",
            Timelimit="00:10:00",
            NCPUS="2",
            AllocCPUS="2",
            ReqMem="1G",
            AllocTRES="billing=2,cpu=2,gres/gpu=2,mem=1G,node=1",
            ReqTRES="billing=2,cpu=2,gres/gpu=2,mem=1G,node=1",
        ),
        expected_line(
            fail,
            JobName="failer",
            State="FAILED",
            ExitCode="3:0",
            Timelimit="00:05:00",
            NCPUS="1",
            AllocCPUS="1",
            ReqMem=out_reqmem(fail),
            AllocTRES=alloc_tres(fail),
            ReqTRES=one_cpu,
            Reason="NonZeroExitCode",
        ),
        expected_line(
            step,
            JobName="stepper",
            State="COMPLETED",
            DerivedExitCode="5:0",
            Timelimit="00:05:00",
            NCPUS="1",
            AllocCPUS="1",
            ReqMem=out_reqmem(step),
            AllocTRES=alloc_tres(step),
            ReqTRES=one_cpu,
        ),
    ]
    # the steps: the batch script's line carries what the node measured (GPU figures for
    # a GPU job), the srun step its own exit code
    lines = out(
        cluster, "sacct", "-P", "-n", "-j", ids, "-o", "JobID,State,ExitCode,MaxRSS,TRESUsageInMax"
    ).splitlines()
    gid, sid = gpu["jobId"], step["jobId"]
    batch = next(x for x in lines if x.startswith(f"{gid}.batch|")).split("|")
    assert batch[1:3] == ["COMPLETED", "0:0"]
    assert batch[3].endswith("K") and batch[3][:-1].isdigit()
    assert (
        batch[4].startswith("cpu=") and "gres/gpumem=" in batch[4] and "gres/gpuutil=" in batch[4]
    )
    assert f"{sid}.0|FAILED|5:0" in [x.rsplit("|", 2)[0] for x in lines]
    # the window and the other listed options, on the same jobs
    window = ["-X", "-n", "-S", "now-1days", "-E", "now", "-j", ids]
    assert out(cluster, "sacct", *window, "-s", "F", "-P", "-o", "JobID,State") == (
        f"{fail['jobId']}|FAILED\n"
    )
    assert out(cluster, "sacct", *window, "-p", "--delimiter=;", "-o", "JobName%-9,NCPUS") == (
        "gpujob;2;\nfailer;1;\nstepper;1;\n"
    )
    assert out(cluster, "sacct", *window, "-o", "JobName%-9,State%6,ExitCode") == (
        "gpujob    COMPL+      0:0 \nfailer    FAILED      3:0 \nstepper   COMPL+      0:0 \n"
    )
    assert out(cluster, "sacct", "-X", "-n", "-P", "-o", "JobID", "-u", "nosuchuser9") == ""
    assert (
        out(cluster, "sacct", "-X", "-n", "-P", "-o", "JobID", "-A", "nosuchacct", "-j", ids) == ""
    )
    assert out(cluster, "sacct", "-D", "-X", "-n", "-P", "-o", "JobID,Restarts", "-j", ids) == (
        "".join(f"{j['jobId']}|0\n" for j in (gpu, fail, step))
    )
    helped = out(cluster, "sacct", "-e")
    for name in FIELDS.split(","):
        assert name in helped.split() or name == "Restarts", name  # -e: Slurm's own fields


def out_reqmem(job: dict[str, Any]) -> str:
    from client.fmt import convert_mb

    spec = job.get("spec", {})
    return convert_mb(int(spec.get("memPerNodeMb", 0)) or int(spec.get("memPerCpuMb", 0)))


def alloc_tres(job: dict[str, Any]) -> str:
    from client.fmt import convert_mb

    mem = int(job.get("memMb", 0))
    return "billing=1,cpu=1," + (f"mem={convert_mb(mem)}," if mem else "") + "node=1"


def test_sreport_and_corral_report(cluster: LocalCluster, jobs: dict[str, dict[str, Any]]) -> None:
    # the jobs ran just now; a window of the last day to the hour after now (sreport caps
    # the end at now and rounds to the hour, as Slurm does: use Seconds of a known past
    # window by asking for the whole of today and yesterday)
    gpu = jobs["gpu"]
    account = gpu.get("account") or "root"
    gpu_s = 2 * (float(gpu["endTime"]) - float(gpu["startTime"]))
    day = time.strftime("%Y-%m-%d", time.localtime(float(gpu["startTime"])))
    text = out(
        cluster,
        "sreport",
        "-P",
        "-t",
        "seconds",
        "-T",
        "gres/gpu",
        "cluster",
        "AccountUtilizationByUser",
        f"start={day}",
        "end=now+1days",
    )
    lines = text.splitlines()
    assert lines[0] == "-" * 80
    assert lines[1].startswith("Cluster/Account/User Utilization ")
    assert lines[2] == "Usage reported in TRES Seconds"
    assert lines[4] == "Cluster|Account|Login|Proper Name|TRES Name|Used"
    rows = {(r.split("|")[1], r.split("|")[2]): r.split("|") for r in lines[5:]}
    # sreport's end is now rounded to the hour, and a window is at least an hour long (so
    # just after midnight it is the hour from midnight): the jobs count if they ran before it
    window_end = report_window(f"{day}", "now+1days", time.time())[1]
    if float(gpu["endTime"]) <= window_end:
        assert int(rows[(account, "root")][5]) >= int(gpu_s)
    elif float(gpu["startTime"]) >= window_end:  # ran in this hour: not reported yet
        assert int(rows.get((account, "root"), ["0"] * 6)[5]) == 0
    top = out(cluster, "sreport", "-n", "-P", "user", "TopUsage", f"start={day}", "end=now+1days")
    assert all(r.split("|")[1] == "root" for r in top.splitlines())
    # corral report: one bucket per day up to now, so the jobs that just ran are there
    table = out(cluster, "corral", "report", "--start", day).splitlines()
    assert table[0].split() == ["Day", "Account", "GPU-hours"]
    mine = [r for r in table[1:-1] if r.split()[1] == account]
    assert mine  # a row only for a day the account used GPUs (seconds here: 0.00 hours)
    png = cluster.state_dir / "gpu.png"
    assert out(cluster, "corral", "report", "--start", day, "--plot", str(png)).startswith(
        "corral report: wrote "
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = run(cluster, "sreport", "cluster", "NoSuchReport")
    assert bad.returncode == 1 and "Not valid report NoSuchReport" in bad.stderr


def _usage(cluster: LocalCluster, user: str) -> tuple[float, float, float]:
    """(raw usage of the user's association, time before asking, time after)."""
    before = time.time()
    rows = cluster.client().get_shares({"users": [user]})["rows"]
    after = time.time()
    return sum(float(r.get("rawUsage", 0)) for r in rows if r.get("user") == user), before, after


def test_usage_accumulates_and_decays(
    cluster: LocalCluster, jobs: dict[str, dict[str, Any]]
) -> None:
    # TRES billing: cpu 1, gpu 10 per second (the default weights); the three jobs' usage
    # as each ended, decayed with the configured half-life from its end to now
    def expected(at: float) -> float:
        total = 0.0
        for job in jobs.values():
            start, end = float(job["startTime"]), float(job["endTime"])
            rate = int(job.get("numCpus", 0)) + 10 * int(job.get("numGpus", 0))
            total += rate * (end - start) * math.pow(0.5, (at - end) / HALF_LIFE_S)
        return total

    def matches(value: float, before: float, after: float) -> bool:
        # the value was computed by ctld between before and after
        return expected(after) * 0.999 - 1e-6 <= value <= expected(before) * 1.001 + 1e-6

    first, b, a = _usage(cluster, "root")
    assert first > 0 and matches(first, b, a), (first, expected(b), expected(a))

    # decays: half of it within one half-life, as the formula says
    def below_half() -> tuple[float, float, float] | None:
        got = _usage(cluster, "root")
        return got if got[0] < first / 2 else None

    halved = wait_for(below_half, 3 * HALF_LIFE_S, "usage to halve", interval=0.5)
    assert matches(*halved)
    # ctld rebuilds the ledger from the store: the same decayed usage after a restart
    cluster.stop_process("ctld")
    cluster.start_ctld()
    again = _usage(cluster, "root")
    assert again[0] < halved[0] and matches(*again), (again, expected(again[1]))
