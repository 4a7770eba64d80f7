"""The environment of a batch job: the submitter's (after --export) plus Slurm's variables.

Each variable is what Slurm's slurmd sets for the batch step; docs/environment.md
lists them. Values for multi-node jobs use Slurm's compressed forms ("4(x2)").
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping

from corral.checkpoints import checkpoint_name
from corral.jobenv import allocation_variables
from corral.slurmfmt import compress_counts
from corral.wire import corral_pb2 as pb

UMASK_VAR = "SLURM_UMASK"  # the submitter's umask (sbatch, srun and salloc record it)


def job_umask(env: Mapping[str, str]) -> str:
    """The umask a job's processes and files get: SLURM_UMASK when it is an octal mask
    (``077``, ``0022``), normalized to four digits; "" (noded's own) when absent or not
    a mask, as slurmstepd does."""
    value = env.get(UMASK_VAR, "").strip()
    if not value or len(value) > 4 or any(c not in "01234567" for c in value):
        return ""
    return f"{int(value, 8):04o}"


def exports_all(export: str) -> bool:
    """Whether --export propagated the submitter's whole environment (ALL, ALL,VAR=x)."""
    first = export.split(",", 1)[0].strip().upper()
    return first in ("", "ALL")


def login_basics(pw: pwd.struct_passwd | None, default_path: str) -> dict[str, str]:
    """What a login gives any user: HOME, USER, LOGNAME, SHELL and a PATH.

    Used under --export=NONE or a variable list without ALL, where Slurm loads the
    user's login environment instead of the submitter's.
    """
    if pw is None:
        pw = pwd.getpwuid(os.getuid())
    return {
        "HOME": pw.pw_dir,
        "USER": pw.pw_name,
        "LOGNAME": pw.pw_name,
        "SHELL": pw.pw_shell or "/bin/sh",
        "PATH": default_path,
    }


def checkpoint_dir(job: pb.Job, root: str) -> str:
    """The job's checkpoint directory: the same for every run of the job, on any node,
    and no other job's (corral/checkpoints.py names it)."""
    base = root or os.path.join(job.spec.work_dir or "/tmp", ".checkpoints")
    return os.path.join(base, checkpoint_name(job))


def batch_environment(
    job: pb.Job,
    node_name: str,
    cluster: str,
    *,
    pw: pwd.struct_passwd | None = None,
    default_path: str = "/usr/local/bin:/usr/bin:/bin",
    checkpoint_root: str = "",
) -> dict[str, str]:
    spec = job.spec
    env = {} if exports_all(spec.export) else login_basics(pw, default_path)
    env.update(spec.environment)
    alloc = next((a for a in job.allocations if a.node == node_name), None)
    gpus = ",".join(str(i) for i in alloc.gpu_indices) if alloc else ""
    slurm = allocation_variables(job, cluster)
    slurm.update(
        {
            "SLURM_CPUS_ON_NODE": str(alloc.cpus if alloc else 0),
            "SLURMD_NODENAME": node_name,
            "SLURM_NODEID": "0",
            "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0",
            "SLURM_GTIDS": "0",
            "SLURM_PRIO_PROCESS": "0",
            "SLURM_EXPORT_ENV": spec.export or "ALL",
            "ENVIRONMENT": "BATCH",
        }
    )
    if alloc is not None and alloc.gpu_indices:
        slurm["SLURM_JOB_GPUS"] = gpus
        slurm["SLURM_GPUS_ON_NODE"] = str(len(alloc.gpu_indices))
        slurm["CUDA_VISIBLE_DEVICES"] = gpus
        slurm["GPU_DEVICE_ORDINAL"] = gpus
    if alloc is not None and alloc.shards:
        # gres/shard: the shared GPU (CUDA_VISIBLE_DEVICES above) and the job's shards of it
        slurm["SLURM_SHARDS_ON_NODE"] = str(alloc.shards)
    env.update(slurm)
    env["CORRAL_CHECKPOINT_DIR"] = checkpoint_dir(job, checkpoint_root)
    return env


def step_environment(
    base: dict[str, str],
    job: pb.Job,
    step: pb.Step,
    here: pb.StepNode,
    *,
    rank: int,
    local_id: int,
    gpus: list[int],
    cluster: str,
    master_addr: str,
    master_port: int,
) -> dict[str, str]:
    """One task's environment: srun's, the job's, the step's, and PyTorch's rendezvous.

    RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT are what
    torch.distributed's env:// init reads; SLURM_* are what Slurm's slurmstepd sets.
    """
    env = dict(base)
    env.update(allocation_variables(job, cluster))
    per_node = [len(n.ranks) for n in step.nodes]
    alloc = next((a for a in job.allocations if a.node == here.node), None)
    visible = ",".join(str(g) for g in gpus)
    env.update(
        {
            "SLURM_NNODES": str(len(step.nodes)),
            "SLURM_STEP_ID": str(step.step_id),
            "SLURM_STEPID": str(step.step_id),
            "SLURM_STEP_NODELIST": step.nodelist,
            "SLURM_STEP_NUM_NODES": str(len(step.nodes)),
            "SLURM_STEP_NUM_TASKS": str(step.ntasks),
            "SLURM_STEP_TASKS_PER_NODE": compress_counts(per_node),
            "SLURM_TASKS_PER_NODE": compress_counts(per_node),
            "SLURM_NTASKS": str(step.ntasks),
            "SLURM_NPROCS": str(step.ntasks),
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(local_id),
            "SLURM_NODEID": str(here.node_id),
            "SLURM_GTIDS": ",".join(str(r) for r in here.ranks),
            "SLURMD_NODENAME": here.node,
            "SLURM_CPUS_ON_NODE": str(alloc.cpus if alloc else here.cpus),
            "SLURM_DISTRIBUTION": step.spec.distribution or "block",
        }
    )
    # PyTorch's rendezvous: only where the user's environment lacks them, so a script
    # that exports MASTER_PORT (or MASTER_ADDR from `scontrol show hostnames`) keeps it
    for key, value in (
        ("RANK", str(rank)),
        ("LOCAL_RANK", str(local_id)),
        ("WORLD_SIZE", str(step.ntasks)),
        ("LOCAL_WORLD_SIZE", str(len(here.ranks))),
        ("GROUP_RANK", str(here.node_id)),
        ("MASTER_ADDR", master_addr),
        ("MASTER_PORT", str(master_port)),
    ):
        env.setdefault(key, value)
    if step.spec.cpus_per_task:
        env["SLURM_CPUS_PER_TASK"] = str(step.spec.cpus_per_task)
    if step.spec.ntasks_per_node:
        env["SLURM_NTASKS_PER_NODE"] = str(step.spec.ntasks_per_node)
    if here.gpu_indices:
        env["SLURM_JOB_GPUS"] = ",".join(str(g) for g in here.gpu_indices)
        env["SLURM_STEP_GPUS"] = visible
        env["SLURM_GPUS_ON_NODE"] = str(len(here.gpu_indices))
        env["CUDA_VISIBLE_DEVICES"] = visible
        env["GPU_DEVICE_ORDINAL"] = visible
    if alloc is not None and alloc.shards:
        env["SLURM_SHARDS_ON_NODE"] = str(alloc.shards)
    return env
