"""A user with a shell on a compute node against noded, which runs as root (issue 22).

Real second users (useradd, tests/integration/realusers.py) on a real one-node cluster:
what a user leaves in her job's spool directory must never steer root's writes when
the job runs again; a state file she writes must never make a restarted noded kill
a root process; and her umask at submit time is what her job's files get
(docs/security.md, "Files noded writes as root"; docs/environment.md, SLURM_UMASK).
"""

from __future__ import annotations

import importlib
import os
import pathlib
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import wait_for
from tests.integration.realusers import (
    Users,
    as_user,
    can_make_users,
    command,
    open_dir,
    submit_as,
)

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]


@pytest.fixture(scope="module")
def one(module_cluster_factory: ClusterFactory) -> LocalCluster:
    # one node: a requeued job runs again where its first run left its directory
    return module_cluster_factory(nodes=1, gpus_per_node=0)


@pytest.fixture
def victims() -> Iterator[pathlib.Path]:
    """A directory of root's files every user can see (as /etc is)."""
    base = open_dir("corral-victims-")
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def root_file(path: pathlib.Path, mode: int) -> pathlib.Path:
    path.write_text(f"{path.name} of root's\n")
    path.chmod(mode)
    return path


def untouched(path: pathlib.Path, mode: int) -> bool:
    st = path.lstat()
    return (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, mode) and path.read_text() == (
        f"{path.name} of root's\n"
    )


def job_dir(cluster: LocalCluster, job_id: int) -> pathlib.Path:
    return cluster.state_dir / "spool" / cluster.node_names[0] / f"job{job_id:08d}"


def plant(pw: pwd.struct_passwd, links: dict[pathlib.Path, tuple[str, pathlib.Path]]) -> str:
    """As the user: make each link she can (kind "sym" or "hard"); says what she made."""

    def body() -> None:
        for at, (kind, target) in links.items():
            try:
                (os.symlink if kind == "sym" else os.link)(target, at)
                print(f"made {at.name}")
            except OSError as exc:
                print(f"refused {at.name}: {exc.strerror}")

    code, out, err = as_user(pw, body)
    assert code == 0, err
    return out


def test_links_left_in_a_jobs_spool_directory_never_steer_root(
    one: LocalCluster, users: Users, victims: pathlib.Path
) -> None:
    """Her job's spool directory outlives its first run; she links its progress file
    to a root-only file, noded's state file's temporary to another, and its script (a
    hard link: protected_hardlinks lets her link a file she may write) to a third. The
    job runs again on the node: none of the three is written, chowned or read."""
    alice, home = users.alice, users.home(users.alice)
    secret = root_file(victims / "secret", 0o600)
    config = root_file(victims / "config", 0o600)
    shared = root_file(victims / "shared", 0o666)
    script = (
        "#!/bin/sh\n"
        'echo "run $SLURM_RESTART_COUNT"\n'
        # something of hers left in the directory keeps it past the run (before the fix)
        'touch "$(dirname "$0")/keep" 2>/dev/null\n'
        '[ "$SLURM_RESTART_COUNT" = 0 ] && sleep 120\n'
        "exit 0\n"
    )
    (home / "again.sh").write_text(script)
    job_id = submit_as(one, users, alice, "-o", "again.out", str(home / "again.sh"))
    out = home / "again.out"
    wait_for(lambda: out.exists() and "run 0" in out.read_text(), 60, "the first run")
    code, _, err = command(one, alice, "scontrol", "requeuehold", str(job_id), cwd=home)
    assert code == 0, err
    one.wait_state(job_id, "PENDING")
    d = job_dir(one, job_id)
    wait_for(lambda: not os.path.lexists(d / "script"), 30, "the first run's clean-up")
    said = plant(
        alice,
        {
            d / "progress": ("sym", secret),
            d / "state.json.tmp": ("sym", config),
            d / "script": ("hard", shared),
        },
    )
    code, _, err = command(one, alice, "scontrol", "release", str(job_id), cwd=home)
    assert code == 0, err
    ended = one.wait_state(job_id, "COMPLETED", "FAILED")
    followed = [
        how
        for path, m, how in (
            (secret, 0o600, "progress -> a root-only file"),
            (config, 0o600, "state.json.tmp -> a root file"),
            (shared, 0o666, "script, a hard link to a root file"),
        )
        if not untouched(path, m)
    ]
    assert followed == [], said
    assert ended["state"] == "JOB_STATE_COMPLETED" and "run 1" in out.read_text()
    assert not d.exists()  # and the job's directory is gone once it ended


