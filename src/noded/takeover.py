"""What a new noded takes over from an earlier one: the runs and steps whose supervisors
still hold them, and what is left to settle as lost.

A run (or step) is taken over when noded's record of it (records.py, root's alone)
names a supervisor that answers at its socket with the recorded pid, the request it
was started with is in the spool, and the supervisor still holds its process (or its
exit status). Anything short of that (a record from before the gate opened, a
supervisor that is gone, a record of an older noded without one) is settled as before:
its processes killed and the run reported lost (recovery.py). A supervisor no record
takes over (noded died between starting it and writing the record) has its children
killed and is closed.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from google.protobuf.message import DecodeError

from corral.wire import corral_pb2 as pb
from noded import records, supproto
from noded.cgroups import JobCgroup
from noded.core.jobrun import JobRun
from noded.limits import CoreAllocator
from noded.running import RunningJob
from noded.spawn import batch_key
from noded.supervisor import Found, Supervisor, socket_dir
from noded.taskstart import task_key
from noded.tracking import JobProcesses

log = structlog.get_logger("noded")


@dataclass
class BatchTakeover:
    record: records.JobState
    request: pb.LaunchJobRequest
    supervisor: Supervisor
    found: Found


@dataclass
class StepTakeover:
    record: records.StepState
    request: pb.RunTasksRequest  # ctld's job and step, the node, srun's environment
    credential: str  # the step credential: a resuming srun proves it without ctld
    supervisor: Supervisor
    tasks: list[Found]  # in the record's order


@dataclass
class Takeover:
    batches: list[BatchTakeover] = field(default_factory=list)
    steps: list[StepTakeover] = field(default_factory=list)
    lost_jobs: list[records.JobState] = field(default_factory=list)
    lost_steps: list[records.StepState] = field(default_factory=list)
    # every supervisor attached, by socket path, with the keys taken over from it
    supervisors: dict[str, tuple[Supervisor, set[str]]] = field(default_factory=dict)

    def taken(self, path: str, key: str) -> None:
        self.supervisors[path][1].add(key)

    def lost_job_ids(self) -> list[int]:
        """The batch jobs reported lost (recovery.py killed what was left of them)."""
        return [j.job_id for j in self.lost_jobs]

    def job_ids(self) -> set[int]:
        """Jobs with anything taken over here (their cgroups and directories stay)."""
        return {b.record.job_id for b in self.batches} | {s.record.job_id for s in self.steps}


class _Attacher:
    """Each supervisor attached once, however many records name it."""

    def __init__(self, out: Takeover) -> None:
        self.out = out
        self.found: dict[str, dict[str, Found] | None] = {}

    async def children(self, path: str, pid: int) -> dict[str, Found] | None:
        if path in self.found:
            return self.found[path]
        got = await Supervisor.attach(path, pid) if path and pid > 0 else None
        if got is None:
            self.found[path] = None
            return None
        sup, children = got
        self.out.supervisors[path] = (sup, set())
        self.found[path] = {f.process.key: f for f in children}
        return self.found[path]


async def take_over(spool: str) -> Takeover:
    """Attach to the supervisors noded's records name; sort the records into what is
    taken over and what is lost."""
    out = Takeover()
    attach = _Attacher(out)
    for job in records.load_jobs(spool):
        took = await _batch(spool, job, attach)
        if took is None:
            out.lost_jobs.append(job)
        else:
            out.batches.append(took)
            out.taken(job.supervisor_path, took.found.process.key)
    for step in records.load_steps(spool):
        took_step = await _step(spool, step, attach)
        if took_step is None:
            out.lost_steps.append(step)
        else:
            out.steps.append(took_step)
            for f in took_step.tasks:
                out.taken(step.supervisor_path, f.process.key)
    await _orphans(spool, out)
    return out


async def _batch(spool: str, job: records.JobState, attach: _Attacher) -> BatchTakeover | None:
    if not job.spawned_at or not job.supervisor_path:
        return None  # not past its gate yet (or an older noded's): settled as lost
    children = await attach.children(job.supervisor_path, job.supervisor_pid)
    raw = records.load_request(spool, records.job_request_name(job.job_id))
    found = children.get(batch_key(job.restart_count)) if children else None
    if found is None or raw is None:
        return None
    try:
        request = pb.LaunchJobRequest.FromString(raw)
    except DecodeError:
        return None
    if request.job.job_id != job.job_id or request.job.restart_count != job.restart_count:
        return None
    sup = attach.out.supervisors[job.supervisor_path][0]
    return BatchTakeover(job, request, sup, found)


async def _step(spool: str, step: records.StepState, attach: _Attacher) -> StepTakeover | None:
    if not step.started or not step.supervisor_path or not step.tasks:
        return None
    children = await attach.children(step.supervisor_path, step.supervisor_pid)
    raw = records.load_request(spool, records.step_request_name(step.job_id, step.step_id))
    if children is None or raw is None:
        return None
    tasks = [
        children.get(task_key(step.run, step.step_id, int(str(t["rank"])))) for t in step.tasks
    ]
    if any(t is None for t in tasks):
        return None
    try:
        request = pb.RunTasksRequest.FromString(raw)
    except DecodeError:
        return None
    if request.step.step_id != step.step_id or request.job.job_id != step.job_id:
        return None
    sup = attach.out.supervisors[step.supervisor_path][0]
    found = [t for t in tasks if t is not None]
    return StepTakeover(step, request, request.step_credential, sup, found)


async def _orphans(spool: str, out: Takeover) -> None:
    """Supervisors no record names: their children are killed, they are closed."""
    try:
        directory = socket_dir(spool)
        names = [n for n in os.listdir(directory) if n.endswith(".sock")]
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        if path in out.supervisors:
            continue
        try:
            sock = supproto.connect(path)
        except OSError:  # nobody listens: a supervisor that died
            with contextlib.suppress(OSError):
                os.unlink(path)
            continue
        pid = supproto.peer(sock)[0]
        sock.close()
        got = await Supervisor.attach(path, pid)
        if got is None:
            continue
        sup, children = got
        log.warning("supervisor without a record: its processes killed", path=path, pid=pid)
        await sup.kill()
        for f in children:
            supproto.close_all(list(f.fds.values()))
        await sup.close()


# ---------------------------------------------------------------- the launcher's records

MAX_CPU_ENTRIES = 1000  # processes whose CPU time a record keeps (a job's own)


def usage_record(running: RunningJob) -> dict[str, object]:
    """What the samples added up so far, kept in the run's record: the next noded's
    exit report carries the whole run's figures."""
    u, g = running.usage, running.gpu
    cpu = sorted(running.usage.cpu_by_pid.items())[-MAX_CPU_ENTRIES:]
    return {
        "max_rss_kb": u.max_rss_kb,
        "rss_kb_sum": u.rss_kb_sum,
        "samples": u.samples,
        "cpu": [[pid, created, user, system] for (pid, created), (user, system) in cpu],
        "gpu_util_max": g.util_max,
        "gpu_util_sum": g.util_sum,
        "gpu_mem_max_mb": g.mem_max_mb,
        "gpu_mem_sum_mb": g.mem_sum_mb,
        "gpu_count": g.count,
    }


