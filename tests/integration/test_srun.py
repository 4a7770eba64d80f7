"""srun, salloc and job steps through the real daemons, on two fake nodes.

The nodes are on distinct loopback addresses (127.0.0.2, .3), so MASTER_ADDR is the
first node's own address, not "localhost".
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from corral.testing.cluster import ClusterFactory
from tests.conftest import BIN, Commands, wait_for

PY = sys.executable
# an interpreter with torch and lightning (optional: tests that need them skip without)
TORCH_PY = os.environ.get("CORRAL_TORCH_PYTHON", "")


@pytest.fixture
def two(tmp_path: pathlib.Path, cluster_factory: ClusterFactory) -> Iterator[Commands]:
    c = cluster_factory(nodes=2, gpus_per_node=4, isolation="auto")
    work = tmp_path / "work"
    work.mkdir()
    yield Commands(c, work)
    c.stop()  # (the factory prints the logs)
    if c.network is not None:  # nothing of the nodes' namespaces is left behind
        tag = f"crl{c.network.tag}"

        def gone() -> bool:
            links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
            spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
            return tag not in links and tag not in spaces.stdout

        wait_for(gone, 10, "the namespaces, veths and bridge to go")


def test_srun_outside_an_allocation_labels_ranks_and_propagates_exit(two: Commands) -> None:
    out = two(
        "srun",
        "-N2",
        "-n4",
        "-l",
        "sh",
        "-c",
        'echo "rank=$SLURM_PROCID local=$SLURM_LOCALID node=$SLURM_NODEID '
        "host=$SLURMD_NODENAME world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT "
        'uts=$(hostname)"; '
        '[ "$SLURM_PROCID" = 2 ] && exit 7; exit 0',
        check=False,
    )
    assert out.returncode == 7, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert len(lines) == 4
    masters = set()
    for rank, line in enumerate(lines):
        label, _, rest = line.partition(": ")
        fields = dict(f.split("=", 1) for f in rest.split())
        assert label == str(rank) == fields["rank"]
        assert fields["local"] == str(rank % 2) and fields["node"] == str(rank // 2)
        assert fields["host"] == f"node0{rank // 2 + 1}" and fields["world"] == "4"
        if two.cluster.network is not None:  # each node its own UTS namespace
            assert fields["uts"] == fields["host"]
        masters.add(fields["master"])
    (master,) = masters  # one rendezvous for every task
    host, _, port = master.partition(":")
    assert host == two.cluster.node_address(0) != two.cluster.node_address(1)
    assert int(port) > 0
    assert "srun: error: node02: task 2: Exited with exit code 7" in out.stderr
    job = two.job(1)
    assert job["state"] == "JOB_STATE_FAILED"  # the allocation srun made, released
    assert job["steps"][0]["state"] == "JOB_STATE_FAILED"


ALLREDUCE = r"""
import os, socket, struct
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
value = (rank + 1) * 10
if rank == 0:
    srv = socket.create_server((addr, port))
    peers = [srv.accept()[0] for _ in range(world - 1)]
    total = value + sum(struct.unpack("!q", p.recv(8))[0] for p in peers)
    for p in peers:
        p.sendall(struct.pack("!q", total))
else:
    import time
    for _ in range(200):
        try:
            sock = socket.create_connection((addr, port))
            break
        except OSError:
            time.sleep(0.05)
    sock.sendall(struct.pack("!q", value))
    total = struct.unpack("!q", sock.recv(8))[0]
print(f"rank {rank} of {world} on {os.environ['SLURMD_NODENAME']}: sum {total}")
"""


def test_tcp_all_reduce_across_two_nodes(two: Commands) -> None:
    (two.cwd / "allreduce.py").write_text(ALLREDUCE)
    out = two("srun", "-N2", "--ntasks-per-node=2", PY, "allreduce.py")
    lines = sorted(out.stdout.splitlines())
    assert lines == [
        f"rank {r} of 4 on node0{r // 2 + 1}: sum {10 + 20 + 30 + 40}" for r in range(4)
    ]


def test_batch_script_runs_steps_in_sequence_and_in_the_background(two: Commands) -> None:
    script = """#!/bin/sh
