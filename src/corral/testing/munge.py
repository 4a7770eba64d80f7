"""A munged of one's own (temporary key, socket, pid, log and seed files), for tests and
bench/: never the host's /run/munge. The caller stops it (``stop``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

MUNGED = shutil.which("munged") or "/usr/sbin/munged"


def available() -> bool:
    return os.path.exists(MUNGED)


class Munged:
    def __init__(self, base: Path | None = None, key: bytes | None = None) -> None:
        if not available():
            raise RuntimeError("munged is not installed (apt-get install munge)")
        self.owns_base = base is None
        self.base = base or Path(tempfile.mkdtemp(prefix="corral-munge-"))
        self.base.chmod(0o711)  # munged wants its socket's directory reachable by all
        self.socket = str(self.base / "munge.socket")
        key_file = self.base / "munge.key"
        key_file.write_bytes(key or os.urandom(1024))
        key_file.chmod(0o400)
        self.pid_file = self.base / "munged.pid"
        subprocess.run(
            [
                MUNGED,
                f"--key-file={key_file}",
                f"--socket={self.socket}",
                f"--pid-file={self.pid_file}",
                f"--log-file={self.base / 'munged.log'}",
                f"--seed-file={self.base / 'munged.seed'}",
            ],
            check=True,
            timeout=30,
        )
        deadline = time.monotonic() + 10
        while not (os.path.exists(self.socket) and self.pid_file.exists()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"munged did not start: {self.base / 'munged.log'}")
            time.sleep(0.02)

    def stop(self) -> None:
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pid = 0
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.02)
            else:
                os.kill(pid, signal.SIGKILL)
        if self.owns_base:
            shutil.rmtree(self.base, ignore_errors=True)
