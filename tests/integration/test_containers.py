"""Pyxis-style containers through the real daemons, with a real runtime (crun rootless,
fuse-overlayfs) and images built here from a static busybox (corral/testing/images.py),
run by real second users (realusers.py)."""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import pwd
import shutil
import subprocess
from collections.abc import Iterator

import psutil
import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.testing.images import BuiltImages
from tests.conftest import BIN, wait_for
from tests.integration.conftest import local_registry
from tests.integration.realusers import Users, command, job, open_dir, submit_as

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def lab(users: Users, images: BuiltImages, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(nodes=1, gpus_per_node=0)


def _srun(
    lab: LocalCluster, users: Users, who: pwd.struct_passwd, *argv: str
) -> tuple[int, str, str]:
    return command(lab, who, "srun", "-N1", *argv, cwd=users.home(who))


def _spool_mounts(lab: LocalCluster) -> list[str]:
    """Container mounts (overlays, image binds) under the cluster's directories."""
    with open("/proc/self/mountinfo") as f:
        targets = [line.split()[4] for line in f]
    return [t for t in targets if t.startswith(str(lab.state_dir))]


def _overlays(lab: LocalCluster) -> list[str]:
    """The containers' overlays (each has a read-only bind of its image beside it)."""
    mounts = _spool_mounts(lab)
    overlays = [m for m in mounts if m.endswith("/rootfs")]
    assert len(mounts) == 2 * len(overlays), mounts
    return overlays


def _state_of(lab: LocalCluster, job_id: int) -> list[pathlib.Path]:
    """The job's container state directories left under the cluster's spools."""
    return list(pathlib.Path(lab.state_dir).glob(f"spool/*/containers/data/job_{job_id}"))


def test_srun_in_a_squashfs_image_sees_the_image_its_uid_mounts_and_slurm_env(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    alice = users.alice
    data = users.home(alice) / "data"
    data.mkdir(exist_ok=True)
    (data / "hello.txt").write_text("hi\n")
    os.chown(data, alice.pw_uid, alice.pw_gid)
    script = (
        'head -1 /etc/os-release; echo "uid=$(id -u) gid=$(id -g) pwd=$(pwd)"; '
        'ls /data; echo "job=$SLURM_JOB_ID step=$SLURM_STEP_ID rank=$RANK local=$LOCAL_RANK '
        "world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT procid=$SLURM_PROCID "
        'image=$IMAGE_VAR"'
    )
    code, out, err = _srun(
        lab,
        users,
        alice,
        "-n2",
        f"--container-image={images.squashfs}",
        # the users' homes are not their passwd's (/nonexistent): mounted as the cwd
        f"--container-mounts={users.home(alice)},{data}:/data:ro",
        "sh",
        "-c",
        script,
    )
    assert code == 0, err
    assert out.count('NAME="Corral Test Linux"') == 2, out
    assert f"uid={alice.pw_uid} gid={alice.pw_gid} pwd={users.home(alice)}" in out
    assert "hello.txt" in out
    ranks = sorted(
        line.split("rank=")[1].split()[0] for line in out.splitlines() if "rank=" in line
    )
    assert ranks == ["0", "1"]
    assert "world=2" in out and "image=from-image" in out and "master=127." in out
    wait_for(lambda: not _spool_mounts(lab), 10, "the container's mount to go")


def test_sbatch_runs_its_script_in_an_oci_layout_with_the_workdir_given(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    bob = users.bob
    job_id = submit_as(
        lab,
        users,
        bob,
        f"--container-image={images.layout}",
        "--container-workdir=/etc",
        "--wrap",
        'pwd; cat os-release | head -1; echo "uid=$(id -u) job=$SLURM_JOB_ID $IMAGE_VAR"',
    )
    lab.wait_state(job_id, "COMPLETED", timeout=60)
    out = (users.home(bob) / f"slurm-{job_id}.out").read_text()
    assert out.splitlines()[0] == "/etc", out
    assert 'NAME="Corral Test Linux"' in out
    assert f"uid={bob.pw_uid} job={job_id} from-oci" in out


def test_a_named_container_keeps_a_file_between_steps_and_goes_with_the_job(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    alice = users.alice
    # the steps come from srun --jobid (the in-process client, as alice): the users
    # cannot run this checkout's interpreter from inside a batch script
    job_id = submit_as(lab, users, alice, "--wrap", "sleep 120")
    lab.wait_state(job_id, "RUNNING", timeout=60)
    named = [f"--jobid={job_id}", f"--container-image={images.archive}", "--container-name=keep"]
    code, _, err = _srun(
        lab, users, alice, *named, "--container-writable", "sh", "-c", "echo kept > /opt/note"
    )
    assert code == 0, err
    saved = users.home(alice) / "saved.sqsh"
    # Pyxis: the name alone reuses the job's container
    code, out, err = _srun(
        lab,
        users,
        alice,
        f"--jobid={job_id}",
        "--container-name=keep",
        f"--container-save={saved}",
        "cat",
        "/opt/note",
    )
    assert (code, out) == (0, "kept\n"), err
    # --container-save: the container's filesystem as squashfs, the user's own file
    # written as the step ends on the node (srun may have returned by then)
    wait_for(lambda: saved.exists() and saved.read_bytes()[:4] == b"hsqs", 30, "the image")
    assert saved.stat().st_uid == alice.pw_uid
    code, out, err = _srun(
        lab,
        users,
        alice,
        f"--jobid={job_id}",
        f"--container-image={images.archive}",
        "sh",
        "-c",
        "cat /opt/note 2>/dev/null || echo fresh",
    )
    assert (code, out) == (0, "fresh\n"), err  # an unnamed container starts from the image
    code, _, err = _srun(lab, users, alice, f"--jobid={job_id}", "--container-name=other", "true")
    assert code != 0 and "no container named other" in err, err
    assert _spool_mounts(lab) and _state_of(lab, job_id)  # the named one, kept for the job
    code, _, err = command(lab, alice, "scancel", str(job_id))
    assert code == 0, err
    lab.wait_state(job_id, "CANCELLED", timeout=60)
    wait_for(lambda: not _spool_mounts(lab), 15, "the named container's mount to go")
    wait_for(lambda: not _state_of(lab, job_id), 15, "the job's container state to go")


def test_bad_images_and_mounts_fail_with_the_reason(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    bob, alice = users.bob, users.alice
    secret = users.home(alice) / "secret"
    secret.mkdir(mode=0o700, exist_ok=True)
    os.chown(secret, alice.pw_uid, alice.pw_gid)
    cases = [
        (["--container-image=/nonexistent/image.sqsh"], "No such file"),
        ([f"--container-image={images.rootfs}/etc/os-release"], "not an image"),
        (
            [f"--container-image={images.squashfs}", f"--container-mounts={secret}:/s"],
            "permission denied",
        ),
        (
            [f"--container-image={images.squashfs}", "--container-mounts=/nonexistent:/x"],
            "no such file",
        ),
    ]
    for flags, reason in cases:
        code, _, err = _srun(lab, users, bob, *flags, "true")
        assert code != 0 and reason in err, (flags, err)
    # alice's private image, cached once she ran it: bob still cannot run it
    private = secret / "mine.sqsh"
    shutil.copyfile(images.squashfs, private)
    os.chown(private, alice.pw_uid, alice.pw_gid)
    code, _, err = _srun(lab, users, alice, f"--container-image={private}", "true")
    assert code == 0, err
    code, _, err = _srun(lab, users, bob, f"--container-image={private}", "true")
    assert code != 0 and "Permission denied" in err, err
    # sbatch: the job fails with the reason, never hangs
    job_id = submit_as(lab, users, bob, "--container-image=/nonexistent/x.sqsh", "--wrap", "true")
    lab.wait_state(job_id, "FAILED", timeout=60)
    assert "No such file" in str(job(lab, job_id)), job(lab, job_id)


def test_remap_root_and_setuid_give_no_host_privilege(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    bob = users.bob
    rootdir = open_dir("corral-rootowned-")  # root's, 0755: bob may read, not write
    try:
        code, out, err = _srun(
            lab,
            users,
            bob,
            f"--container-image={images.squashfs}",
            "--container-remap-root",
            f"--container-mounts={rootdir}:/hostroot",
            "sh",
            "-c",
            "echo inside=$(id -u); touch /hostroot/x 2>&1; /bin/busybox-suid id -u; echo end",
        )
        assert code == 0, err
        assert "inside=0" in out
        assert "Permission denied" in out or "Read-only" in out, out
        assert not (rootdir / "x").exists()
        lines = out.splitlines()
        assert lines[lines.index("end") - 1] == "0"  # root inside only: bob's uid outside
        code, out, err = _srun(
            lab, users, bob, f"--container-image={images.squashfs}", "/bin/busybox-suid", "id", "-u"
        )
        assert code == 0 and out.strip() == str(bob.pw_uid), (out, err)
    finally:
        subprocess.run(["rm", "-rf", str(rootdir)], check=False)


def test_scancel_leaves_no_process_and_no_mount(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    alice = users.alice
    job_id = submit_as(
        lab, users, alice, f"--container-image={images.squashfs}", "--wrap", "sleep 300"
    )
    lab.wait_state(job_id, "RUNNING", timeout=60)
    # a step in its own container beside the batch script's, srun waiting in a thread
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        step = pool.submit(
            _srun,
            lab,
            users,
            alice,
            f"--jobid={job_id}",
            f"--container-image={images.layout}",
            "sleep",
            "301",
        )

        def sleeping() -> bool:
            names = [
                " ".join(p.info["cmdline"] or [])
                for p in psutil.process_iter(["cmdline", "uids"])
                if p.info["uids"] is not None and p.info["uids"].real == alice.pw_uid
            ]
            return "sleep 300" in names and "sleep 301" in names

        wait_for(sleeping, 30, "the batch script and the step to run in their containers")
        assert len(_overlays(lab)) == 2
        code, _, err = command(lab, alice, "scancel", str(job_id))
        assert code == 0, err
        lab.wait_state(job_id, "CANCELLED", timeout=60)
        step.result(timeout=60)
    wait_for(lambda: not _spool_mounts(lab), 15, "the containers' mounts to go")

    def alices() -> list[str]:
        return [
            p.info["name"]
            for p in psutil.process_iter(["name", "uids"])
            if p.info["uids"] is not None and p.info["uids"].real == alice.pw_uid
        ]

    wait_for(lambda: not alices(), 15, "every process of alice's to go")


def test_memory_over_the_limit_inside_is_out_of_memory(
    lab: LocalCluster, users: Users, images: BuiltImages
) -> None:
    alice = users.alice
    # busybox dd fills a 400 MiB buffer: the job's limit applies inside as outside
    hog = "dd if=/dev/zero of=/dev/null bs=400M count=1; sleep 30"
    job_id = submit_as(
        lab, users, alice, "--mem=64M", f"--container-image={images.squashfs}", "--wrap", hog
    )
    found = lab.wait_state(job_id, "OUT_OF_MEMORY", timeout=60)
    assert found["reason"] == "OutOfMemory"
    wait_for(lambda: not _spool_mounts(lab), 15, "the container's mount to go")


def test_a_new_noded_removes_what_a_crashed_one_left(
    users: Users, images: BuiltImages, cluster_factory: ClusterFactory
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0)
    alice = users.alice
    job_id = submit_as(
        c,
        users,
        alice,
        "--no-requeue",
        f"--container-image={images.squashfs}",
        "--wrap",
        "sleep 300",
    )
    c.wait_state(job_id, "RUNNING", timeout=60)
    wait_for(lambda: _spool_mounts(c), 30, "the container's mount")
    c.kill_node(0, with_jobs=False)  # noded dies; its job and container live on
    assert _spool_mounts(c)
    c.start_node(0)
    wait_for(lambda: not _spool_mounts(c), 30, "the new noded to unmount the leftovers")
    c.wait_state(job_id, "NODE_FAIL", "FAILED", timeout=60)
    wait_for(lambda: not _state_of(c, job_id), 15, "the job's container state to go")


TORCH_PY = os.environ.get("CORRAL_TORCH_PYTHON", "")
GLOO = r"""
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} on {os.environ['SLURMD_NODENAME']} "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} sum {int(t.item())} "
      f"os {open('/etc/os-release').readline().strip()}")
dist.destroy_process_group()
"""


@pytest.mark.skipif(not TORCH_PY, reason="set CORRAL_TORCH_PYTHON to a python with torch")
def test_a_two_node_step_in_containers_runs_torch_gloo_all_reduce(
    images: BuiltImages, cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    c = cluster_factory(nodes=2, gpus_per_node=0, isolation="auto")
    work = tmp_path / "work"
    work.mkdir()
    (work / "gloo.py").write_text(GLOO)
    # the busybox image has no Python: the host's (with torch) is bound in read-only
    prefixes = subprocess.run(
        [TORCH_PY, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    binds = sorted({"/usr", "/lib", "/lib64", *prefixes} - {""})
    mounts = ",".join(f"{p}:{p}:ro" for p in binds if os.path.isdir(p))
    out = subprocess.run(
        [
            str(BIN / "srun"),
            "-N2",
            "--ntasks-per-node=2",
            f"--container-image={images.squashfs}",
            f"--container-mounts={mounts},{work}:{work}",
            TORCH_PY,
            "gloo.py",
        ],
        cwd=work,
        env=c.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert len(lines) == 4, out.stdout
    masters = {line.split(" master ")[1].split()[0] for line in lines}
    assert len(masters) == 1  # one rendezvous for every task, on both nodes
    assert all("sum 10" in line and "Corral Test Linux" in line for line in lines)
    assert {line.split(" on ")[1].split()[0] for line in lines} == {"node01", "node02"}


def test_a_named_container_goes_on_every_node_of_the_job(
    users: Users, images: BuiltImages, cluster_factory: ClusterFactory
) -> None:
    c = cluster_factory(nodes=2, gpus_per_node=0)
    alice = users.alice
    job_id = submit_as(c, users, alice, "-N2", "--wrap", "sleep 120")
    c.wait_state(job_id, "RUNNING", timeout=60)
    code, _, err = command(
        c,
        alice,
        "srun",
        f"--jobid={job_id}",
        "-N2",
        "-n2",
        f"--container-image={images.squashfs}",
        "--container-name=both",
        "true",
        cwd=users.home(alice),
    )
    assert code == 0, err
    assert len(_overlays(c)) == 2  # one per node, kept for the job
    code, _, err = command(c, alice, "scancel", str(job_id))
    assert code == 0, err
    c.wait_state(job_id, "CANCELLED", timeout=60)
    # the node without the batch script removes its own once the job's terminate came
    wait_for(lambda: not _spool_mounts(c), 30, "both nodes' container mounts to go")
    wait_for(lambda: not _state_of(c, job_id), 15, "the job's container state to go")


@pytest.fixture
def registry(images: BuiltImages, tmp_path: pathlib.Path) -> Iterator[str]:
    with local_registry(images, tmp_path) as address:
        yield address


def test_a_registry_image_is_pulled_once_and_a_wrong_digest_refused(
    users: Users, registry: str, cluster_factory: ClusterFactory
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0)
    bob = users.bob
    image = f"{registry}#corral/busybox:1"
    for _ in range(2):  # the second from the cache
        code, out, err = command(
            c,
            bob,
            "srun",
            f"--container-image={image}",
            "head",
            "-1",
            "/etc/os-release",
            cwd=users.home(bob),
        )
        assert (code, out) == (0, 'NAME="Corral Test Linux"\n'), err
    wrong = f"{registry}#corral/busybox@sha256:{'0' * 64}"
    code, _, err = command(
        c, bob, "srun", f"--container-image={wrong}", "true", cwd=users.home(bob)
    )
    assert code != 0 and ("digest mismatch" in err or "unknown" in err), err
    code, _, err = command(
        c,
        bob,
        "srun",
        "--container-image=127.0.0.1:1#corral/none:1",
        "true",
        cwd=users.home(bob),
    )
    assert code != 0 and "registry unreachable" in err, err
