"""Stopping a local cluster by its pid files (``corral down``): exactly the daemons
its state directory started, nodes first, checked against the pids' command lines
(pids get reused)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from corral.localcluster import netns
from corral.localcluster.containers import remove_all as remove_containers
from corral.localcluster.jobs import kill_jobs
from corral.localcluster.netns import NodeNetwork
from corral.localcluster.sockets import remove_sockets as remove_socket


def _is_ours(pid: int, state_dir: Path) -> bool:
    """The pid still belongs to a daemon of this state dir (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(str(state_dir).encode() in part for part in cmdline)


def stop_by_pidfile(state_dir: Path, name: str, timeout: float = 15.0) -> bool:
    pid_file = state_dir / "run" / f"{name}.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    if _is_ours(pid, state_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _is_ours(pid, state_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_ours(pid, state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


def daemon_names(state_dir: Path) -> Iterator[str]:
    run = state_dir / "run"
    if run.is_dir():
        for pid_file in sorted(run.glob("*.pid")):
            yield pid_file.stem


def stop_state_dir(state_dir: Path) -> list[str]:
    """Stop every daemon this state dir started (nodes first); return their names."""
    state_dir = state_dir.resolve()
    names = list(daemon_names(state_dir))
    ctlds = sorted((n for n in names if n.startswith("ctld")), reverse=True)
    stopped = [n for n in names if n not in ctlds and stop_by_pidfile(state_dir, n)]
    spool = state_dir / "spool"
    if spool.is_dir():  # their jobs ran on under their supervisors: ended with the cluster
        kill_jobs(state_dir, [p.name for p in spool.iterdir()])
    stopped += [n for n in ctlds if stop_by_pidfile(state_dir, n)]
    remove_socket(state_dir)
    if netns.available()[0]:  # containers, namespaces and bridge of a netns cluster
        network = NodeNetwork(state_dir, ())
        stopped += remove_containers(network.tag)
        stopped += network.destroy()
    return stopped
