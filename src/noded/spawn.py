"""Starting one batch script as its user, gated so it cannot fork before it is contained.

The script is exec'd through a tiny shell shim that waits on a pipe (its stdin): noded puts the
shim into the job's cgroup and sets its CPU affinity first, then opens the gate,
so every descendant is born inside the job's limits. If noded dies before opening
it, the shim sees end-of-file and exits instead of running unconfined.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import resource
from collections.abc import Mapping
from dataclasses import dataclass, field

from corral.errors import LaunchError
from corral.patterns import batch_output_paths, expand_pattern
from corral.wire import corral_pb2 as pb
from noded.jobdir import create_for_user, make_dir
from noded.supervisor import SupervisedProcess, Supervisor

GATE_FAILED_EXIT = 111


def batch_key(run: int) -> str:
    """The batch shell's name in its job's supervisor (a requeued run's is another)."""
    return f"batch.{run}"


@dataclass(frozen=True)
class Identity:
    """Who the job runs as, and under what soft limits (``rlimits``: sbatch --propagate,
    by Slurm's names; -1 unlimited); ``pw`` None means noded's own account (a local
    cluster)."""

    pw: pwd.struct_passwd | None
    uid: int
    gid: int
    groups: list[int]
    rlimits: Mapping[str, int] = field(default_factory=dict)


def identity_for(job: pb.Job, node_name: str) -> Identity:
    me = os.getuid()
    if me != 0:
        if job.uid != me:
            raise LaunchError(
                f"noded on {node_name} runs as uid {me} and cannot start jobs of "
                f"uid {job.uid} ({job.user})"
            )
        return Identity(None, me, os.getgid(), [], dict(job.spec.rlimits))
    try:
        pw = pwd.getpwuid(job.uid)
    except KeyError:
        raise LaunchError(
            f"user {job.user} (uid {job.uid}) is unknown on node {node_name}"
        ) from None
    if pw.pw_name != job.user and job.user:
        raise LaunchError(
            f"uid {job.uid} is {pw.pw_name} on node {node_name}, not {job.user}: "
            "the user databases disagree"
        )
    gid = job.gid or pw.pw_gid
    return Identity(pw, pw.pw_uid, gid, os.getgrouplist(pw.pw_name, gid), dict(job.spec.rlimits))


def set_limits(pid: int, rlimits: Mapping[str, int]) -> None:
    """The soft limits a job asked for (--propagate), set on its gated shim before it
    runs anything (its children inherit them); each at most the hard limit it has, which
    stays: nobody gets more than a ``ulimit -S`` of their own could give. Unknown names
    are ignored (a newer sbatch)."""
    for name, soft in rlimits.items():
        which = getattr(resource, "RLIMIT_" + name, None)
        if not isinstance(which, int) or not name.isupper():
            continue
        _, hard = resource.prlimit(pid, which)
        if soft < 0:
            soft = resource.RLIM_INFINITY
        if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
            soft = hard
        resource.prlimit(pid, which, (soft, hard))


@dataclass(frozen=True)
class Files:
    stdout: str
    stderr: str
    stdin: str
    workdir: str


def resolve_files(job: pb.Job, node_name: str) -> Files:
    spec = job.spec
    # %A and %a are the array's ids, %j the task's own
    array_job_id = job.array_job_id
    array_task_id = job.array_task_id if job.HasField("array_task_id") else None
    out_path, err_path = job.stdout_path, job.stderr_path
    if not out_path:  # ctld expands them once; older ctlds did not
        out_path, err_path = batch_output_paths(
            job_id=job.job_id,
            job_name=spec.name,
            user=job.user,
            node=node_name,
            work_dir=spec.work_dir,
            stdout_pattern=spec.stdout_pattern,
            stderr_pattern=spec.stderr_pattern,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
        )
    in_path = os.devnull
    if spec.stdin_path:
        in_path = expand_pattern(
            spec.stdin_path,
            job_id=job.job_id,
            job_name=spec.name,
            user=job.user,
            node=node_name,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
        )
        if not os.path.isabs(in_path):
            in_path = os.path.join(spec.work_dir, in_path)
    return Files(out_path, err_path, in_path, spec.work_dir)


def write_script(job: pb.Job, job_dir: str, who: Identity) -> str:
    """The script in a fresh job directory of root's (jobdir.py): the user's own file,
    made afresh and handed over by its descriptor, so nothing she left can redirect it."""
    make_dir(job_dir)
    script_path = os.path.join(job_dir, "script")
    create_for_user(script_path, who.uid, who.gid, data=job.spec.script.encode(), mode=0o700)
    return script_path


def _shim() -> str:
    # Runs as the user: opening the files and the directory with the user's rights
    # means root never creates or truncates a file the user could not. The gate is
    # its stdin (sh only redirects single-digit fds); errors before stderr is
    # redirected reach noded through the pipe on fd 2. The files are truncated
    # first, then held in append mode, so noded's "CANCELLED" line appended at the
    # end is never overwritten by a job still writing at its own offset. The
    # submitter's umask (SLURM_UMASK) is set first: it makes the files and the job's own.
    return f"""read _ || exit {GATE_FAILED_EXIT}
out=$1; err=$2; in=$3; mode=$4; wd=$5; mask=$6; shift 6
if [ -n "$mask" ]; then umask "$mask" || exit {GATE_FAILED_EXIT}; fi
exec <"$in" || exit {GATE_FAILED_EXIT}
if [ "$mode" != append ]; then : >"$out" || exit {GATE_FAILED_EXIT}; fi
exec >>"$out" || exit {GATE_FAILED_EXIT}
if [ "$err" = "$out" ]; then exec 2>&1
else
  if [ "$mode" != append ]; then : 2>"$err"; fi
  exec 2>>"$err"
fi
cd "$wd" 2>/dev/null || {{
  echo "slurmstepd${{SLURMD_NODENAME:+-$SLURMD_NODENAME}}: error: couldn't chdir to \
\\`$wd': No such file or directory: going to /tmp instead" >&2; cd /tmp; }}
exec "$@"
"""


@dataclass
class Gated:
    """A started shim waiting at the gate (its supervisor's child, never noded's)."""

    process: SupervisedProcess
    gate_fd: int
    early_fd: int = -1  # its stderr until it redirects it: errors opening its files

    async def open(self, timeout_s: float = 30.0) -> None:
        """Let it run; LaunchError if it could not open its files."""
        with contextlib.suppress(OSError):
            os.write(self.gate_fd, b"go\n")
        self.close()
        if self.early_fd < 0:
            return
        try:
            early = await asyncio.wait_for(_read_to_end(self.early_fd), timeout_s)
        except TimeoutError:
            return  # a very slow file system: the job runs, its errors go to its own files
        finally:
            os.close(self.early_fd)
            self.early_fd = -1
        if early:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), timeout_s)
            message = early.decode(errors="replace").strip().splitlines()[-1]
            raise LaunchError(f"cannot set up the job's files: {message.removeprefix('sh: ')}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.gate_fd)
        self.gate_fd = -1

    def discard(self) -> None:
        """Before it ran anything: the closed gate makes it exit."""
        self.close()
        if self.early_fd >= 0:
            os.close(self.early_fd)
            self.early_fd = -1


async def _read_to_end(fd: int) -> bytes:
    """Everything a pipe gives until every writer closed it (off the event loop)."""
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    os.set_blocking(fd, False)
    loop.add_reader(fd, readable.set)
    out = bytearray()
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                readable.clear()
                await readable.wait()
                continue
            if not chunk:
                return bytes(out)
            out += chunk
    finally:
        loop.remove_reader(fd)


async def start_gated(
    supervisor: Supervisor,
    key: str,
    shim_argv: list[str],
    *,
    who: Identity,
    env: dict[str, str],
    stdout: int,
    stderr: int,
    what: str,
    keep: dict[str, int] | None = None,
    keep_gate: bool = False,
) -> tuple[SupervisedProcess, int]:
    """Start ``/bin/sh -c SHIM ...`` as the user, in its own session, as a child of the
    job's ``supervisor``, its stdin a pipe whose other end (returned) is the gate;
    ``keep``: descriptors the supervisor holds for a later noded (``keep_gate``: the
    gate too, as ``gate``: a task's stdin, which a restarted noded writes on)."""
    read_fd, write_fd = os.pipe()
    keep = dict(keep or {})
    if keep_gate:
        keep["gate"] = write_fd
    try:
        proc = await supervisor.spawn(
            key,
            ["/bin/sh", "-c", *shim_argv],
            env=env,
            uid=who.uid,
            gid=who.gid,
            groups=who.groups if who.pw else [],
            stdio=(read_fd, stdout, stderr),
            keep=keep,
        )
    except LaunchError as exc:
        os.close(write_fd)
        raise LaunchError(f"cannot start {what}: {exc}") from None
    finally:
        os.close(read_fd)
    if who.rlimits:
        try:
            set_limits(proc.pid, who.rlimits)
        except (OSError, ValueError) as exc:
            os.close(write_fd)  # the shim exits at the closed gate, having run nothing
            await proc.wait()
            raise LaunchError(f"cannot set the limits of {what}: {exc}") from None
    return proc, write_fd


async def spawn_gated(
    supervisor: Supervisor,
    key: str,
    argv: list[str],
    *,
    who: Identity,
    env: dict[str, str],
    files: Files,
    append: bool,
    umask: str = "",
) -> Gated:
    """Start ``argv`` in its own session, held at the gate until ``Gated.open``; ``umask``
    (octal, "": noded's own) applies to its files and every process it starts."""
    early_r, early_w = os.pipe()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        proc, gate = await start_gated(
            supervisor,
            key,
            [
                _shim(),
                "corral-shim",  # $0
                files.stdout,
                files.stderr,
                files.stdin,
                "append" if append else "truncate",
                files.workdir,
                umask,
                *argv,
            ],
            who=who,
            env=env,
            stdout=null,
            stderr=early_w,
            what="the batch script",
        )
    except BaseException:
        os.close(early_r)
        raise
    finally:
        os.close(null)
        os.close(early_w)
    return Gated(proc, gate, early_r)
