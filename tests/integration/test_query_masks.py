"""squeue, sacct and sinfo send a field mask of what they print (client/fieldmasks.py),
against real ctld and noded processes: every default view and a wide set of formats
print byte for byte what they print without it (``CORRAL_NO_FIELD_MASK=1``), ctld
counts the masked calls, and the JSON API takes ``?fields=`` on the URL."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from client.acctfields import ACCT_FIELDS
from client.fieldmasks import NO_MASK_ENV, SQUEUE
from client.squeue_columns import COLUMNS, LONG_COLUMNS
from corral.identity import current_identity
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.integration.test_api_edges import raw_post

BIN = pathlib.Path(sys.executable).parent
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: ClusterFactory) -> Iterator[LocalCluster]:
    """Jobs in every state a column reads differently: completed, failed, one with an
    srun step, one running, held ones (an array among them) and a cancelled one."""
    c = module_cluster_factory(nodes=2, gpus_per_node=8)
    done = [
        sbatch(c, "-J", "ok", "--gres=gpu:1", "--mem=1G", "--wrap", "true"),
        sbatch(c, "-J", "failer", "-t", "5", "--wrap", "exit 3"),
        sbatch(c, "-J", "stepper", "-c", "2", "--wrap", "srun sh -c 'exit 5'; exit 0"),
    ]
    for job_id in done:
        c.wait_state(job_id, "COMPLETED", "FAILED", timeout=60)
    running = sbatch(c, "-J", "runner", "-t", "30", "--comment", "hi", "--wrap", "sleep 300")
    c.wait_state(running, "RUNNING", timeout=60)
    sbatch(c, "-H", "-J", "held", "-N", "2", "--exclusive", "--wrap", "true")
    sbatch(c, "-H", "-J", "arr", "--array", "0-3", "--wrap", "true")
    gone = sbatch(c, "-H", "-J", "gone", "--wrap", "true")
    out(c, "scancel", gone)
    c.wait_state(gone, "CANCELLED", timeout=30)
    try:
        yield c
    finally:
        run(c, "scancel", "-u", current_identity().user)


def run(
    cluster: LocalCluster, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        env={**cluster.env(), "TZ": "UTC", **(env or {})},
        cwd=cluster.state_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )


def out(cluster: LocalCluster, *argv: str, env: dict[str, str] | None = None) -> str:
    proc = run(cluster, *argv, env=env)
    assert proc.returncode == 0, (argv, proc.stderr)
    return proc.stdout


def sbatch(cluster: LocalCluster, *argv: str) -> str:
    work = cluster.state_dir / "work"
    work.mkdir(exist_ok=True)
    return out(cluster, "sbatch", "--parsable", "-D", str(work), *argv).strip().split(";")[0]


def same_with_and_without(cluster: LocalCluster, *argv: str) -> str:
    """The output with the mask, asserted equal to the output without it (a running
    job's clock may tick between two runs: one of two masked runs matches)."""
    masked = out(cluster, *argv)
    whole = out(cluster, *argv, env={NO_MASK_ENV: "1"})
    if masked != whole:
        masked = out(cluster, *argv)
    assert masked == whole, argv
    return masked


ALL_LETTERS = " ".join(f"%{k}" for k in sorted(COLUMNS))
LONG_FIELDS = ",".join(f"{n}:30" for n in sorted(LONG_COLUMNS) if SQUEUE[n] is not None)
SQUEUE_ARGS = [
    [],
    ["-l"],
    ["--start"],
    ["-r"],
    ["-t", "all"],
    ["-t", "all", "-r", "-o", ALL_LETTERS],
    ["-t", "all", "-O", LONG_FIELDS],
    ["-t", "all", "-O", "JobID,Name:.20,State,ReasonList,TimeLeft,EndTime"],
    ["-o", "%i %j", "-S", "-M,j"],
    ["-o", "%i %R", "-S", "-e,V,-D"],
    ["-w", "node01"],
    ["-s"],
]


@pytest.mark.parametrize("args", SQUEUE_ARGS, ids=lambda a: " ".join(a)[:40] or "default")
def test_squeue_prints_the_same_with_the_mask(cluster: LocalCluster, args: list[str]) -> None:
    assert same_with_and_without(cluster, "squeue", *args)


WINDOW = ["-a", "-S", "now-1days"]
SACCT_ARGS = [
    [],
    ["-X"],
    ["-l"],
    ["-b"],
    ["-o", "ALL", "-P"],
    ["-X", "-o", "ALL", "-P"],
    ["-o", ",".join(n for n, _, _ in ACCT_FIELDS[::3]), "-p"],
    ["-X", "--name", "ok,stepper", "-o", "JobID,JobName%20,TRESUsageInMax,MaxRSS"],
    ["-A", "nosuchaccount"],
    ["-r", "debug", "-s", "CD,F", "-o", "JobID,State,ExitCode,DerivedExitCode"],
]


@pytest.mark.parametrize("args", SACCT_ARGS, ids=lambda a: " ".join(a)[:40] or "default")
def test_sacct_prints_the_same_with_the_mask(cluster: LocalCluster, args: list[str]) -> None:
    same_with_and_without(cluster, "sacct", *WINDOW, *args)


def test_sacct_array_by_its_id_prints_the_same(cluster: LocalCluster) -> None:
    listing = out(cluster, "squeue", "-h", "-r", "-n", "arr", "-o", "%F")
    array = listing.split()[0]
    text = same_with_and_without(cluster, "sacct", "-j", array, "-o", "JobID,State")
    assert f"{array}_3" in text


SINFO_ARGS = [[], ["-l"], ["-N"], ["-N", "-l"], ["-R"], ["-R", "-l"], ["-s"]]
SINFO_ARGS += [["-o", "%all"], ["-N", "-o", "%N %C %F %G %z %c %m %T %E %H"], ["-t", "mix"]]


@pytest.mark.parametrize("args", SINFO_ARGS, ids=lambda a: " ".join(a)[:40] or "default")
def test_sinfo_prints_the_same_with_the_mask(cluster: LocalCluster, args: list[str]) -> None:
    same_with_and_without(cluster, "sinfo", *args)


@pytest.mark.parametrize("page", ["1", "2", "5000", "0", "x"])
def test_squeue_paged_prints_what_one_answer_prints(cluster: LocalCluster, page: str) -> None:
    args = ["squeue", "-t", "all", "-r", "-o", "%i %j %T %R"]
    paged = out(cluster, *args, env={"CORRAL_SQUEUE_PAGE": page})
    assert paged == out(cluster, *args, env={"CORRAL_SQUEUE_PAGE": "100000"})
    assert paged.count("\n") > 5


def test_get_jobs_pages_by_job_id(cluster: LocalCluster) -> None:
    api = cluster.client()
    every = [j["jobId"] for j in api.get_jobs({"fields": ["job_id"]})["jobs"]]
    first = api.get_jobs({"limit": 2, "fields": ["job_id"]})["jobs"]
    assert [j["jobId"] for j in first] == every[:2]
    rest = api.get_jobs({"limit": 100, "afterJobId": every[1], "fields": ["job_id"]})["jobs"]
    assert [j["jobId"] for j in rest] == every[2:]
    assert api.get_jobs({"afterJobId": every[-1]}).get("jobs", []) == []


def masked_calls(cluster: LocalCluster) -> dict[str, float]:
    text = cluster.scrape()
    found = re.findall(r'corral_masked_queries_total\{method="(\w+)"\} (\S+)', text)
    return {method: float(n) for method, n in found}


@pytest.mark.parametrize(
    ("command", "method"),
    [("squeue", "GetJobs"), ("sacct", "QueryAccounting"), ("sinfo", "GetNodes")],
)
def test_the_mask_is_sent_and_counted(cluster: LocalCluster, command: str, method: str) -> None:
    before = masked_calls(cluster)[method]
    out(cluster, command, env={NO_MASK_ENV: "1"})
    assert masked_calls(cluster)[method] == before
    out(cluster, command)
    assert masked_calls(cluster)[method] >= before + 1


def test_json_api_takes_the_mask_on_the_url(cluster: LocalCluster) -> None:
    who = f"Authorization: Bearer {cluster.token(current_identity().user)}\r\n"
    status, body = raw_post(cluster, "GetJobs?fields=jobId,state,spec.name", b"{}", who)
    assert status == 200 and body["jobs"] and body["now"] > 0
    assert all(set(j) <= {"jobId", "state", "spec"} for j in body["jobs"])
    assert all(set(j.get("spec", {})) <= {"name"} for j in body["jobs"])
    assert any(j.get("spec", {}).get("name") == "runner" for j in body["jobs"])
    status, body = raw_post(cluster, "GetNodes?fields=name", b"{}", who)
    assert status == 200 and {n["name"] for n in body["nodes"]} == set(cluster.node_names)
    assert all(set(n) == {"name"} for n in body["nodes"])
    query = b'{"filter": {"names": ["ok"]}, "startAfter": 1}'
    status, body = raw_post(cluster, "QueryAccounting?fields=job_id,exitCode", query, who)
    assert status == 200 and [set(j) for j in body["jobs"]] == [{"jobId"}]  # exit 0: unset
    for method, words in (
        ("GetJobs?fields=jobId,nope", "unknown field 'nope'"),
        ("GetPartitions?fields=name", "takes no field mask"),
    ):
        status, body = raw_post(cluster, method, b"{}", who)
        assert status == 400 and words in body["message"], body


def test_grpc_client_sends_the_same_mask(cluster: LocalCluster) -> None:
    """The typed client's gRPC transport carries ``fields`` as the gateway does."""
    from corral.api import GrpcController

    api = GrpcController(
        target=f"127.0.0.1:{cluster.grpc_port}", token=cluster.token(current_identity().user)
    )
    try:
        request: Any = {"filter": {"names": ["runner"]}, "fields": ["job_id", "spec.name"]}
        reply = api.get_jobs(request)
    finally:
        api.close()
    assert [set(j) for j in reply["jobs"]] == [{"jobId", "spec"}]
    assert reply["jobs"][0]["spec"] == {"name": "runner"}
