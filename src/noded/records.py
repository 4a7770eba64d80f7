"""noded's own records of what runs here, and the test that a process is what one claims.

Each batch job and each srun step on this node has a small record in ``<spool>/state``,
a directory only root (noded's user) can enter: the marker its processes carry, the
uid they run as, when the record was made (before any of them started), and for a
batch job its root pid and cgroup. A new noded (recovery) and the fence guard kill
only a process whose marker, real uid and start time all agree with a record here:
a job's user can write her own processes' environment, never these files, so no
user can steer a root process into their hands.

Standard library only: the fence guard imports it and must start fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields

MARKER_VAR = "CORRAL_JOB_MARKER"
STEP_MARKER_VAR = "CORRAL_STEP_MARKER"
STATE_DIR = "state"
LEGACY_STATE_FILE = "state.json"  # job<id>/state.json, before records moved to state/
# a process's start time is boot time (whole seconds in /proc/stat) plus its ticks:
# it can read up to a second early against time.time() taken before it started
START_SLACK_S = 2.0


@dataclass
class JobState:
    job_id: int
    restart_count: int
    marker: str
    uid: int | None = None
    root_pid: int = -1
    root_created: float = 0.0
    cgroup_version: int = 0
    cgroup_dirs: dict[str, str] = field(default_factory=dict)
    since: float = 0.0  # made before any of the job's processes started
    # what a new noded needs to take the run over (its supervisor keeps the processes)
    supervisor_pid: int = 0
    supervisor_path: str = ""
    spawned_at: float = 0.0  # its batch shell past the gate (0: not yet: not taken over)
    checkpoint_dir: str = ""
    progress_file: str = ""
    cores: list[int] = field(default_factory=list)
    usage: dict[str, object] = field(default_factory=dict)  # the samples' sums so far


@dataclass
class StepState:
    job_id: int
    step_id: int
    marker: str  # the step's marker (CORRAL_STEP_MARKER of its tasks)
    uid: int
    since: float = 0.0
    # what a new noded needs to take the step over (see JobState)
    supervisor_pid: int = 0
    supervisor_path: str = ""
    run: int = 0
    started: bool = False  # every task here past its gate
    master_port: int = 0
    tasks: list[dict[str, object]] = field(default_factory=list)  # rank, key, progress, gpus


@dataclass(frozen=True)
class Claim:
    """Processes whose ``var`` is ``marker``, running as ``uid``, started since ``since``."""

    var: str
    marker: str
    uid: int
    since: float


def state_dir(spool: str) -> str:
    """``<spool>/state``, made root's own (mode 0700) if it is not yet."""
    d = os.path.join(spool, STATE_DIR)
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{d} is not noded's own directory")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(d, 0o700)
    return d


def _path(spool: str, name: str) -> str:
    return os.path.join(state_dir(spool), name)


def _job_name(job_id: int) -> str:
    return f"job{job_id:08d}.json"


def _step_name(job_id: int, step_id: int) -> str:
    return f"step{job_id:08d}.{step_id}.json"


