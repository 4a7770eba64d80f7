"""Where a local cluster's ctld sockets live (what `corral up` uses).

A directory of /tmp (a socket path has at most 107 bytes; a state dir may be long or
private) with a name no one can guess or take first: ``mkdtemp`` makes it with a random
name, failing over to another name if one exists, so no other user can have made it
beforehand. It is the cluster's user's, mode 0755: anyone may reach the sockets, no one
else may remove or replace them (ctld checks the same when it starts: ctld/daemon/sockdir.py).
Its path is kept in ``<state_dir>/run/socket-dir`` for the cluster's life, so a
restarted ctld, `corral down` and the commands' env.sh find it again.

It used to be ``/tmp/corral-<hash of the state dir>``: a name any user could compute and
make first, and ctld then bound its socket in her directory.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

RECORD = Path("run") / "socket-dir"


def _ours(path: str, owner: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == owner
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def socket_dir(state_dir: Path, *, make: bool = True) -> str:
    """The cluster's socket directory: the recorded one while it is still the cluster
    owner's (the state dir's), else a new one (``make``), else ""."""
    record = state_dir / RECORD
    try:
        owner = os.stat(state_dir).st_uid
    except OSError:
        owner = os.geteuid()
    with contextlib.suppress(OSError):
        path = record.read_text().strip()
        if path and _ours(path, owner):
            return path
    if not make:
        return ""
    path = tempfile.mkdtemp(prefix="corral-", dir="/tmp")
    os.chmod(path, 0o755)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(path + "\n")
    return path


def local_socket(state_dir: Path, index: int = 0) -> str:
    """ctld's socket (controller ``index``'s) of the cluster in ``state_dir``."""
    return os.path.join(socket_dir(state_dir), f"ctld{index or ''}.sock")


def remove_sockets(state_dir: Path) -> None:
    """The sockets and their directory go (the cluster stopped)."""
    path = socket_dir(state_dir, make=False)
    if path:
        for stale in Path(path).glob("ctld*.sock"):
            with contextlib.suppress(OSError):
                stale.unlink()
        with contextlib.suppress(OSError):
            os.rmdir(path)
    with contextlib.suppress(OSError):
        (state_dir / RECORD).unlink()
