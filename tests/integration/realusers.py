"""Real second users for the security tests: made with useradd, removed afterwards,
and ways to act as one of them against a LocalCluster.

A command runs in a forked child that became the user (uid, gid, groups from the user
database), so ctld learns the caller from the kernel (SO_PEERCRED), as it would from a
real login. The ``users`` fixture (tests/integration/conftest.py) gives each test module
its own three users: alice, bob and op (named an operator by the clusters that want one).
"""

from __future__ import annotations

import contextlib
import ctypes  # noqa: F401  (libmunge is loaded before a child becomes another user)
import gc
import grp  # (also imported early: commands import it lazily, a child user may not read it)
import json
import os
import pathlib
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import psutil

from corral.api import HttpController as Client
from corral.errors import CorralError
from corral.testing import LocalCluster


def can_make_users() -> bool:
    return os.geteuid() == 0 and shutil.which("useradd") is not None


class Users:
    """alice, bob and op, each with a home under ``base``; alice is also a member of
    ``group`` (a supplementary group of hers in the user database)."""

    def __init__(self, base: pathlib.Path) -> None:
        self.base = base
        self.made: list[str] = []
        self.groups: list[str] = []
        tag = secrets.token_hex(3)
        self.group = self._group(f"crlg{tag}")
        try:
            self.alice = self._add(f"crla{tag}", "-G", self.group.gr_name)
            self.bob = self._add(f"crlb{tag}")
            self.op = self._add(f"crlo{tag}")
        except BaseException:
            self.remove()  # a half-made set is removed too
            raise

    def _group(self, name: str) -> grp.struct_group:
        subprocess.run(["groupadd", name], check=True)
        self.groups.append(name)
        return grp.getgrnam(name)

    def _add(self, name: str, *flags: str) -> pwd.struct_passwd:
        argv = ["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", *flags, name]
        subprocess.run(argv, check=True)
        self.made.append(name)
        pw = pwd.getpwnam(name)
        home = self.base / name
        home.mkdir(mode=0o755)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        return pw

    def home(self, pw: pwd.struct_passwd) -> pathlib.Path:
        return self.base / pw.pw_name

    def remove(self) -> None:
        for name in self.made:
            # userdel refuses a user who still has processes (a job a failed test left):
            # they go first, so no test user outlives its test
            kill_processes_of(name)
            subprocess.run(["userdel", name], check=False, capture_output=True)
            subprocess.run(["groupdel", name], check=False, capture_output=True)
        for name in self.groups:
            subprocess.run(["groupdel", name], check=False, capture_output=True)


def kill_processes_of(name: str) -> None:
    """SIGKILL every process running as user ``name`` (before userdel, which refuses a
    user who still has processes)."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]
        if uids is not None and uid in (uids.real, uids.effective):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def open_dir(prefix: str) -> pathlib.Path:
    """A directory other users can enter (pytest's own tmp dirs are root's, 0700)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def real_users(prefix: str = "corral-users-") -> Iterator[Users]:
    """Three new users with homes under a directory every user can enter; removed after."""
    base = open_dir(prefix)
    made = Users(base)
    try:
        yield made
    finally:
        made.remove()
        shutil.rmtree(base, ignore_errors=True)


def as_user(
    pw: pwd.struct_passwd,
    body: Callable[[], Any],
    *,
    cwd: pathlib.Path | None = None,
    env: dict[str, str] | None = None,
    gid: int | None = None,
) -> tuple[int, str, str]:
    """Run ``body`` in a child that is ``pw`` (uid, gid, groups): (exit, stdout, stderr)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    # what the child inherits stays uncollected there: a gRPC object of an earlier test
    # finalized in a forked child (whose fork handlers gRPC skipped) crashes it
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child: become the user, run, never return
        code = 99
        try:
            os.close(out_r)
            os.close(err_r)
            sys.stdout = open(out_w, "w")  # noqa: SIM115
            sys.stderr = open(err_w, "w")  # noqa: SIM115
            primary = pw.pw_gid if gid is None else gid
            os.setgroups(os.getgrouplist(pw.pw_name, pw.pw_gid))
            os.setgid(primary)
            os.setuid(pw.pw_uid)
            os.chdir(cwd or "/")
            os.environ.clear()
            os.environ.update(env or {})
            os.environ["USER"] = pw.pw_name
            result = body()
            code = result if isinstance(result, int) else 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    gc.unfreeze()
    os.close(out_w)
    os.close(err_w)
    with open(out_r) as fo, open(err_r) as fe:
        out, err = fo.read(), fe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out, err


def command(
    cluster: LocalCluster,
    pw: pwd.struct_passwd,
    *argv: str,
    cwd: pathlib.Path | None = None,
    gid: int | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """A real command (its main, in-process) as user ``pw`` over the cluster's socket
    (``env`` adds to, or overrides, the cluster's CORRAL_ variables)."""
    import importlib

    module = importlib.import_module(f"client.{argv[0]}")

    def body() -> None:
        sys.argv = list(argv)
        module.main()

    base = {k: v for k, v in cluster.env().items() if k.startswith(("CORRAL_", "PATH"))}
    return as_user(pw, body, cwd=cwd, env={**base, **(env or {})}, gid=gid)


def raw(
    cluster: LocalCluster,
    pw: pwd.struct_passwd,
    method: str,
    request: dict[str, Any],
    headers: dict[str, str] | None = None,
    gid: int | None = None,
) -> dict[str, Any]:
    """A hand-made request as ``pw`` on the socket, with any headers it likes to claim."""

    def body() -> None:
        client = Client(socket_path=cluster.socket)
        if headers:  # forged claims ride along with the request
            original = client.headers
            claims = list(headers.items())
            client.headers = lambda m: original(m) + claims  # type: ignore[method-assign]
        try:
            print(json.dumps({"ok": client.call(method, request)}))
        except CorralError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": exc.message}))

    code, out, err = as_user(pw, body, gid=gid)
    assert code == 0, err
    return dict(json.loads(out))


def submit_as(cluster: LocalCluster, users: Users, pw: pwd.struct_passwd, *args: str) -> int:
    code, out, err = command(cluster, pw, "sbatch", "--parsable", *args, cwd=users.home(pw))
    assert code == 0, err
    return int(out.strip().split(";")[0])


def job(cluster: LocalCluster, job_id: int, **flags: Any) -> dict[str, Any]:
    reply = cluster.client().call("GetJobs", {"filter": {"jobIds": [str(job_id)]}, **flags})
    return dict(reply["jobs"][0])
