"""A release of corral built from its git commit, in a venv of its own, for the upgrade
tests: ``git archive COMMIT`` unpacked, ``python -m venv``, ``pip install`` of it (its
dependencies from PyPI, through pip's cache), then ``corral launchers`` as ``make venv``
runs it. Built once per commit and kept in ``$CORRAL_UPGRADE_CACHE`` (default
``~/.cache/corral-upgrade``), under a lock, so concurrent test runs build it once.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import shutil
import subprocess
import sys
from dataclasses import dataclass

from tests.releases import missing, releases

CACHE_ENV = "CORRAL_UPGRADE_CACHE"
BUILD_TIMEOUT_S = 420  # a venv from pip's cache takes ~20 s; from PyPI, a minute or two


@dataclass(frozen=True)
class Installed:
    version: str
    commit: str
    venv: pathlib.Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def bin(self) -> pathlib.Path:
        return self.venv / "bin"


def cache_dir() -> pathlib.Path:
    default = pathlib.Path.home() / ".cache" / "corral-upgrade"
    return pathlib.Path(os.environ.get(CACHE_ENV) or default)


def last_release() -> Installed:
    """The last release of compat/releases.toml, installed (built the first time)."""
    release = releases.last()
    if not releases.have_commit(release.commit):
        missing(
            f"release {release.version}'s commit {release.commit} is not in this clone "
            "(a shallow clone? fetch the history: git fetch --unshallow)"
        )
    home = cache_dir() / release.commit
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building it: wait for it
        if not (home / ".ready").exists():
            _build(release.commit, home)
    return Installed(release.version, release.commit, home / "venv")


def _build(commit: str, home: pathlib.Path) -> None:
    for part in ("src", "venv"):
        shutil.rmtree(home / part, ignore_errors=True)
    source = home / "src"
    source.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(releases.ROOT), "archive", commit],
        capture_output=True,
        check=True,
        timeout=60,
    )
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True, timeout=60)
    venv = home / "venv"
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [
            str(venv / "bin" / "pip"),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(source),
        ],
        [str(venv / "bin" / "corral"), "launchers"],
    ]
    log = home / "build.log"
    with log.open("w") as out:
        for argv in steps:
            try:
                done = subprocess.run(
                    argv, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{argv[:2]} took over {BUILD_TIMEOUT_S} s; {log}") from None
            if done.returncode != 0:
                raise AssertionError(f"{argv} failed: {log.read_text()[-3000:]}")
    (home / ".ready").write_text(commit + "\n")
