"""Pyxis's --container-* flags through the real daemons, the client and ctld side
(docs/containers.md): a node registers the ``container`` feature when its [containers]
runtime is there (sinfo %f, scontrol show node); a job asking for a container waits
BadConstraints on a cluster without it and runs where it is; a step asking for one
inside an allocation on nodes without it is refused; bad values are refused at submit
with Slurm's exit codes; and a job whose launch fails on its node shows the node's
reason in sacct and `corral why` (the path a container's failure takes)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from corral.errors import CorralError
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def bare(
    module_cluster_factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Commands]:
    """One node whose configured runtime is missing: no container feature."""
    extra = '\n[containers]\nruntime = "/nonexistent/bin/crun"\n'
    c = module_cluster_factory(nodes=1, gpus_per_node=0, extra_config=extra)
    yield Commands(c, tmp_path_factory.mktemp("bare"))


@pytest.fixture(scope="module")
def able(
    module_cluster_factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Commands]:
    """One node whose runtime is there (a stand-in executable: only found, never run
    by the placement this tests)."""
    tools = tmp_path_factory.mktemp("tools")
    runtime = tools / "crun"
    runtime.write_text("#!/bin/sh\nexit 0\n")
    runtime.chmod(0o755)
    extra = f'\n[containers]\nruntime = "{runtime}"\n'
    c = module_cluster_factory(nodes=1, gpus_per_node=0, extra_config=extra)
    yield Commands(c, tmp_path_factory.mktemp("able"))


def test_a_node_without_the_runtime_offers_no_feature(bare: Commands) -> None:
    assert bare("sinfo", "-h", "-N", "-o", "%N %f").stdout.split()[1] == "(null)"
    assert "AvailableFeatures=(null)" in bare("scontrol", "show", "node").stdout


def test_a_node_with_the_runtime_offers_the_container_feature(able: Commands) -> None:
    assert able("sinfo", "-h", "-N", "-o", "%N %f").stdout.split()[1] == "container"
    shown = able("scontrol", "show", "node").stdout
    assert "AvailableFeatures=container" in shown and "ActiveFeatures=container" in shown


def test_a_container_job_waits_bad_constraints_where_no_node_can_run_it(bare: Commands) -> None:
    job_id = bare(
        "sbatch", "--parsable", "--container-image=/images/app.sqsh", "--wrap", "true"
    ).stdout.strip()
    wait_for(lambda: bare.job(job_id).get("reason") == "BadConstraints", timeout=30)
    assert bare.job(job_id)["state"] == "JOB_STATE_PENDING"
    assert bare("squeue", "-h", "-j", job_id, "-o", "%T %r").stdout.split() == [
        "PENDING",
        "BadConstraints",
    ]
    why = bare("corral", "why", job_id).stdout
    assert "container" in why and "[BadConstraints]" in why
    # the container as stored: the image, and what the job did not say left unset
    assert bare.job(job_id)["spec"]["container"] == {"image": "/images/app.sqsh"}
    bare("scancel", job_id)
    # a plain job still runs there
    plain = bare("sbatch", "--parsable", "--wrap", "true").stdout.strip()
    bare.wait_state(plain, "COMPLETED")


def test_a_container_job_is_placed_where_the_runtime_is(able: Commands) -> None:
    job_id = able(
        "sbatch",
        "--parsable",
        "--container-image=ubuntu:24.04",
        "--container-mounts=./data:/data:ro",
        "--wrap",
        "true",
    ).stdout.strip()
    wait_for(lambda: able.job(job_id)["state"] != "JOB_STATE_PENDING", timeout=30)
    container = able.job(job_id)["spec"]["container"]
    # the mounts as given (made absolute), and as ctld parsed them at submit for noded
    assert container == {
        "image": "ubuntu:24.04",
        "mounts": [f"{able.cwd}/data:/data:ro"],
        "parsedMounts": [{"source": f"{able.cwd}/data", "target": "/data", "readOnly": True}],
    }


def test_a_container_step_on_nodes_without_the_runtime_is_refused(bare: Commands) -> None:
    job_id = bare("sbatch", "--parsable", "--wrap", "sleep 60").stdout.strip()
    bare.wait_state(job_id, "RUNNING")
    proc = bare(
        "srun", f"--jobid={job_id}", "--container-image=/images/app.sqsh", "true", check=False
    )
    assert proc.returncode != 0
    assert "cannot run containers" in proc.stderr and "container" in proc.stderr
    bare("scancel", job_id)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--container-image=Ubuntu"], "registry reference"),
        (["--container-image=u", "--container-mounts=/etc:etc"], "target must be an absolute"),
        (["--container-image=u", "--container-name=../up"], "letters, digits"),
        (["--container-image=u", "--container-writable", "--container-readonly"], "both"),
    ],
)
def test_bad_values_are_refused_at_submit(bare: Commands, argv: list[str], words: str) -> None:
    proc = bare("sbatch", *argv, "--wrap", "true", check=False)
    assert proc.returncode == 255 and words in proc.stderr, proc.stderr  # a bad option
    proc = bare("srun", *argv, "true", check=False)
    assert proc.returncode == 255 and words in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("container", "words"),
    [
        ({"image": "u", "mounts": ["/a:rel"]}, "target must be an absolute"),
        ({"image": "./relative.sqsh"}, "must be absolute"),
        ({"image": "u" * 2000}, "longer than 1024"),
        ({"mounts": ["/a:/b"]}, "need --container-image or --container-name"),
        ({"image": "u", "env": ["A=B"]}, "invalid variable name"),
    ],
)
def test_ctld_refuses_a_hand_made_container(
    bare: Commands, container: dict[str, object], words: str
) -> None:
    """A client that skips sbatch's checks: ctld checks every spec again."""
    with pytest.raises(CorralError, match=words):
        bare.cluster.submit(container=container)


