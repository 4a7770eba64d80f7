from corral.wire import corral_pb2 as pb
from noded.env import batch_environment, compress_counts


def test_compress_counts() -> None:
    assert compress_counts([4, 4, 2]) == "4(x2),2"
    assert compress_counts([1]) == "1"


def test_batch_environment_for_a_two_node_gpu_job() -> None:
    job = pb.Job(
        job_id=17,
        user="alice",
        uid=1000,
        gid=100,
        partition="gpu",
        account="ml",
        nodelist="node[01-02]",
        num_tasks=4,
        start_time=100.0,
        time_limit_s=60,
    )
    job.spec.name = "train"
    job.spec.work_dir = "/home/alice"
    job.spec.cpus_per_task = 2
    job.spec.environment["PATH"] = "/usr/bin"
    job.allocations.add(node="node01", cpus=4, gpu_indices=[2, 3])
    job.allocations.add(node="node02", cpus=4, gpu_indices=[0, 1])
    env = batch_environment(job, "node01", "lab")
    assert env["PATH"] == "/usr/bin"
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == "17"
    assert env["SLURM_JOB_NODELIST"] == "node[01-02]"
    assert env["SLURM_NNODES"] == "2" and env["SLURM_NTASKS"] == "4"
    assert env["SLURM_TASKS_PER_NODE"] == "2(x2)"
    assert env["SLURM_JOB_CPUS_PER_NODE"] == "4(x2)"
    assert env["SLURM_CPUS_PER_TASK"] == "2"
    assert env["SLURM_JOB_GPUS"] == env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["SLURM_JOB_ACCOUNT"] == "ml" and env["SLURM_CLUSTER_NAME"] == "lab"
    assert env["SLURM_JOB_END_TIME"] == "160"


def test_step_rendezvous_variables_only_where_the_environment_lacks_them() -> None:
    from noded.env import step_environment

    job = pb.Job(job_id=3, nodelist="n[1-2]")
    step = pb.Step(job_id=3, step_id=0, ntasks=2)
    here = step.nodes.add(node="n1", ranks=[0], node_id=0)
    step.nodes.add(node="n2", ranks=[1], node_id=1)

    def env(base: dict[str, str]) -> dict[str, str]:
        return step_environment(
            base,
            job,
            step,
            here,
            rank=0,
            local_id=0,
            gpus=[],
            cluster="c",
            master_addr="10.0.0.1",
            master_port=41000,
        )

    ours = env({})
    assert (ours["MASTER_ADDR"], ours["MASTER_PORT"], ours["WORLD_SIZE"]) == (
        "10.0.0.1",
        "41000",
        "2",
    )
    mine = env({"MASTER_PORT": "23456", "MASTER_ADDR": "n1"})
    assert (mine["MASTER_ADDR"], mine["MASTER_PORT"], mine["RANK"]) == ("n1", "23456", "0")
    assert mine["SLURM_PROCID"] == "0" and mine["SLURM_STEP_NUM_TASKS"] == "2"


def test_salloc_batch_and_tasks_see_the_same_job_wide_variables() -> None:
    # one builder (corral/jobenv.py) for the three: salloc's shell, the batch script and
    # each task; salloc reads the job as the API's JSON, noded as the proto
    from google.protobuf import json_format

    from client.alloc import allocation_environment
    from noded.env import step_environment

    job = pb.Job(
        job_id=8, user="bob", uid=1001, gid=1001, partition="gpu", account="vision",
        nodelist="n[1-2]", num_tasks=2, start_time=50.0, time_limit_s=30, qos="high",
    )  # fmt: skip
    job.spec.name = "interactive"
    job.spec.submit_dir = "/home/bob"
    job.spec.submit_host = "login1"
    job.spec.mem_per_cpu_mb = 512
    job.spec.gpus_per_node = 1
    job.allocations.add(node="n1", cpus=2, gpu_indices=[0])
    job.allocations.add(node="n2", cpus=2, gpu_indices=[0])
    salloc = allocation_environment(json_format.MessageToDict(job), "lab")  # type: ignore[arg-type]
    batch = batch_environment(job, "n1", "lab")
    step = pb.Step(job_id=8, step_id=0, ntasks=2, nodelist="n[1-2]")
    here = step.nodes.add(node="n2", ranks=[1], node_id=1)
    step.nodes.insert(0, pb.StepNode(node="n1", ranks=[0], node_id=0))
    task = step_environment(
        {}, job, step, here, rank=1, local_id=0, gpus=[0], cluster="lab",
        master_addr="n1", master_port=29500,
    )  # fmt: skip
    for name in (
        "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES",
        "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT", "SLURM_JOB_QOS", "SLURM_JOB_USER",
        "SLURM_JOB_CPUS_PER_NODE", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST",
        "SLURM_JOB_END_TIME", "SLURM_MEM_PER_CPU", "SLURM_GPUS_PER_NODE",
        "SLURM_CLUSTER_NAME", "SLURM_NTASKS", "SLURM_TASKS_PER_NODE",
    ):  # fmt: skip
        assert salloc[name] == batch[name] == task[name], name
    assert salloc["SLURM_JOB_ACCOUNT"] == "vision" and salloc["SLURM_JOB_QOS"] == "high"
    assert salloc["SLURM_SUBMIT_DIR"] == "/home/bob" and salloc["SLURM_MEM_PER_CPU"] == "512"
    assert task["SLURM_NODEID"] == "1" and task["SLURMD_NODENAME"] == "n2"