def _restore_usage(running: RunningJob, saved: dict[str, object]) -> None:
    def num(key: str) -> float:
        value = saved.get(key, 0)
        return float(value) if isinstance(value, int | float) else 0.0

    u, g = running.usage, running.gpu
    u.max_rss_kb, u.rss_kb_sum, u.samples = (
        int(num("max_rss_kb")),
        int(num("rss_kb_sum")),
        int(num("samples")),
    )
    cpu = saved.get("cpu", [])
    for entry in cpu if isinstance(cpu, list) else []:
        with contextlib.suppress(TypeError, ValueError):
            pid, created, user, system = entry
            u.cpu_by_pid[(int(pid), float(created))] = (float(user), float(system))
    g.util_max, g.util_sum = num("gpu_util_max"), num("gpu_util_sum")
    g.mem_max_mb, g.mem_sum_mb, g.count = (
        num("gpu_mem_max_mb"),
        num("gpu_mem_sum_mb"),
        int(num("gpu_count")),
    )


def adopted(took: BatchTakeover, state: JobRun, cores: CoreAllocator) -> RunningJob:
    """The launcher's record of a run taken over: its recorded marker, cgroup, files,
    cores and samples, its batch shell the supervisor's child."""
    rec = took.record
    cgroup = None
    if rec.cgroup_dirs:
        cgroup = JobCgroup(rec.cgroup_version, {k: Path(v) for k, v in rec.cgroup_dirs.items()})
    running = RunningJob(
        state,
        rec.marker,
        process=took.found.process,
        supervisor=took.supervisor,
        cgroup=cgroup,
        progress_file=rec.progress_file,
        checkpoint_dir=rec.checkpoint_dir,
        since=rec.since,
        spawned_at=rec.spawned_at,
    )
    running.procs = JobProcesses(took.found.process.pid, rec.marker, cgroup, uid=rec.uid)
    _restore_usage(running, rec.usage)
    cores.claim(rec.job_id, rec.cores)
    return running
