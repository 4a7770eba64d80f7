"""``make demo`` run as root makes a cluster every user of the machine can use (issue 36).

The README's two commands, the newcomer's path: root runs ``make demo`` in a checkout
whose ``python3`` is one other users cannot run (a Python under a mode-0700 directory,
as pyenv's under /root); then alice, a real second user, sources the demo's env.sh and
submits a job that calls srun, with the venv's own commands, executed as her. The venv
must come from a Python she can run (scripts/shared_python.py picks the system's).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import wait_for
from tests.integration.realusers import Users, as_user, can_make_users, open_dir

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]

REPO = pathlib.Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


def system_python_ok() -> bool:
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


@pytest.fixture
def checkout() -> Iterator[pathlib.Path]:
    """This working tree's files (tracked, as they are now) in a directory every user
    can enter, without its venv or state."""
    if not os.path.exists(SYSTEM_PYTHON) or not system_python_ok():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{SYSTEM_PYTHON} with venv is missing (.ci/run installs it)")
        pytest.skip(f"needs {SYSTEM_PYTHON} 3.11+ with venv")
    base = open_dir("corral-demo-")
    tree = base / "corral"
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for path in [tree, *tree.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    try:
        yield tree
    finally:
        subprocess.run(["make", "down", f"STATE={tree}/.state/demo"], cwd=tree, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def private_python(where: pathlib.Path) -> pathlib.Path:
    """A ``python3`` only root can run (a link in a 0700 directory, as pyenv's shims
    under /root are), to be first on make's PATH."""
    where.mkdir(mode=0o700)
    (where / "python3").symlink_to(pathlib.Path(sys.executable).resolve())
    return where


def test_make_demo_as_root_gives_a_cluster_a_second_user_can_use(
    checkout: pathlib.Path, users: Users, tmp_path: pathlib.Path
) -> None:
    hidden = private_python(tmp_path / "private-bin")
    env = {**os.environ, "PATH": f"{hidden}:{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    state = checkout / ".state" / "demo"
    made = subprocess.run(
        ["make", "demo", f"STATE={state}"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert f"make: building the venv from {SYSTEM_PYTHON}" in made.stderr, made.stderr[-2000:]
    assert os.path.realpath(checkout / ".venv" / "bin" / "python3").startswith("/usr/")

    alice, home = users.alice, users.home(users.alice)
    (home / "hello.sh").write_text("#!/bin/sh\nsrun hostname\n")
    os.chown(home / "hello.sh", alice.pw_uid, alice.pw_gid)

    def as_alice() -> int:
        # what a user types: source the demo's env.sh, then the commands it puts on PATH
        shell = f". {state}/env.sh && sbatch --parsable -o hello.out hello.sh && squeue"
        done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True)
        print(done.stdout)
        print(done.stderr, file=sys.stderr)
        return done.returncode

    code, out, err = as_user(alice, as_alice, cwd=home, env={"PATH": "/usr/bin:/bin"})
    assert code == 0, (out, err)
    job_id = out.split()[0]
    assert job_id.isdigit(), out

    def ran() -> str | None:
        text = (home / "hello.out").read_text() if (home / "hello.out").exists() else ""
        return text if text.strip() else None

    output = wait_for(ran, 60, "alice's job's output")
    assert output.split()[0].startswith("node"), output  # srun ran on a node, as her

    def sacct_as_alice() -> int:
        shell = f". {state}/env.sh && sacct -j {job_id} -X -n -P -o State"
        done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True)
        print(done.stdout, end="")
        return done.returncode

    def completed() -> bool:
        code, said, _ = as_user(alice, sacct_as_alice, cwd=home, env={"PATH": "/usr/bin:/bin"})
        return code == 0 and said.strip() == "COMPLETED"

    wait_for(completed, 60, "alice's job to complete")
