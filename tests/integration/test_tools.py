"""The Python tools that drive Slurm, through their public APIs, against a local cluster.

submitit, dask-jobqueue and simple-slurm run in a test-only environment (CI builds it
from PyPI, see .ci/run, and names its interpreter in CORRAL_TOOLS_PYTHON), never in
the project's own: they are test tools, not dependencies. Each tool calls our sbatch,
squeue, sacct, srun and scancel exactly as it calls Slurm's.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import textwrap

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import BIN

TOOLS_PY = os.environ.get("CORRAL_TOOLS_PYTHON", "")
pytestmark = [
    pytest.mark.skipif(
        not TOOLS_PY,
        reason="CORRAL_TOOLS_PYTHON unset: no environment with submitit, dask-jobqueue and "
        "simple-slurm (.ci/run builds one; it says why when it could not)",
    ),
    pytest.mark.timeout(300),
]


@pytest.fixture
def lab(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory
) -> tuple[LocalCluster, pathlib.Path]:
    c = cluster_factory(nodes=2, gpus_per_node=2, isolation="auto")
    work = tmp_path / "work"
    work.mkdir()
    return c, work


def drive(lab: tuple[LocalCluster, pathlib.Path], program: str, timeout: float = 240) -> list[str]:
    """Run a driver program with the tool's interpreter, our commands first on PATH."""
    cluster, work = lab
    env = {**cluster.env(), "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    proc = subprocess.run(
        [TOOLS_PY, "-c", textwrap.dedent(program)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    return [line for line in proc.stdout.splitlines() if line.startswith("> ")]


SUBMITIT = """
import time
import submitit

def add(a, b):
    return a + b

def boom():
    raise ValueError("boom from the job")

def sleepy():
    time.sleep(300)

def settled(job):  # the result file is written just before the job ends
    deadline = time.time() + 60
    while job.state in ("PENDING", "RUNNING", "UNKNOWN") and time.time() < deadline:
        time.sleep(0.3)
    return job.state

ex = submitit.AutoExecutor(folder="sub")
print("> cluster", ex.cluster)
ex.update_parameters(timeout_min=5, slurm_signal_delay_s=30)
job = ex.submit(add, 2, 3)
print("> result", job.result(), settled(job))
bad = ex.submit(boom)
try:
    bad.result()
except Exception as exc:  # submitit's FailedJobError carries the job's traceback
    print("> exception", "boom from the job" in str(exc), settled(bad))
jobs = ex.map_array(add, [1, 2, 3], [10, 20, 30])
print("> array", [j.result() for j in jobs], sorted({settled(j) for j in jobs}))
long = ex.submit(sleepy)
deadline = time.time() + 60
while long.state != "RUNNING" and time.time() < deadline:
    time.sleep(0.5)
print("> before cancel", long.state)
long.cancel()
deadline = time.time() + 60
while not long.state.startswith("CANCELLED") and time.time() < deadline:
    time.sleep(0.5)
print("> after cancel", long.state.split()[0])
"""


def test_submitit_result_exception_map_array_cancel_and_state(
    lab: tuple[LocalCluster, pathlib.Path],
) -> None:
    assert drive(lab, SUBMITIT) == [
        "> cluster slurm",
        "> result 5 COMPLETED",
        "> exception True FAILED",
        "> array [11, 22, 33] ['COMPLETED']",
        "> before cancel RUNNING",
        "> after cancel CANCELLED",
    ]


MAP_ARRAY_PER_JOB_FOLDER = """
import subprocess
import submitit

def square(x):
    return x * x

# "%j" in the folder: submitit makes one folder per array task (%A_%a) and passes
# srun "--output sub/%A_%a/%A_%a_%t_log.out"; srun must expand %A and %a from the
# array's ids, not as the task's own job id and 0, or every task but the first fails
ex = submitit.AutoExecutor(folder="sub/%j")
# held until submitit has made each task's folder (it makes them once sbatch returns;
# a job that started first would find no folder for its -o file, as on Slurm)
ex.update_parameters(timeout_min=5, slurm_additional_parameters={"hold": True})
jobs = ex.map_array(square, range(5))
master = jobs[0].job_id.split("_")[0]
own = subprocess.run(["squeue", "-h", "-r", "-o", "%A", "-j", master], capture_output=True,
                     text=True, check=True).stdout.split()
subprocess.run(["scontrol", "release", *own], check=True)  # each task by its own id
print("> results", [j.result() for j in jobs])
for j in jobs:
    print("> log", j.job_id == f"{jobs[0].job_id.split('_')[0]}_{j.job_id.split('_')[1]}",
          j.paths.stdout.exists(), j.paths.stderr.exists())
"""


def test_submitit_map_array_with_a_folder_per_task_runs_every_task(
    lab: tuple[LocalCluster, pathlib.Path],
) -> None:
    assert drive(lab, MAP_ARRAY_PER_JOB_FOLDER) == [
        "> results [0, 1, 4, 9, 16]",
        *["> log True True True"] * 5,
    ]


CHECKPOINT = """
import os, time
import submitit

class Resumable(submitit.helpers.Checkpointable):
    def __call__(self, tag):
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        if restarts == 0:
            time.sleep(300)  # the limit's USR2 comes first: checkpoint, requeue, resume
        return f"{tag} after {restarts} restart(s)"

ex = submitit.AutoExecutor(folder="ckpt")
ex.update_parameters(timeout_min=1, slurm_signal_delay_s=50)
job = ex.submit(Resumable(), "resumed")
print("> result", job.result())
deadline = time.time() + 60
while job.state in ("PENDING", "RUNNING", "REQUEUED", "UNKNOWN") and time.time() < deadline:
    time.sleep(0.3)
print("> state", job.state)
log = open(job.paths.stderr).read()
print("> usr2 caught", log.count("Caught signal SIGUSR2"))
"""


def test_submitit_checkpoint_requeues_on_the_time_limit_signal(
    lab: tuple[LocalCluster, pathlib.Path],
) -> None:
    # submitit's timeout path: --signal=USR2@50 reaches its srun step (not the batch
    # shell), it checkpoints and runs `scontrol requeue`, the job comes back with
    # SLURM_RESTART_COUNT=1 and finishes from the checkpoint
    assert drive(lab, CHECKPOINT) == [
        "> result resumed after 1 restart(s)",
        "> state COMPLETED",
        "> usr2 caught 1",
    ]


DASK = """
import sys
from dask.distributed import Client
from dask_jobqueue import SLURMCluster

cluster = SLURMCluster(
    cores=1, processes=1, memory="512MB", walltime="00:05:00", python=sys.executable,
    log_directory="dask-logs", local_directory="dask-tmp",
)
print(cluster.job_script(), file=sys.stderr)
cluster.scale(2)
client = Client(cluster)
client.wait_for_workers(2, timeout=120)
print("> workers", len(client.scheduler_info()["workers"]))
print("> compute", client.submit(lambda x: x + 1, 41).result())
print("> map", sum(client.gather(client.map(lambda x: x * x, range(10)))))
client.close()
cluster.close()
print("> closed")
"""


def test_dask_jobqueue_scale_compute_close(lab: tuple[LocalCluster, pathlib.Path]) -> None:
    assert drive(lab, DASK) == ["> workers 2", "> compute 42", "> map 285", "> closed"]
    cluster, _ = lab
    # close cancelled the worker jobs: nothing is left running
    jobs = cluster.client().get_jobs({}).get("jobs", [])
    assert jobs and all(j["state"] != "JOB_STATE_RUNNING" for j in jobs)


SIMPLE = """
import time
from simple_slurm import Slurm

slurm = Slurm(job_name="simple", output="simple-%j.out", ntasks=1, time="00:01:00")
job_id = slurm.sbatch("echo hello from simple-slurm; sleep 5", verbose=False)
from simple_slurm.squeue import SlurmSqueueWrapper
sq = SlurmSqueueWrapper()
sq.update_squeue()
row = sq.jobs[job_id]
print("> squeue", row["NAME"], row["ST"] in ("PD", "R"), row["NODES"], row["TRES_PER_NODE"])
while True:
    sq.update_squeue()
    if job_id not in sq.jobs:
        break
    time.sleep(0.2)
print("> output", open(f"simple-{job_id}.out").read().strip())
print("> srun", Slurm(ntasks=2, nodes=2).srun("true"))
"""


def test_simple_slurm_sbatch_squeue_csv_srun(lab: tuple[LocalCluster, pathlib.Path]) -> None:
    assert drive(lab, SIMPLE) == [
        "> squeue simple True 1 N/A",
        "> output hello from simple-slurm",
        "> srun 0",
    ]


TORCH_PY = os.environ.get("CORRAL_TORCH_PYTHON", "")

GLOO = r"""
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} via "
      f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}: sum {int(t.item())}")
dist.destroy_process_group()
"""

RECIPE = """#!/bin/sh
#SBATCH -N2 --ntasks-per-node=2
export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))
srun {python} gloo.py
"""


@pytest.mark.skipif(not TORCH_PY, reason="set CORRAL_TORCH_PYTHON to a python with torch")
def test_torch_gloo_all_reduce_launched_with_the_scontrol_hostnames_recipe(
    lab: tuple[LocalCluster, pathlib.Path],
) -> None:
    cluster, work = lab
    if cluster.network is None:
        pytest.skip("node names resolve to their addresses only with network namespaces")
    (work / "gloo.py").write_text(GLOO)
    (work / "recipe.sh").write_text(RECIPE.format(python=TORCH_PY))
    env = {**cluster.env(), "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    submitted = subprocess.run(
        [str(BIN / "sbatch"), "--parsable", "--wait", "recipe.sh"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    job_id = submitted.stdout.strip()
    text = (work / f"slurm-{job_id}.out").read_text()
    assert submitted.returncode == 0, text
    port = 20000 + int(job_id) % 10000
    assert sorted(line for line in text.splitlines() if line.startswith("rank")) == [
        f"rank {r} of 4 via node01:{port}: sum 10" for r in range(4)
    ]
