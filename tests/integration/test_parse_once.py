"""A job's --signal, --array and --dependency are parsed once, at submit, and travel
typed (JobSpec's warn_signal, array_tasks, dependencies): through the real daemons, to
the store and back, and from a row written before the typed fields existed. And a flag
added end to end from one table entry (sbatch --propagate: the entry, the proto field,
noded's spawn): docs/architecture.md, "What a new sbatch flag touches"."""

from __future__ import annotations

import pathlib
import sqlite3
import subprocess
from typing import Any

import pytest

from corral.testing.cluster import ClusterFactory
from corral.wire import corral_pb2 as pb
from tests.conftest import BIN, Commands, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def one(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Commands:
    c = cluster_factory(nodes=1, gpus_per_node=2)
    work = tmp_path / "work"
    work.mkdir()
    return Commands(c, work)


def spec(one: Commands, job_id: str) -> dict[str, Any]:
    return dict(one.job(job_id)["spec"])


def test_the_job_carries_its_typed_values_and_a_clients_own_are_replaced(one: Commands) -> None:
    first = one("sbatch", "--parsable", "-H", "--wrap", "true").stdout.strip()
    array = one(
        "sbatch",
        "--parsable",
        "-H",
        "--signal=B:USR1@30",
        "--array=0-4:2%1",
        f"--dependency=afterany:{first}?after:{first}_3+2",
        "--wrap",
        "true",
    ).stdout.strip()
    got = spec(one, array)
    assert got["warnSignal"] == {"signal": 10, "seconds": 30, "batchOnly": True}
    # proto3's JSON leaves out zeros (first: 0)
    assert got["arrayTasks"] == {"count": 3, "last": 4, "step": 2, "maxRunning": 1}
    assert got["dependencies"] == {
        "conditions": [
            {"kind": "afterany", "jobs": [{"jobId": first}]},
            {"kind": "after", "jobs": [{"jobId": first, "taskId": 3, "delayMin": 2}]},
        ],
        "anyOf": True,
    }
    # as given, for what shows them (scontrol's Dependency=, squeue %E)
    assert (got["signal"], got["array"]) == ("B:USR1@30", "0-4:2%1")
    # a client's own typed values are not believed: ctld types the strings
    forged = one.cluster.client().submit_job(
        {
            "spec": {
                "script": "#!/bin/sh\ntrue\n",
                "workDir": str(one.cwd),
                "hold": True,
                "signal": "USR2",
                "warnSignal": {"signal": 9, "seconds": 3600},
                "arrayTasks": {"count": 1000},
            }
        }
    )
    got = spec(one, forged["jobId"])
    assert got["warnSignal"] == {"signal": 12, "seconds": 60}
    assert "arrayTasks" not in got


def _strip_typed(db: pathlib.Path, job_ids: list[str]) -> None:
    """Rewrite these jobs' rows as a ctld before the typed fields wrote them."""
    with sqlite3.connect(db) as conn:
        for job_id in job_ids:
            (data,) = conn.execute("SELECT data FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            job = pb.Job.FromString(data)
            for name in ("warn_signal", "array_tasks", "dependencies"):
                job.spec.ClearField(name)
            conn.execute(
                "UPDATE jobs SET data = ? WHERE job_id = ?", (job.SerializeToString(), job_id)
            )


def test_a_row_stored_before_the_typed_fields_loads_typed_and_still_waits(
    one: Commands,
) -> None:
    first = one("sbatch", "--parsable", "-H", "--wrap", "true").stdout.strip()
    after = one(
        "sbatch",
        "--parsable",
        "--signal=USR1@5",
        f"--dependency=afterok:{first}",
        "-o",
        "after.out",
        "--wrap",
        "echo ran",
    ).stdout.strip()
    tasks = one("sbatch", "--parsable", "-H", "--array=1-3%2", "--wrap", "true").stdout.strip()
    wait_for(lambda: one.job(after).get("reason") == "Dependency", 30, "the dependency reason")
    cluster = one.cluster
    cluster.stop_process("ctld")
    _strip_typed(cluster.state_dir / "corral.db", [after, tasks])
    cluster.start_ctld()
    assert spec(one, after)["warnSignal"] == {"signal": 10, "seconds": 5}
    assert spec(one, after)["dependencies"]["conditions"] == [
        {"kind": "afterok", "jobs": [{"jobId": first}]}
    ]
    assert spec(one, tasks)["arrayTasks"] == {
        "count": 3,
        "first": 1,
        "last": 3,
        "step": 1,
        "maxRunning": 2,
    }
    assert one.job(after).get("reason") == "Dependency"
    cluster.client().update_job({"jobIds": [first], "action": "JOB_UPDATE_RELEASE"})
    one.wait_state(after, "COMPLETED", timeout=60)
    assert (one.cwd / "after.out").read_text() == "ran\n"


PROPAGATED = """#!/bin/sh
ulimit -S -n
srun sh -c 'ulimit -S -n'
"""


def test_propagate_gives_the_job_and_its_steps_the_submitters_soft_limits(
    one: Commands,
) -> None:
    (one.cwd / "limits.sh").write_text(PROPAGATED)

    def submit(*flags: str) -> str:
        # sbatch run with a soft NOFILE of 321: what a user's `ulimit -S -n 321` makes
        line = f"ulimit -S -n 321 && exec {BIN}/sbatch --parsable {' '.join(flags)} limits.sh"
        proc = subprocess.run(
            ["/bin/sh", "-c", line],
            cwd=one.cwd,
            env=one.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return proc.stdout.strip()

    given = submit("--propagate=NOFILE", "-o", "given.out")
    whole = submit("--propagate", "-o", "all.out")
    none = submit("-o", "none.out")
    for job_id in (given, whole, none):
        one.wait_state(job_id, "COMPLETED", timeout=60)
    assert (one.cwd / "given.out").read_text() == "321\n321\n"
    assert (one.cwd / "all.out").read_text() == "321\n321\n"
    assert "321" not in (one.cwd / "none.out").read_text()
    assert spec(one, given)["rlimits"] == {"NOFILE": "321"}
    bad = one("sbatch", "--propagate=NOFILES", "--wrap", "true", check=False)
    assert bad.returncode == 255
    assert "Invalid --propagate specification: NOFILES" in bad.stderr
