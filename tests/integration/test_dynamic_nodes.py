"""Dynamic nodes on real daemons (issue 27): ``noded --dynamic`` (Slurm's ``slurmd -Z``)
with a node certificate from the cluster CA joins a cluster whose config does not list
it, with the GPUs its own discovery found, and runs a job that only it can run; one
whose certificate is another node's, or from another CA, is refused and never joins."""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Iterator

import pytest

from corral.auth.tls import create_ca, issue
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, wait_for

EXTRA = """
[dynamic_nodes]
allow = true
gpus = { backend = "fake", count = 2, model = "NVIDIA A100-SXM4-80GB" }
"""


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> Iterator[LocalCluster]:
    yield cluster_factory(nodes=1, gpus_per_node=0, extra_config=EXTRA)


def start_dynamic(c: LocalCluster, name: str, address: str) -> None:
    """``noded --dynamic`` for ``name``, not waited for (a refused one never is ready)."""
    args = ["-m", "noded", "-f", str(c.config_path), "--name", name, "--dynamic"]
    args += ["--listen", address, "--port", "0"]
    args += ["--ready-file", str(c.state_dir / "run" / f"{name}.ready")]
    c._spawn(name, args)


def nodes(c: LocalCluster) -> dict[str, dict[str, object]]:
    return {str(n["name"]): dict(n) for n in c.client().get_nodes({}).get("nodes", [])}


def test_a_certified_dynamic_node_joins_and_runs_a_job_the_uncertified_never_join(
    cluster: LocalCluster, tmp_path: pathlib.Path
) -> None:
    c = cluster
    tls = c.tls_dir
    # refused: a node presenting another node's certificate (valid, but not its own) ...
    issue(str(tls), "dyn-other", ["127.0.0.41"])
    for ext in ("crt", "key"):
        shutil.copy(tls / f"dyn-other.{ext}", tls / f"dyn-fake.{ext}")
    start_dynamic(c, "dyn-fake", "127.0.0.41")
    # ... and one whose certificate comes from another CA
    rogue = tmp_path / "rogue-ca"
    rogue.mkdir()
    create_ca(str(rogue), "rogue")
    issue(str(rogue), "dyn-rogue", ["127.0.0.42"])
    for ext in ("crt", "key"):
        shutil.copy(rogue / f"dyn-rogue.{ext}", tls / f"dyn-rogue.{ext}")
    start_dynamic(c, "dyn-rogue", "127.0.0.42")
    wait_for(
        lambda: "node call refused" in c.log_tail("ctld", 200),
        30,
        "ctld to refuse the node with another's certificate",
    )
    # the certified one: corral certs' certificate for its name
    issue(str(tls), "dyn1", ["127.0.0.40"])
    start_dynamic(c, "dyn1", "127.0.0.40")
    joined = wait_for(lambda: nodes(c).get("dyn1"), 30, "dyn1 to join")
    assert joined["dynamic"] and joined["gpuType"] == "a100"
    assert len(joined["resources"]["gpus"]) == 2  # type: ignore[index]
    cmd = Commands(c, tmp_path)
    show = cmd("scontrol", "show", "node", "dyn1").stdout
    assert "+DYNAMIC_NORM" in show
    job = cmd("sbatch", "--parsable", "--gres=gpu:a100:2", "--wrap", "hostname").stdout
    ran = c.wait_state(job.strip(), "COMPLETED", timeout=60)
    assert ran["batchHost"] == "dyn1"
    # by now each refused noded has tried many times: neither ever joined
    assert not {"dyn-fake", "dyn-rogue"} & set(nodes(c))
    assert c.procs["dyn-fake"].poll() is None  # still trying, still refused