def _write(path: str, data: dict[str, object]) -> None:
    """Atomically: a noded killed mid-write leaves the previous version."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def save_job(spool: str, state: JobState) -> None:
    _write(_path(spool, _job_name(state.job_id)), asdict(state))


def save_step(spool: str, state: StepState) -> None:
    _write(_path(spool, _step_name(state.job_id, state.step_id)), asdict(state))


def save_request(spool: str, name: str, data: bytes) -> None:
    """A request a new noded needs to take work over (a LaunchJobRequest, a step's
    RunTasksRequest with its credential), as its wire bytes, root's alone."""
    path = _path(spool, name)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def load_request(spool: str, name: str) -> bytes | None:
    try:
        fd = os.open(_path(spool, name), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def job_request_name(job_id: int) -> str:
    return f"launch{job_id:08d}.pb"


def step_request_name(job_id: int, step_id: int) -> str:
    return f"tasks{job_id:08d}.{step_id}.pb"


def remove_job(spool: str, job_id: int) -> None:
    for name in (_job_name(job_id), job_request_name(job_id)):
        with contextlib.suppress(OSError):
            os.unlink(_path(spool, name))


def remove_step(spool: str, job_id: int, step_id: int) -> None:
    for name in (_step_name(job_id, step_id), step_request_name(job_id, step_id)):
        with contextlib.suppress(OSError):
            os.unlink(_path(spool, name))


def _load(paths: Iterable[str]) -> Iterator[dict[str, object]]:
    for path in sorted(paths):
        try:
            with open(path) as fh:
                raw = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(raw, dict):
            yield raw


def _listed(spool: str, prefix: str) -> list[str]:
    try:
        d = state_dir(spool)
        return [os.path.join(d, n) for n in os.listdir(d) if n.startswith(prefix)]
    except OSError:
        return []


def load_jobs(spool: str) -> list[JobState]:
    """Every job record here, then those an older noded left in root-owned files."""
    found: list[JobState] = []
    for raw in _load(p for p in _listed(spool, "job") if p.endswith(".json")):
        with contextlib.suppress(TypeError):
            found.append(JobState(**_known(JobState, raw)))  # type: ignore[arg-type]
    known = {s.job_id for s in found}
    found += [s for s in _legacy_jobs(spool) if s.job_id not in known]
    return found


def load_steps(spool: str) -> list[StepState]:
    found: list[StepState] = []
    for raw in _load(p for p in _listed(spool, "step") if p.endswith(".json")):
        with contextlib.suppress(TypeError):
            found.append(StepState(**_known(StepState, raw)))  # type: ignore[arg-type]
    return found


def _known(kind: type, raw: dict[str, object]) -> dict[str, object]:
    """The fields this version knows: a record of a newer noded (a rollback) still
    loads, and what it kills is still claimed by its marker, uid and time."""
    names = {f.name for f in fields(kind)}
    return {k: v for k, v in raw.items() if k in names}


def _legacy_jobs(spool: str) -> list[JobState]:
    """``job<id>/state.json`` of a noded before this layout. The job directory was the
    user's then: a file there is believed only if root made it (a user cannot make a
    root-owned file, nor hard-link one she cannot write)."""
    found: list[JobState] = []
    try:
        names = [n for n in os.listdir(spool) if n.startswith("job")]
    except OSError:
        return found
    for name in sorted(names):
        path = os.path.join(spool, name, LEGACY_STATE_FILE)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd) as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
                continue
            with contextlib.suppress(OSError, ValueError, TypeError):
                found.append(JobState(**json.load(fh)))
    return found


def claims(jobs: Iterable[JobState], steps: Iterable[StepState]) -> list[Claim]:
    """What the records let be killed: a job record without a uid claims nothing."""
    out = [Claim(MARKER_VAR, j.marker, j.uid, j.since) for j in jobs if j.uid is not None]
    out += [Claim(STEP_MARKER_VAR, s.marker, s.uid, s.since) for s in steps]
    return [c for c in out if c.marker]


def load_claims(spool: str) -> list[Claim]:
    return claims(load_jobs(spool), load_steps(spool))


# ---------------------------------------------------------------- processes, from /proc


def environ(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            block = fh.read()
    except OSError:
        return None
    out: dict[str, str] = {}
    for item in block.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq:
            out.setdefault(key.decode(errors="replace"), value.decode(errors="replace"))
    return out


def real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _boot_time() -> float:
    with open("/proc/stat") as fh:
        for line in fh:
            if line.startswith("btime"):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def start_time(pid: int) -> float | None:
    """When the process started (seconds since the epoch), as psutil's create_time."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
        return float(fields[19]) / os.sysconf("SC_CLK_TCK") + _boot_time()
    except (OSError, ValueError, IndexError):
        return None


def claimed(pid: int, found: Iterable[Claim], env: dict[str, str] | None = None) -> bool:
    """Whether a record claims the process: marker, real uid and start time all agree."""
    env = environ(pid) if env is None else env
    if not env:
        return False
    mine = [c for c in found if env.get(c.var) == c.marker]
    if not mine:
        return False
    uid, started = real_uid(pid), start_time(pid)
    if uid is None or started is None:
        return False
    return any(uid == c.uid and started >= c.since - START_SLACK_S for c in mine)


def scan(found: list[Claim]) -> set[int]:
    """Every process some record claims."""
    if not found:
        return set()
    keys = {b"\0" + c.var.encode() + b"=" for c in found}
    me = os.getpid()
    out: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                block = b"\0" + fh.read()
        except OSError:  # gone meanwhile
            continue
        if any(k in block for k in keys) and claimed(int(name), found):
            out.add(int(name))
    return out