#SBATCH -N2 --ntasks-per-node=2
srun -l sh -c 'echo first $SLURM_STEP_ID $SLURM_STEP_NUM_TASKS $SLURM_STEP_TASKS_PER_NODE'
srun -n1 -N1 sh -c 'echo bg-a $SLURM_STEP_ID' &
srun -n1 -N1 -w node02 sh -c 'echo bg-b $SLURMD_NODENAME' &
wait
echo done
"""
    (two.cwd / "steps.sh").write_text(script)
    job_id = two("sbatch", "steps.sh").stdout.split()[-1]
    two.wait_state(job_id, "COMPLETED")
    text = (two.cwd / f"slurm-{job_id}.out").read_text().splitlines()
    assert sorted(x for x in text if "first" in x) == [f"{r}: first 0 4 2(x2)" for r in range(4)]
    assert {x.split()[0] for x in text if x.startswith("bg-")} == {"bg-a", "bg-b"}
    assert "bg-b node02" in text and text[-1] == "done"
    rows = two("sacct", "-j", job_id, "-P", "-n", "-o", "JobID,State,NTasks").stdout.split()
    assert f"{job_id}|COMPLETED|" in rows
    assert f"{job_id}.batch|COMPLETED|1" in rows
    assert f"{job_id}.0|COMPLETED|4" in rows
    assert {f"{job_id}.1|COMPLETED|1", f"{job_id}.2|COMPLETED|1"} <= set(rows)


def test_scancel_of_one_step_leaves_the_job(two: Commands) -> None:
    script = """#!/bin/sh
