"""The fence guard: kills a node's jobs once nothing has heard from ctld for too long.

noded starts one guard per instance, in a session of its own, so it outlives a noded
that is killed or stopped (its jobs run on under their supervisors). noded touches
``<spool>/contact`` whenever ctld answers it. Once that file is older than
``fence_after_s`` (heartbeat.timeout_s - interval_s: before ctld declares the node
DOWN and requeues its jobs elsewhere), the guard SIGKILLs every process noded's
records claim (the same marker, real uid and start time: records.py; a marker alone
is anyone's to write), so a job never runs in two places, whether noded is cut off by
the network or dead itself, unless ``<spool>/hold`` is fresher than that: noded
touches it while it finds most of the cluster not hearing ctld either (witness.py:
then ctld declares nobody DOWN). A noded dead keeps no hold fresh. The guard exits
when another noded's token is the last of ``<spool>/instances`` (it runs its own
guard), or when its noded is dead and none of the jobs' processes is left.

Its lines carry a UTC timestamp, as noded's own (they share noded's log).

Standard library only, and small: it must start fast and use next to nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from noded import records

CONTACT_FILE = "contact"
HOLD_FILE = "hold"  # noded/witness.py touches it
POLL_S = 0.2


def jobs_processes(spool: Path) -> set[int]:
    """Every process noded's records claim (this noded's jobs and those taken over)."""
    return records.scan(records.load_claims(str(spool)))


def still_current(spool: Path, token: str) -> bool:
    """This guard's noded is the last listed (a newer one runs its own guard)."""
    try:
        tokens = (spool / "instances").read_text().split()
    except OSError:
        return False
    return bool(tokens) and tokens[-1] == token


def age(path: Path) -> float | None:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return None


def alive(pid: int) -> bool:
    try:
        return b"noded" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def say(node: str, event: str, **fields: object) -> None:
    """One log line in noded's format (logfmt, timestamp first)."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    extra = "".join(f" {k}={v}" for k, v in fields.items())
    print(
        f'timestamp={stamp} level=warning event="{event}" component=noded-guard node={node}'
        + extra,
        file=sys.stderr,
        flush=True,
    )


def run(spool: Path, node: str, token: str, fence_after_s: float, noded_pid: int) -> None:
    fenced = False
    while still_current(spool, token):
        if not alive(noded_pid) and not jobs_processes(spool):
            return  # nothing left to guard
        silent = age(spool / CONTACT_FILE) or 0.0
        held = age(spool / HOLD_FILE)
        if silent >= fence_after_s and (held is None or held >= fence_after_s):
            pids = jobs_processes(spool)
            if pids and not fenced:
                say(
                    node,
                    "ctld not heard from: killing the job processes (fenced)",
                    silent_s=f"{silent:.1f}",
                    processes=len(pids),
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