def test_a_launch_failure_on_the_node_shows_its_reason_in_sacct_and_why(
    bare: Commands, tmp_path: pathlib.Path
) -> None:
    """The node's reason string (here: the batch step's output cannot be opened; a
    container's failure is reported the same way) reaches sacct's Reason and why."""
    missing = tmp_path / "no-such-dir" / "out.txt"
    job_id = bare("sbatch", "--parsable", f"--output={missing}", "--wrap", "true").stdout.strip()
    job = bare.wait_state(job_id, "FAILED")
    assert job["reason"].startswith("launch failed: ")
    shown = bare("sacct", "-n", "-X", "-j", job_id, "-o", "State,Reason%120", "-p").stdout
    state, reason = shown.strip().split("|")[:2]
    assert state == "FAILED" and reason == job["reason"]
    why = bare("corral", "why", job_id).stdout
    assert f"is not pending: it is FAILED on {job['nodelist']}: launch failed: " in why


def test_a_step_a_node_refused_shows_the_reason_on_the_step_and_its_allocation(
    bare: Commands,
) -> None:
    """srun's side of a refused step (a container the node could not make): the node's
    reason in CompleteStep and CompleteJob reaches sacct's step and job lines and why.
    What srun sends is what this test sends (client/srun.py: Step.refused)."""
    client = bare.cluster.client()
    spec = {"workDir": str(bare.cwd), "name": "boxed", "allocationOnly": True, "nodesMin": 1}
    job_id = str(client.submit_job({"spec": spec})["jobId"])
    bare.wait_state(job_id, "RUNNING")
    step = client.create_step({"spec": {"jobId": job_id, "argv": ["true"], "name": "true"}})
    why = "node01: container: /images/missing.sqsh: no such file"
    ref = {"jobId": job_id, "stepId": int(step["step"].get("stepId", 0))}
    client.complete_step({**ref, "exitCode": 1, "reason": why + "\x00\n" + "x" * 2000})
    client.complete_job({"jobId": job_id, "exitCode": 1, "reason": why})
    job = bare.wait_state(job_id, "FAILED")
    assert job["reason"] == f"launch failed: {why}"
    # the step's reason: bounded, one printable line
    assert job["steps"][0]["reason"].startswith(why + "  xxx")
    assert len(job["steps"][0]["reason"]) <= 512
    lines = bare("sacct", "-n", "-j", job_id, "-o", "JobID,State,Reason%90", "-p").stdout
    rows = [line.split("|")[:3] for line in lines.splitlines()]
    assert rows[0] == [job_id, "FAILED", f"launch failed: {why}"]
    assert rows[1][:2] == [f"{job_id}.0", "FAILED"] and rows[1][2].startswith(why)
    assert f"launch failed: {why}" in bare("corral", "why", job_id).stdout
