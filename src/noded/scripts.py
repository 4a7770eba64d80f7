"""Prolog and epilog: operator scripts run as root around each job, time limited."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from corral.wire import corral_pb2 as pb


def script_environment(job: pb.Job, node: str, cluster: str, context: str) -> dict[str, str]:
    """The variables Slurm gives prolog/epilog scripts (SLURM_SCRIPT_CONTEXT says which)."""
    alloc = next((a for a in job.allocations if a.node == node), None)
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "SLURM_SCRIPT_CONTEXT": context,
        "SLURM_JOB_ID": str(job.job_id),
        "SLURM_JOBID": str(job.job_id),
        "SLURM_JOB_USER": job.user,
        "SLURM_JOB_UID": str(job.uid),
        "SLURM_JOB_GID": str(job.gid),
        "SLURM_JOB_NAME": job.spec.name,
        "SLURM_JOB_PARTITION": job.partition,
        "SLURM_JOB_ACCOUNT": job.account,
        "SLURM_JOB_NODELIST": job.nodelist,
        "SLURM_CLUSTER_NAME": cluster,
        "SLURMD_NODENAME": node,
    }
    if alloc is not None and alloc.gpu_indices:
        gpus = ",".join(str(i) for i in alloc.gpu_indices)
        env["SLURM_JOB_GPUS"] = gpus
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


async def run_script(path: str, env: dict[str, str], timeout_s: float) -> str:
    """Run one prolog/epilog; returns "" on success, else why it failed (for the log)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            path,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd="/",
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return f"cannot run {path}: {exc.strerror}"
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return f"{path} timed out after {timeout_s:g} s"
    if proc.returncode == 0:
        return ""
    last = output.decode(errors="replace").strip().splitlines()[-1:] or [""]
    how = (
        f"killed by signal {-proc.returncode}"
        if proc.returncode and proc.returncode < 0
        else f"exit {proc.returncode}"
    )
    return f"{path}: {how}" + (f": {last[0][:200]}" if last[0] else "")
