"""GPU sharing (gres/shard) through the real daemons: one node, two fake GPUs, 4 shards each."""

from __future__ import annotations

import pathlib

import pytest

from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for


@pytest.fixture
def shared(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Commands:
    c = cluster_factory(nodes=1, gpus_per_node=2, shards_per_gpu=4)
    work = tmp_path / "work"
    work.mkdir()
    return Commands(c, work)


SHOW = 'echo "$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE"; '


def test_shard_jobs_share_a_gpu_that_a_gpu_job_then_cannot_take(shared: Commands) -> None:
    cmd = shared

    def sbatch(gres: str, out: str, body: str, limit: str = "1") -> str:
        return cmd(
            "sbatch", "--parsable", f"--gres={gres}", "-t", limit, "-o", out, "--wrap", SHOW + body
        ).stdout.strip()

    # two shard jobs: both on GPU 0 (best fit keeps GPU 1 whole)
    a = sbatch("shard:2", "a.out", "sleep 300", limit="10")
    b = sbatch("shard:2", "b.out", "sleep 300", limit="10")
    cmd.wait_state(a, "RUNNING")
    cmd.wait_state(b, "RUNNING")
    for out in ("a.out", "b.out"):
        path = cmd.cwd / out
        text = wait_for(lambda p=path: p.exists() and p.read_text().strip(), 20, out)
        assert text == "0 shards=2"
    # GPU 0 holds shards: a 2-GPU job cannot start while they run (it is reserved for
    # their end); a short 1-GPU job backfills onto GPU 1
    two = sbatch("gpu:2", "two.out", "true")
    one = sbatch("gpu:1", "one.out", "true")
    cmd.wait_state(one, "COMPLETED")
    assert (cmd.cwd / "one.out").read_text().strip() == "1 shards="
    job = cmd.wait_state(two, "PENDING")
    assert job.get("reason") == "Resources"
    squeue = cmd("squeue", "-h", "-o", "%i %b", "-j", f"{a},{two}").stdout.split("\n")
    assert f"{a} gres:shard:2" in squeue and f"{two} gres:gpu:2" in squeue
    node = cmd("scontrol", "show", "node", "node01").stdout
    assert "Gres=gpu:h100:2,shard:8" in node
    assert "gres/shard=4" in node
    job_text = cmd("scontrol", "show", "job", a).stdout
    assert "TresPerNode=gres:shard:2" in job_text
    cmd("scancel", a, b)
    # with both shard jobs gone, GPU 0 is whole again and the 2-GPU job runs
    cmd.wait_state(two, "COMPLETED", timeout=60)
    assert (cmd.cwd / "two.out").read_text().strip() == "0,1 shards="


def test_bad_shard_requests_are_refused(shared: Commands) -> None:
    cases = [
        (["--gres=shard:5"], "Requested node configuration is not available"),  # 4 per GPU
        (["--gres=shard:0"], "Invalid generic resource"),
        (["--gres=shard:1,gpu:1"], "shard with gpu"),
    ]
    for flags, message in cases:
        proc = shared("sbatch", *flags, "--wrap", "true", check=False)
        assert proc.returncode == 1, (flags, proc.stderr)
        assert message in proc.stderr, (flags, proc.stderr)


def test_srun_shard_job_sees_its_gpu_and_shards(shared: Commands) -> None:
    out = shared(
        "srun",
        "--gres=shard:3",
        "-t",
        "1",
        "sh",
        "-c",
        'echo "$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE"',
    ).stdout
    assert out.strip() == "0 shards=3"
