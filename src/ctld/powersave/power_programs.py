"""Running the power programs (suspend, resume, resume-fail) as Slurm does: one argument,
the nodes as a Slurm hostlist; as the configured user; killed past a timeout; their output
and exit status logged. What a failure means for the nodes is ctld/powersave/power.py's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
from dataclasses import dataclass

import structlog

from corral import hostlist

log = structlog.get_logger("ctld")

OUTPUT_LIMIT = 64 * 1024  # what is kept of a program's output for the log


@dataclass(frozen=True)
class ProgramResult:
    ok: bool
    detail: str  # "exit 3: <its last line>", "timed out after 60s", "cannot run: ..."
    output: str = ""


def _as_user(user: str) -> dict[str, object]:
    """Popen's user and group for ``user`` ("" or ctld's own: nothing to switch)."""
    if not user:
        return {}
    entry = pwd.getpwnam(user)
    if entry.pw_uid == os.geteuid():
        return {}
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


async def run_program(
    kind: str, program: str, nodes: list[str], *, user: str, timeout_s: float
) -> ProgramResult:
    """Run ``program`` with the hostlist of ``nodes``; ``kind`` names it in the log."""
    names = hostlist.compress(sorted(nodes, key=hostlist.sort_key))
    env = dict(os.environ)
    env.pop("CORRAL_CONF_SECRET", None)
    try:
        proc = await asyncio.create_subprocess_exec(
            program,
            names,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its whole group is killed at the timeout
            env=env,
            **_as_user(user),  # type: ignore[arg-type]
        )
    except (OSError, KeyError, ValueError) as exc:
        detail = f"cannot run {program}: {exc}"
        log.error(f"{kind} program failed", program=program, nodes=names, error=detail)
        return ProgramResult(False, detail)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        detail = f"timed out after {timeout_s:g}s"
        log.error(f"{kind} program failed", program=program, nodes=names, error=detail)
        return ProgramResult(False, detail)
    text = out[-OUTPUT_LIMIT:].decode("utf-8", "replace")
    code = proc.returncode
    if code == 0:
        log.info(f"{kind} program done", program=program, nodes=names, output=text.strip())
        return ProgramResult(True, "exit 0", text)
    last = text.strip().splitlines()[-1][:120] if text.strip() else ""
    detail = f"exit {code}" if code is not None and code >= 0 else f"signal {-(code or 0)}"
    if last:
        detail += f": {last}"
    log.error(f"{kind} program failed", program=program, nodes=names, error=detail, output=text)
    return ProgramResult(False, detail, text)
