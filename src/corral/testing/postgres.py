"""PostgreSQL for tests: a schema of its own per test on the server the environment
names (``pg_schema``), or a private server (``TempPostgres``: initdb into a temp dir,
run as an unprivileged user, stopped and started again at will; the store-trouble
tests stop it under load)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# A PostgreSQL server the store tests may use: each test gets a schema of its own in it.
# .ci/run starts one and sets this; in CI (CI=true) a missing one is an error, not a skip.
PG_URL_ENV = "CORRAL_TEST_PG_URL"


def pg_admin_url() -> str | None:
    import pytest

    url = os.environ.get(PG_URL_ENV, "")
    if url:
        return url
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {PG_URL_ENV} is not set: the PostgreSQL store tests must run")
    return None


def pg_url_or_skip() -> str:
    import pytest

    admin = pg_admin_url()
    if admin is None:
        pytest.skip(f"no PostgreSQL: set {PG_URL_ENV} (.ci/run does)")
    return admin


def _psycopg(url: str) -> str:
    """psycopg 3, as ctld's store means by postgres:// (ctld/storage/store.py's normalize_url;
    corral does not import ctld)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


@contextmanager
def pg_schema(admin: str) -> Iterator[str]:
    """A store URL on a fresh schema of the server of ``admin``, dropped afterwards."""
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(_psycopg(admin))
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in admin else "?"
    try:
        yield f"{admin}{sep}options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


def pg_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).resolve().parent if pg_ctl else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class TempPostgres:
    bindir: Path
    root: Path
    port: int
    user: str  # the OS user the server runs as (never root: postgres refuses)

    @property
    def url(self) -> str:
        return f"postgresql://corral@127.0.0.1:{self.port}/postgres"

    @classmethod
    def start(cls, _hint: Path | None = None) -> TempPostgres | None:
        bindir = pg_bindir()
        if bindir is None:
            return None
        user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        root = Path(tempfile.mkdtemp(prefix="corral-pg-"))
        if os.geteuid() == 0:
            pw = pwd.getpwnam(user)
            os.chown(root, pw.pw_uid, pw.pw_gid)
        pg = cls(bindir, root, _free_port(), user)
        pg._run(
            str(bindir / "initdb"),
            "-D",
            str(root / "data"),
            "-A",
            "trust",
            "-U",
            "corral",
            "--no-sync",
        )
        pg.start_again()
        return pg

    def _run(self, *argv: str) -> None:
        cmd = list(argv)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start_again(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=on"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.root / "data"),
            "-l",
            str(self.root / "log"),
            "-o",
            opts,
            "-w",
            "start",
        )

    def stop(self) -> None:
        if (self.root / "data" / "postmaster.pid").exists():
            self._run(
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.root / "data"),
                "-m",
                "fast",
                "-w",
                "stop",
            )

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
