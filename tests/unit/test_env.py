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