srun -n1 sleep 300 &
while [ ! -e go ]; do sleep 0.05; done
srun -n1 echo second-step-ran
wait
"""
    (two.cwd / "two.sh").write_text(script)
    job_id = two("sbatch", "two.sh").stdout.split()[-1]
    wait_for(lambda: two.job(job_id).get("steps"), 20, "step 0 to start")
    listed = two("squeue", "-s", "-h").stdout.split()
    assert listed[:2] == [f"{job_id}.0", "sleep"] and listed[-1] == "node01"
    two("scancel", f"{job_id}.0")
    wait_for(
        lambda: two.job(job_id)["steps"][0]["state"] == "JOB_STATE_CANCELLED", 20, "step 0 ends"
    )
    assert two.job(job_id)["state"] == "JOB_STATE_RUNNING"
    (two.cwd / "go").touch()
    two.wait_state(job_id, "COMPLETED")
    assert "second-step-ran" in (two.cwd / f"slurm-{job_id}.out").read_text()
    rows = two("sacct", "-j", job_id, "-P", "-n", "-o", "JobID,State").stdout.split()
    assert f"{job_id}.0|CANCELLED" in rows and f"{job_id}.1|COMPLETED" in rows


def test_salloc_runs_a_command_with_the_allocation(two: Commands) -> None:
    out = two(
        "salloc",
        "-N2",
        "sh",
        "-c",
        'echo "job=$SLURM_JOB_ID nodes=$SLURM_JOB_NODELIST n=$SLURM_NNODES"; '
        "srun -l printenv SLURMD_NODENAME; exit 3",
        check=False,
    )
    assert out.returncode == 3
    assert "salloc: Granted job allocation 1" in out.stderr
    assert "salloc: Relinquishing job allocation 1" in out.stderr
    assert "job=1 nodes=node[01-02] n=2" in out.stdout
    assert sorted(x for x in out.stdout.splitlines() if ": " in x) == ["0: node01", "1: node02"]
    job = two.wait_state(1, "FAILED")
    assert job["exitCode"] == 3


def test_srun_waits_in_the_queue_with_slurms_messages(two: Commands) -> None:
    blocker = two(
        "sbatch", "-N2", "--exclusive", "--wrap", "while [ ! -e go ]; do sleep 0.05; done"
    )
    blocker_id = blocker.stdout.split()[-1]
    two.wait_state(blocker_id, "RUNNING")
    proc = subprocess.Popen(
        [str(BIN / "srun"), "-n1", "echo", "finally"],
        cwd=two.cwd,
        env=two.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # blocks until srun has said it waits
    assert first == "srun: job 2 queued and waiting for resources\n"
    (two.cwd / "go").touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out == "finally\n"
    assert "srun: job 2 has been allocated resources" in err


def test_heavy_output_arrives_complete_and_in_order_per_task(two: Commands) -> None:
    lines = 100_000  # about 1.3 MB per task, printed as fast as Python can
    code = f"import os; r = os.environ['SLURM_PROCID']\nfor i in range({lines}): print(r, i)"
    out = two("srun", "-N2", "-n2", PY, "-c", code)
    per_task: dict[str, list[int]] = {"0": [], "1": []}
    for line in out.stdout.splitlines():
        rank, i = line.split()
        per_task[rank].append(int(i))
    assert per_task["0"] == list(range(lines)) and per_task["1"] == list(range(lines))


def test_stdin_goes_to_task_zero_and_files_take_patterns(two: Commands) -> None:
    out = two(
        "srun",
        "-n2",
        "-N2",
        "--input=0",
        "-o",
        "out-%j.%s-%t.txt",
        "sh",
        "-c",
        'cat; echo "end $SLURM_PROCID"',
        input="hello from stdin\n",
    )
    assert out.stdout == ""
    assert (two.cwd / "out-1.0-0.txt").read_text() == "hello from stdin\nend 0\n"
    assert (two.cwd / "out-1.0-1.txt").read_text() == "end 1\n"


def test_gpus_per_task_bind_each_task_to_its_gpus(two: Commands) -> None:
    out = two(
        "srun",
        "-N1",
        "-n2",
        "--gres=gpu:4",
        "--gpus-per-task=2",
        "-l",
        "sh",
        "-c",
        "echo $CUDA_VISIBLE_DEVICES",
    )
    assert sorted(out.stdout.splitlines()) == ["0: 0,1", "1: 2,3"]


def test_kill_on_bad_exit_stops_the_others(two: Commands) -> None:
    started = time.monotonic()
    out = two(
        "srun",
        "-n2",
        "-N2",
        "-K",
        "sh",
        "-c",
        '[ "$SLURM_PROCID" = 1 ] && exit 5; sleep 60',
        check=False,
    )
    assert out.returncode >= 5 and time.monotonic() - started < 30
    assert "srun: error: node02: task 1: Exited with exit code 5" in out.stderr


def test_two_interrupts_within_a_second_kill_the_step(two: Commands) -> None:
    proc = subprocess.Popen(
        [str(BIN / "srun"), "-n1", "sh", "-c", "echo up; sleep 60"],
        cwd=two.cwd,
        env=two.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "up\n"
    assert proc.stderr is not None
    proc.send_signal(signal.SIGINT)
    assert proc.stderr.readline() == "srun: interrupt (one more within 1 sec to abort)\n"
    assert "StepId=1.0 tasks 0: running" in proc.stderr.readline()
    proc.send_signal(signal.SIGINT)  # a second one, within the second
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGKILL
    assert "forcing job termination" in err


def test_lightning_slurm_environment_agrees(two: Commands) -> None:
    """Lightning's SLURMEnvironment, where installed; else the same derivations by hand
    from its documented rules (world size, ranks, main address and port)."""
    probe = r"""
import os
try:
    from lightning.fabric.plugins.environments import SLURMEnvironment
    env = SLURMEnvironment()
    got = (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank(),
           env.main_address, env.main_port, "lightning")
