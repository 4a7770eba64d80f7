"""The fence guard: kills a node's jobs once nothing has heard from ctld for too long.

noded starts one guard per instance, in a session of its own, so it outlives a noded
that is killed. noded touches ``<spool>/contact`` whenever ctld answers it. Once that
file is older than ``fence_after_s`` (heartbeat.timeout_s - interval_s: before ctld
declares the node DOWN and requeues its jobs elsewhere), the guard SIGKILLs every
process carrying this noded instance's job marker, so a job never runs in two places,
whether noded is cut off by the network or dead itself. It exits when its instance
token leaves ``<spool>/instances`` (noded stopped cleanly, or a new noded took over),
or when its noded is dead and none of its jobs' processes is left.

Standard library only, and small: it must start fast and use next to nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

MARKER = b"CORRAL_JOB_MARKER="
CONTACT_FILE = "contact"
POLL_S = 0.2


def marked(node: str, token: str) -> set[int]:
    """Processes whose job marker is ``node:<job>:token``."""
    found: set[int] = set()
    prefix, suffix = f"{node}:".encode(), f":{token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        for var in env.split(b"\0"):
            if var.startswith(MARKER):
                value = var[len(MARKER) :]
                if value.startswith(prefix) and value.endswith(suffix):
                    found.add(int(entry.name))
                break
    return found


def still_listed(spool: Path, token: str) -> bool:
    try:
        return token in (spool / "instances").read_text().split()
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        return b"noded" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def stamp() -> str:
    """UTC, as noded's own log lines: when the guard fenced, beside what noded said."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def run(spool: Path, node: str, token: str, fence_after_s: float, noded_pid: int) -> None:
    contact = spool / CONTACT_FILE
    fenced = False
    while still_listed(spool, token):
        if not alive(noded_pid) and not marked(node, token):
            return  # nothing left to guard
        try:
            silent = time.time() - contact.stat().st_mtime
        except OSError:
            silent = 0.0
        if silent >= fence_after_s:
            pids = marked(node, token)
            if pids and not fenced:
                print(
                    f"{stamp()} noded guard {node}: ctld not heard for {silent:.1f}s: "
                    f"killing {len(pids)} job processes",
                    file=sys.stderr,
                    flush=True,
                )
            fenced = fenced or bool(pids)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        else:
            fenced = False
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(
            "usage: python -m noded.guard SPOOL NODE TOKEN FENCE_AFTER_S NODED_PID",
            file=sys.stderr,
        )
        return 2
    spool, node, token, after, pid = argv
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for noded is not ours
    run(Path(spool), node, token, float(after), int(pid))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
