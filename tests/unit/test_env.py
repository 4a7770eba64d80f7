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