except ImportError:
    got = (int(os.environ["SLURM_NTASKS"]), int(os.environ["SLURM_PROCID"]),
           int(os.environ["SLURM_LOCALID"]), int(os.environ["SLURM_NODEID"]),
           os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), "by-hand")
print(*got)
"""
    (two.cwd / "probe.py").write_text(probe)
    script = f"#!/bin/sh\n#SBATCH -N2 --ntasks-per-node=2\nsrun {TORCH_PY or PY} probe.py\n"
    (two.cwd / "lt.sh").write_text(script)
    job_id = two("sbatch", "lt.sh").stdout.split()[-1]
    job = two.wait_state(job_id, "COMPLETED", "FAILED", timeout=120)  # 4 ranks import lightning
    text = (two.cwd / f"slurm-{job_id}.out").read_text()
    assert job["state"] == "JOB_STATE_COMPLETED", text
    rows = sorted(line.split() for line in text.splitlines())
    assert {r[6] for r in rows} == {"lightning" if TORCH_PY else "by-hand"}
    ports = {r[5] for r in rows}
    assert len(ports) == 1
    for rank, row in enumerate(rows):
        world, global_rank, local_rank, node_rank, address = row[:5]
        assert (int(world), int(global_rank), int(local_rank), int(node_rank)) == (
            4,
            rank,
            rank % 2,
            rank // 2,
        )
        assert address == two.cluster.node_address(0)


GLOO = r"""
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} on {os.environ['SLURMD_NODENAME']}: "
      f"sum {int(t.item())}")
