"""Running a helper command as the job's user (or as noded itself), bounded in time.

What a user names (an image path, a mount source, a --container-save target) is opened
by a process of theirs, never by root: a user cannot import, mount or overwrite what
they could not touch themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass

from noded.containers.errors import container_error
from noded.spawn import Identity

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: bytes
    stderr: str

    def reason(self) -> str:
        """The last line of stderr, for a one-line error."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else f"exit status {self.rc}"


async def run(
    argv: list[str],
    *,
    who: Identity | None,
    timeout_s: float,
    what: str,
    stdout: int = asyncio.subprocess.PIPE,
    env: dict[str, str] | None = None,
) -> Result:
    """Run ``argv`` as ``who`` (None: as noded), stdin /dev/null; ContainerError when it
    cannot start or runs past ``timeout_s`` (it is killed)."""
    as_user = who is not None and who.pw is not None
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=stdout,
            stderr=asyncio.subprocess.PIPE,
            cwd="/",
            env=env if env is not None else {"PATH": SAFE_PATH, "LC_ALL": "C"},
            start_new_session=True,
            user=who.uid if as_user and who else None,
            group=who.gid if as_user and who else None,
            extra_groups=who.groups if as_user and who else None,
        )
    except OSError as exc:
        raise container_error(f"cannot run {argv[0]} to {what}: {exc.strerror}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()
        raise
    return Result(proc.returncode or 0, out or b"", (err or b"").decode(errors="replace"))


async def checked(argv: list[str], *, who: Identity | None, timeout_s: float, what: str) -> bytes:
    """``run`` that raises ContainerError naming ``what`` on a non-zero exit or timeout."""
    try:
        res = await run(argv, who=who, timeout_s=timeout_s, what=what)
    except TimeoutError:
        raise container_error(f"cannot {what}: timed out after {timeout_s:.0f} s") from None
    if res.rc != 0:
        raise container_error(f"cannot {what}: {res.reason()}")
    return res.stdout
