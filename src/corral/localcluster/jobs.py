"""The processes of a local cluster's jobs, found and killed when the cluster (or one
of its nodes) goes: a stopped noded leaves its jobs running under their supervisors
for the next noded to take over (noded/supervise.py), so taking a cluster down ends
them itself.

Found in one pass over /proc: each node's job supervisors (their socket is under the
node's spool), and every process whose job marker (``node:job:token``) names the node
and a token its spool's ``instances`` lists.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

MARKER = b"CORRAL_JOB_MARKER="


def job_pids(state_dir: Path, nodes: Iterable[str]) -> set[int]:
    """The job processes and supervisors of ``nodes`` of the cluster at ``state_dir``."""
    spool_root = state_dir / "spool"
    wanted: dict[str, set[str]] = {}
    prefixes: list[bytes] = []
    for name in nodes:
        spool = spool_root / name
        if not spool.is_dir():
            continue  # a simulated node: nothing of its runs here
        prefixes.append(str(spool).encode() + b"/")
        with contextlib.suppress(OSError):
            wanted[name] = set((spool / "instances").read_text().split())
    if not prefixes:
        return set()
    found: set[int] = set()
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"noded.supervise" in argv and any(a.startswith(p) for a in argv for p in prefixes):
                found.add(int(entry.name))
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for var in env:
            if var.startswith(MARKER):
                node, _, token = var[len(MARKER) :].decode(errors="replace").rpartition(":")
                node = node.rpartition(":")[0]
                if token in wanted.get(node, ()):
                    found.add(int(entry.name))
                break
    return found


def kill_jobs(state_dir: Path, nodes: Iterable[str], timeout: float = 10.0) -> None:
    """SIGKILL them until none is left (bounded)."""
    nodes = list(nodes)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = job_pids(state_dir, nodes)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