dist.destroy_process_group()
"""


@pytest.mark.skipif(not TORCH_PY, reason="set CORRAL_TORCH_PYTHON to a python with torch")
def test_torch_gloo_all_reduce_across_two_nodes(two: Commands) -> None:
    (two.cwd / "gloo.py").write_text(GLOO)
    out = two("srun", "-N2", "--ntasks-per-node=2", TORCH_PY, "gloo.py")
    assert sorted(out.stdout.splitlines()) == [
        f"rank {r} of 4 on node0{r // 2 + 1}: sum 10" for r in range(4)
    ]


def test_noded_runs_only_steps_ctld_knows(two: Commands, tmp_path: pathlib.Path) -> None:
    """A forged RunTasks (a job and user of the caller's choosing) is refused."""
    import grpc

    from corral.wire import corral_pb2 as pb
    from corral.wire import corral_pb2_grpc as pbg

    node = two.cluster.client().get_nodes({})["nodes"][0]
    marker = tmp_path / "forged-ran"
    forged = pb.Job(job_id=999, uid=0, user="root", nodelist=node["name"])
    step = pb.Step(
        job_id=999,
        step_id=0,
        ntasks=1,
        nodes=[pb.StepNode(node=node["name"], ranks=[0])],
        spec=pb.StepSpec(argv=["touch", str(marker)]),
    )
    start = pb.TaskInput(start=pb.RunTasksRequest(job=forged, step=step, node=node["name"]))

    async def attempt() -> grpc.StatusCode:
        ca = (two.cluster.tls_dir / "ca.crt").read_bytes()  # the step port is TLS
        creds = grpc.ssl_channel_credentials(ca)
        options = [("grpc.ssl_target_name_override", node["name"])]
        async with grpc.aio.secure_channel(node["address"], creds, options=options) as channel:
            call = pbg.NodeAgentStub(channel).RunTasks(iter([start]))
            try:
                await call.read()
            except grpc.RpcError as exc:
                assert "ctld refuses step 999.0" in (exc.details() or "")
                return exc.code()
        return grpc.StatusCode.OK

    import asyncio

    assert asyncio.run(attempt()) == grpc.StatusCode.FAILED_PRECONDITION
    assert not marker.exists()


def test_sigterm_is_forwarded_and_wait_limits_stragglers(two: Commands) -> None:
    proc = subprocess.Popen(
        [
            str(BIN / "srun"),
            "-n1",
            "sh",
            "-c",
            "trap 'echo got TERM; exit 0' TERM; echo up; while :; do sleep 0.05; done",
        ],
        cwd=two.cwd,
        env=two.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "up\n"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert out == "got TERM\n" and proc.returncode == 0

    started = time.monotonic()
    waited = two(
        "srun",
        "-N2",
        "-n2",
        "-W",
        "1",
        "sh",
        "-c",
        '[ "$SLURM_PROCID" = 0 ] || sleep 60',
        check=False,
    )
    assert time.monotonic() - started < 30
    assert "Timed out waiting for job step to complete" in waited.stderr
    assert waited.returncode == 128 + signal.SIGKILL


def test_exact_steps_share_an_allocation_default_steps_wait(two: Commands) -> None:
    script = """#!/bin/sh
#SBATCH -N1 -n2
srun -n1 --exact sh -c 'touch a; while [ ! -e go ]; do sleep 0.05; done' &
srun -n1 --exact sh -c 'touch b; while [ ! -e go ]; do sleep 0.05; done' &
wait
srun -n1 sh -c 'touch c; while [ ! -e go2 ]; do sleep 0.05; done' &
while [ ! -e c ]; do sleep 0.05; done
srun -n1 echo after-the-first
wait
"""
    (two.cwd / "share.sh").write_text(script)
    job_id = two("sbatch", "share.sh").stdout.split()[-1]
    wait_for(lambda: (two.cwd / "a").exists() and (two.cwd / "b").exists(), 20, "both at once")
    (two.cwd / "go").touch()
    out = two.cwd / f"slurm-{job_id}.out"
    wait_for(lambda: out.exists() and "temporarily disabled" in out.read_text(), 20, "a wait")
    assert "after-the-first" not in out.read_text()
    (two.cwd / "go2").touch()
    two.wait_state(job_id, "COMPLETED")
    text = out.read_text()
    assert f"srun: Job {job_id} step creation temporarily disabled, retrying" in text
    assert "after-the-first" in text


def test_a_killed_srun_does_not_hold_its_step(two: Commands) -> None:
    client = two.cluster.client()
    spec = {"workDir": str(two.cwd), "name": "held", "allocationOnly": True, "nodesMin": 1}
    job_id = str(client.submit_job({"spec": spec})["jobId"])
    two.wait_state(job_id, "RUNNING")
    env = {**two.env, "SLURM_JOB_ID": job_id}
    proc = subprocess.Popen(
        [str(BIN / "srun"), "-n1", "sh", "-c", "echo up; sleep 60"],
        cwd=two.cwd,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    proc.kill()  # no CompleteStep: the nodes must tell ctld
    proc.communicate(timeout=10)
    wait_for(lambda: two.job(job_id)["steps"][0]["state"] != "JOB_STATE_RUNNING", 20, "step 0 ends")
    out = two("srun", "-n1", "echo", "next", env=env)  # would wait for ever on a held step
    assert out.stdout == "next\n" and "temporarily disabled" not in out.stderr
    client.complete_job({"jobId": job_id})


def test_a_task_that_leaves_a_background_child_still_ends(two: Commands) -> None:
    started = time.monotonic()
    out = two("srun", "-n1", "sh", "-c", "sleep 300 & echo hi")
    assert out.stdout == "hi\n" and time.monotonic() - started < 20


@pytest.mark.skipif(
    os.geteuid() != 0
    or (
        not os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")
        and not os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    ),
    reason="needs root and cgroups",
)
def test_step_tasks_live_in_their_batch_jobs_cgroup(two: Commands) -> None:
    hog = f"{PY} -c 'import time; b = bytearray(400 * 2**20); time.sleep(30)'"
    (two.cwd / "hog.sh").write_text(f"#!/bin/sh\n#SBATCH --mem=64M\nsrun -n1 {hog}\n")
    job_id = two("sbatch", "hog.sh").stdout.split()[-1]
    two.wait_state(job_id, "OUT_OF_MEMORY", timeout=40)
