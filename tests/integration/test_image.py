"""corral's image (scripts/build-image.sh) runs a cluster: ctld and two noded
containers from it, jobs submitted with the commands on the host, each node a container
with its own hostname, process table and root filesystem.

Needs root, podman and the image (``scripts/build-image.sh``; CORRAL_IMAGE names another);
skipped, saying which is missing, without them, except in CI once .ci/run has built the
image (it sets CORRAL_TEST_IMAGE): then a missing piece is a failure."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from corral.localcluster import containers, netns
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

pytestmark = pytest.mark.timeout(900)  # a stale image is rebuilt first: minutes


def _image_or_skip() -> str:
    name = containers.image()
    ok, why = netns.available()
    if ok:
        ok, why = containers.available()
    if ok:
        containers.refresh(name)  # built from another tree: rebuilt (or loaded) for this one
    if ok and not containers.image_present(name):
        ok, why = False, f"no image {name} (scripts/build-image.sh builds it)"
    if not ok:
        if os.environ.get("CI", "").lower() == "true" and os.environ.get("CORRAL_TEST_IMAGE"):
            pytest.fail(f"CI built the image but the container test cannot run: {why}")
        pytest.skip(f"container nodes: {why}")
    return name


@pytest.fixture
def image_cmd(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory, monkeypatch: pytest.MonkeyPatch
) -> Commands:
    _image_or_skip()
    # this process's clients trust ctld's socket served by the image's corral (uid 990),
    # as the commands do through env.sh
    monkeypatch.setenv("CORRAL_CTLD_USER", str(containers.CTLD_UID))
    c = cluster_factory(
        nodes=2, gpus_per_node=2, isolation="container", ctld_container=True, start_timeout=120
    )
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o755)
    return Commands(c, work)


def _in_container(name: str, *argv: str) -> str:
    return subprocess.run(
        ["podman", "exec", name, *argv], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_ctld_and_two_nodes_from_the_image_run_jobs(image_cmd: Commands) -> None:
    cluster = image_cmd.cluster
    assert cluster.containers is not None
    # ctld runs as the image's unprivileged user corral, noded as root
    ctld_users = _in_container(cluster.containers.ctld_name, "ps", "-o", "user=", "-C", "python")
    assert set(ctld_users.split()) == {"corral"}
    noded_users = _in_container(cluster.containers.name(0), "ps", "-o", "user=", "-C", "python")
    assert set(noded_users.split()) == {"root"}

    probe = "hostname; ps -e --no-headers | wc -l; . /etc/os-release; echo $ID; id -un"
    jobs = [
        image_cmd(
            "sbatch", "--parsable", "-w", node, "-o", f"{node}.out", "--wrap", probe
        ).stdout.strip()
        for node in cluster.node_names
    ]
    for job_id in jobs:
        image_cmd.wait_state(job_id, "COMPLETED", timeout=60)
    for node in cluster.node_names:
        host, processes, os_id, user = (image_cmd.cwd / f"{node}.out").read_text().split()
        assert host == node  # its own hostname (UTS namespace)
        assert int(processes) < 15  # its own process table: init, noded, the job
        assert os_id == "debian"  # the image's root filesystem, not the host's
        assert user == "root"
    srun = image_cmd("srun", "-N2", "hostname").stdout.split()
    assert sorted(srun) == cluster.node_names
    # each node's spool is its own disk: the others' are not there
    spool = str(cluster.state_dir / "spool")
    for i, node in enumerate(cluster.node_names):
        assert _in_container(cluster.containers.name(i), "ls", spool).split() == [node]


def test_a_killed_node_container_takes_its_jobs_with_it(image_cmd: Commands) -> None:
    cluster = image_cmd.cluster
    job_id = image_cmd("sbatch", "--parsable", "-w", "node01", "--wrap", "sleep 300").stdout
    image_cmd.wait_state(job_id.strip(), "RUNNING", timeout=60)
    assert cluster.containers is not None
    sleeps = _in_container(cluster.containers.name(0), "ps", "-o", "pid=", "-C", "sleep")
    assert sleeps.split()
    cluster.kill_node(0)  # podman kill: the whole container at once
    gone = subprocess.run(
        ["podman", "ps", "-q", "--filter", f"name={cluster.containers.name(0)}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert gone.stdout.strip() == ""
    host_sleeps = subprocess.run(
        ["pgrep", "-f", "^sleep 300$"], capture_output=True, text=True, check=False
    ).stdout.split()
    marker_pids = cluster.node_job_pids(0)
    assert not marker_pids, f"job processes outlived their node: {marker_pids} {host_sleeps}"
    wait_for(
        lambda: (
            cluster.client().get_nodes({"names": ["node01"]})["nodes"][0]["state"]
            in ("NODE_STATE_DOWN", "NODE_STATE_NOT_RESPONDING")
        ),
        timeout=60,
    )


DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy"


def test_podman_kube_play_runs_the_pod_yaml(tmp_path: pathlib.Path) -> None:
    """deploy/podman/corral-pod.yaml and corral.toml as shipped, played by podman as
    Kubernetes would run the Pod, with the directories its header names made as it says:
    ctld (as uid 990) and two nodes in one pod; a two-node batch job submitted inside
    ctld's container runs an srun step on both nodes, whose output and exit are its own
    (an srun that could not reach ctld once failed there while the job still ended
    COMPLETED: issue 36)."""
    image = _image_or_skip()
    from corral.auth.tls import create_cluster_certs
    from corral.auth.tokens import write_key

    base = tmp_path / "srv"
    etc, state, run, shared = base / "etc", base / "state", base / "run", base / "shared"
    for d in (etc, state, run, shared):
        d.mkdir(parents=True)
    (etc / "corral.toml").write_text((DEPLOY / "podman" / "corral.toml").read_text())
    create_cluster_certs(str(etc / "tls"), "pod", ["node01", "node02"], ["127.0.0.1"])
    write_key(str(etc / "jwt.key"))
    uid = containers.CTLD_UID
    for path in (state, run, shared, etc / "jwt.key", etc / "tls" / "ctld.key"):
        os.chown(path, uid, uid)
    for path in (tmp_path, base, etc, run):
        path.chmod(0o755)
    pod = (DEPLOY / "podman" / "corral-pod.yaml").read_text()
    pod = pod.replace("/srv/corral", str(base)).replace("localhost/corral:dev", image)
    name = f"corral-{tmp_path.name[-8:]}".replace("_", "-").lower()
    pod = pod.replace("name: corral\n", f"name: {name}\n", 1)
    (tmp_path / "pod.yaml").write_text(pod)
    # podman's default rlimits are above this machine's hard ones (docs/image.md)
    conf = tmp_path / "containers.conf"
    limits = ", ".join(json.dumps(u) for u in containers.ulimits())
    conf.write_text(f"[containers]\ndefault_ulimits = [{limits}]\n")
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def podman(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *argv], env=env, capture_output=True, text=True, check=check, timeout=120
        )

    def sacct(job: str, *fields: str) -> list[str]:
        out = podman("exec", ctld, "sacct", "-n", "-P", "-j", job, "-o", ",".join(fields))
        return out.stdout.split()

    try:
        podman("kube", "play", str(tmp_path / "pod.yaml"))
        ctld = f"{name}-ctld"

        def nodes_up() -> bool:
            out = podman("exec", ctld, "sinfo", "-h", "-o", "%T", check=False).stdout
            return out.split() == ["idle"] or sorted(out.split()) == ["idle", "idle"]

        wait_for(nodes_up, 90, "both nodes idle in sinfo")
        script = (
            "srun -N2 --ntasks-per-node=1 sh -c 'echo task=$SLURM_PROCID "
            "node=$SLURMD_NODENAME' >steps 2>step-errors; echo srun-exit=$?; id -un"
        )
        sub = podman(
            "exec",
            "-w",
            "/shared",
            ctld,
            "sbatch",
            "--parsable",
            "-N2",
            "-o",
            "out",
            "--wrap",
            script,
        )
        job_id = sub.stdout.strip()
        wait_for(
            lambda: (
                "COMPLETED" in sacct(job_id, "State")[:1] or "FAILED" in sacct(job_id, "State")[:1]
            ),
            90,
            f"job {job_id} to end",
        )
        errors = (shared / "step-errors").read_text()
        assert (shared / "out").read_text().split() == ["srun-exit=0", "corral"], errors
        assert sorted((shared / "steps").read_text().splitlines()) == [
            "task=0 node=node01",
            "task=1 node=node02",
        ], errors
        # the job and its step, each as sacct has it
        assert sacct(job_id, "JobID", "State", "ExitCode") == [
            f"{job_id}|COMPLETED|0:0",
            f"{job_id}.batch|COMPLETED|0:0",
            f"{job_id}.0|COMPLETED|0:0",
        ]
    finally:
        logs = podman("pod", "logs", name, check=False)
        podman("kube", "down", str(tmp_path / "pod.yaml"), check=False)
        print(logs.stdout[-4000:], logs.stderr[-2000:])
