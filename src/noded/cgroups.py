"""Per-job control groups: membership for tracking, memory limit, CPU and OOM accounting.

One job is one directory, ``<cgroup_root>/<node>/job_<id>``, in the unified (v2)
hierarchy or in each v1 controller's hierarchy the host mounts (memory, cpuacct,
pids, devices, freezer). What the host does not offer is skipped, and ``detect``
says so once; noded then falls back to psutil monitoring (tracking.py).

Every file operation goes through ``_write``/``_read`` on paths under ``base``, so
unit tests point ``base`` at a temporary directory that mimics cgroupfs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger("noded")

DEFAULT_BASE = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "cpuacct", "pids", "devices", "freezer")
NVIDIA_MAJOR = 195  # /dev/nvidia<N> character devices
FREEZE_WAIT_S = 0.2  # noded's event loop waits at most this long for a freeze


class CgroupUnavailable(Exception):
    """Why cgroups cannot be used on this host (the reason goes to the log)."""


@dataclass
class JobCgroup:
    """One job's cgroup(s). ``dirs`` maps controller (``""`` for v2) to its directory."""

    version: int
    dirs: dict[str, Path]

    def job_id(self) -> int:
        """Its job's id, from its name (``job_<id>``); -1 if it is not a job's."""
        name = self._main.name
        return int(name[4:]) if name.startswith("job_") and name[4:].isdigit() else -1

    @property
    def _main(self) -> Path:
        return self.dirs.get("") or self.dirs.get("memory") or next(iter(self.dirs.values()))

    def add(self, pid: int) -> None:
        for d in self.dirs.values():
            _write(d / "cgroup.procs", str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                found.update(int(x) for x in _read(d / "cgroup.procs").split())
        return found

    def set_memory_limit(self, limit_bytes: int) -> None:
        if self.version == 2:
            _write(self.dirs[""] / "memory.max", str(limit_bytes))
            with contextlib.suppress(OSError):  # no swap accounting on this host
                _write(self.dirs[""] / "memory.swap.max", "0")
            return
        mem = self.dirs.get("memory")
        if mem is None:
            raise CgroupUnavailable("the memory controller is not mounted")
        _write(mem / "memory.limit_in_bytes", str(limit_bytes))
        with contextlib.suppress(OSError):  # memsw exists only with swap accounting
            _write(mem / "memory.memsw.limit_in_bytes", str(limit_bytes))

    def deny_gpus(self, minors: list[int]) -> bool:
        """Block /dev/nvidia<minor> for GPUs the job was not given (v1 devices only)."""
        dev = self.dirs.get("devices")
        if dev is None:
            return False  # v2 needs an eBPF program for this; CUDA_VISIBLE_DEVICES remains
        for minor in minors:
            _write(dev / "devices.deny", f"c {NVIDIA_MAJOR}:{minor} rwm")
        return True

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the job's memory limit."""
        try:
            if self.version == 2:
                text = _read(self.dirs[""] / "memory.events")
                key = "oom_kill"
            elif "memory" in self.dirs:
                text = _read(self.dirs["memory"] / "memory.oom_control")
                key = "oom_kill"
            else:
                return 0
        except OSError:
            return 0
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
        return 0

    def cpu_seconds(self) -> tuple[float, float] | None:
        """(user, system) CPU seconds of everything that ran in the job, if the host counts."""
        try:
            if self.version == 2:
                stat = _kv(_read(self.dirs[""] / "cpu.stat"))
                return stat.get("user_usec", 0) / 1e6, stat.get("system_usec", 0) / 1e6
            if "cpuacct" in self.dirs:
                stat = _kv(_read(self.dirs["cpuacct"] / "cpuacct.stat"))
                hz = os.sysconf("SC_CLK_TCK")
                return stat.get("user", 0) / hz, stat.get("system", 0) / hz
        except (OSError, ValueError):
            pass
        return None

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The job's processes stopped while it is signalled, as Slurm's proctrack/cgroup
        does: a shell whose child dies first would print "Terminated" over the end of
        the job's output, or run its next command, before its own signal arrives.
        Without a freezer (or if freezing stalls) the signals go out unfrozen."""
        if self.version == 2:
            control, value, thaw = self.dirs[""] / "cgroup.freeze", "1", "0"
        elif "freezer" in self.dirs:
            control, value, thaw = self.dirs["freezer"] / "freezer.state", "FROZEN", "THAWED"
        else:
            yield
            return
        try:
            _write(control, value)
        except OSError:
            yield
            return
        try:
            deadline = time.monotonic() + FREEZE_WAIT_S
            while not self._is_frozen() and time.monotonic() < deadline:
                time.sleep(0.001)  # freezing a task in a system call takes a moment
            yield
        finally:
            with contextlib.suppress(OSError):
                _write(control, thaw)

    def _is_frozen(self) -> bool:
        try:
            if self.version == 2:
                return "frozen 1" in _read(self.dirs[""] / "cgroup.events")
            return _read(self.dirs["freezer"] / "freezer.state").strip() == "FROZEN"
        except OSError:
            return True  # nothing to wait for

    def kill_all(self, sig: int = signal.SIGKILL) -> int:
        """Signal every process in the job; returns how many were signalled."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return len(pids)

    def try_remove(self) -> bool:
        """Remove the directories if the kernel lets us now; True once all are gone.

        Right after its last process exits a cgroup can still be busy for a moment
        (dying tasks); the caller retries without blocking its event loop.
        """
        done = True
        for d in self.dirs.values():
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                self.kill_all()
                done = False
        return done


@dataclass
class CgroupManager:
    """Creates job cgroups under ``<base>/.../<root>/<node>``."""

    version: int
    parents: dict[str, Path]  # controller ("" on v2) -> the node's directory
    notes: list[str] = field(default_factory=list)

    def create(self, job_id: int) -> JobCgroup:
        """A fresh cgroup for the job; a stale one of the same name is emptied and removed.

        A job is never put in a cgroup that still holds an earlier copy's processes
        or counters (a crashed noded's, or a requeued run's): CgroupUnavailable if the
        stale one cannot be removed, and the job runs under psutil watch instead.
        """
        old = {c: p / f"job_{job_id}" for c, p in self.parents.items()}
        if any(d.exists() for d in old.values()):
            stale = JobCgroup(self.version, {c: d for c, d in old.items() if d.exists()})
            log.warning("stale job cgroup found: emptied and removed", job_id=job_id)
            for _ in range(100):
                if stale.try_remove():
                    break
                time.sleep(0.01)  # rare: the kernel tears the killed tasks down
            else:
                raise CgroupUnavailable(f"a stale cgroup of job {job_id} cannot be removed")
        dirs: dict[str, Path] = {}
        for controller, d in old.items():
            d.mkdir()
            dirs[controller] = d
        return JobCgroup(self.version, dirs)

    def stale(self) -> list[JobCgroup]:
        """Every job cgroup under this node's directories (at start-up: all left over)."""
        by_name: dict[str, dict[str, Path]] = {}
        for controller, parent in self.parents.items():
            with contextlib.suppress(OSError):
                for d in parent.iterdir():
                    if d.is_dir() and d.name.startswith("job_"):
                        by_name.setdefault(d.name, {})[controller] = d
        return [JobCgroup(self.version, dirs) for _, dirs in sorted(by_name.items())]

    def close(self) -> None:
        """Remove the node's directories, and the root above them, if no job is left."""
        for parent in self.parents.values():
            with contextlib.suppress(OSError):
                parent.rmdir()
                parent.parent.rmdir()  # only empty once no other node of this root is left

    def describe(self) -> str:
        where = ", ".join(str(p) for p in self.parents.values())
        return f"cgroup v{self.version} at {where}"


def detect(
    mode: str, root: str, node: str, base: Path = DEFAULT_BASE
) -> tuple[CgroupManager | None, str]:
    """The manager to use and a sentence for the log saying which and why."""
    if mode == "none":
        return None, "cgroups off (noded.cgroups = none): psutil monitoring only"
    if os.geteuid() != 0 and base == DEFAULT_BASE:
        return None, "cgroups unused: noded is not root; psutil monitoring only"
    errors: list[str] = []
    if mode in ("auto", "v2"):
        try:
            return _v2(base, root, node), ""
        except (CgroupUnavailable, OSError) as exc:
            errors.append(f"v2: {exc}")
    if mode in ("auto", "v1"):
        try:
            return _v1(base, root, node), ""
        except (CgroupUnavailable, OSError) as exc:
            errors.append(f"v1: {exc}")
    return None, "cgroups unusable (" + "; ".join(errors) + "): psutil monitoring only"


def _v2(base: Path, root: str, node: str) -> CgroupManager:
    if not (base / "cgroup.controllers").exists():
        raise CgroupUnavailable(f"{base} is not a unified (v2) hierarchy")
    available = set(_read(base / "cgroup.controllers").split())
    wanted = [c for c in ("memory", "cpu", "pids") if c in available]
    if "memory" not in wanted:
        raise CgroupUnavailable("the v2 hierarchy has no memory controller")
    top = base / root
    top.mkdir(exist_ok=True)
    enable = " ".join(f"+{c}" for c in wanted)
    # children only get a controller their parent enables for its subtree
    for d in (base, top):
        with contextlib.suppress(OSError):
            _write(d / "cgroup.subtree_control", enable)
    node_dir = top / node
    node_dir.mkdir(exist_ok=True)
    _write(node_dir / "cgroup.subtree_control", enable)
    return CgroupManager(2, {"": node_dir})


def _v1(base: Path, root: str, node: str) -> CgroupManager:
    if not (base / "memory" / "memory.limit_in_bytes").exists():
        raise CgroupUnavailable(f"no v1 memory controller under {base}")
    parents: dict[str, Path] = {}
    for controller in V1_CONTROLLERS:
        hierarchy = base / controller
        if not (hierarchy / "cgroup.procs").exists():
            continue
        node_dir = hierarchy / root / node
        try:
            node_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            if controller == "memory":
                raise
            continue
        if controller == "memory":
            # v1 memory cgroups only count children's usage with hierarchy on
            with contextlib.suppress(OSError):
                _write(node_dir / "memory.use_hierarchy", "1")
        parents[controller] = node_dir
    return CgroupManager(1, parents)


def _kv(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[name] = int(value)
    return out


def _write(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _read(path: Path) -> str:
    with open(path) as fh:
        return fh.read()