def test_a_state_file_a_user_writes_never_kills_a_root_process(
    one: LocalCluster, users: Users
) -> None:
    """She writes a job state file naming a root process where noded kept them (in her
    job's directory before the fix; its own root-only one now); noded restarts after a
    crash and settles what it finds: the root process lives on."""
    alice = users.alice
    job_id = submit_as(one, users, alice, "--wrap", 'touch "$(dirname "$0")/keep"; true')
    one.wait_state(job_id, "COMPLETED")
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        forged = (
            f'{{"job_id": {job_id}, "restart_count": 0, "marker": "x", "uid": 0, '
            f'"root_pid": {victim.pid}, "root_created": 0.0}}'
        )
        spool = one.state_dir / "spool" / one.node_names[0]
        places = [
            job_dir(one, job_id) / "state.json",  # a noded before the fix read this
            spool / "state" / f"job{job_id:08d}.json",
        ]

        def body() -> None:
            for place in places:
                try:
                    place.write_text(forged)
                    print(f"wrote {place}")
                except OSError as exc:
                    print(f"refused {place}: {exc.strerror}")

        code, said, err = as_user(alice, body)
        assert code == 0, err
        one.kill_process(one.node_names[0])  # a crash: the next noded recovers
        one.start_node(0)
        one.wait_nodes_up()
        assert victim.poll() is None, f"a root process was killed ({said})"
    finally:
        victim.kill()
        victim.wait(10)


def umasked(
    cluster: LocalCluster, pw: pwd.struct_passwd, mask: int, *argv: str, cwd: pathlib.Path
) -> tuple[int, str, str]:
    """A command as ``pw`` whose umask is ``mask`` (a shell after `umask 077`)."""
    module = importlib.import_module(f"client.{argv[0]}")

    def body() -> None:
        os.umask(mask)
        sys.argv = list(argv)
        module.main()

    env = {k: v for k, v in cluster.env().items() if k.startswith(("CORRAL_", "PATH"))}
    return as_user(pw, body, cwd=cwd, env=env)


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_submitters_umask_reaches_the_batch_jobs_files(one: LocalCluster, users: Users) -> None:
    bob, home = users.bob, users.home(users.bob)
    argv = ("sbatch", "--parsable", "-o", "masked.out", "-e", "masked.err")
    wrap = "umask; touch made-by-job; echo oops >&2"
    code, out, err = umasked(one, bob, 0o077, *argv, "--wrap", wrap, cwd=home)
    assert code == 0, err
    one.wait_state(int(out.strip()), "COMPLETED")
    assert (home / "masked.out").read_text().split() == ["0077"]
    for name in ("masked.out", "masked.err", "made-by-job"):
        assert mode(home / name) == 0o600, name
    # a mask set by hand wins, as in Slurm (SLURM_UMASK already in the environment)
    code, out, err = umasked(
        one, bob, 0o077, "sbatch", "--parsable", "-o", "loose.out", "--wrap", "umask",
        "--export=ALL,SLURM_UMASK=0002", cwd=home,
    )  # fmt: skip
    assert code == 0, err
    one.wait_state(int(out.strip()), "COMPLETED")
    assert (home / "loose.out").read_text().split() == ["0002"]


def test_the_submitters_umask_reaches_srun_tasks(one: LocalCluster, users: Users) -> None:
    bob, home = users.bob, users.home(users.bob)
    code, out, err = umasked(
        one, bob, 0o027, "srun", "-N1", "sh", "-c", "umask; touch made-by-step", cwd=home
    )
    assert code == 0, err
    assert out.split() == ["0027"]
    assert mode(home / "made-by-step") == 0o640
