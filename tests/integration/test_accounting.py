"""sacctmgr and accounting limits on real daemons, on SQLite and on PostgreSQL: the
commands' output compared with Slurm's text, a GPU limit holding a job with Slurm's
reason until another ends, submit-time refusals, and a restart keeping it all."""

from __future__ import annotations

import pathlib

import pytest

from corral.testing import LocalCluster
from tests.conftest import Commands, wait_for
from tests.integration.realusers import Users, command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BOTH = pytest.mark.parametrize("cluster", ["sqlite", "postgresql"], indirect=True)


def sacctmgr(cmd: Commands, *argv: str, check: bool = True) -> str:
    return cmd("sacctmgr", *argv, check=check).stdout


@BOTH
def test_grp_gres_limit_on_real_daemons(
    cluster: LocalCluster, cmd: Commands, tmp_path: pathlib.Path
) -> None:
    out = sacctmgr(
        cmd,
        "-i",
        "add",
        "account",
        "vision",
        "Description=x",
        "Organization=y",
        "Parent=root",
        "Fairshare=10",
    )
    assert out == (
        " Adding Account(s)\n"
        "  vision\n"
        " Settings\n"
        "  Description     = x\n"
        "  Organization    = y\n"
        " Associations\n"
        "  A = vision     C = corral    \n"
        " Settings\n"
        "  Fairshare     = 10\n"
    )
    sacctmgr(cmd, "-i", "add", "user", "root", "Account=vision", "DefaultAccount=vision")
    out = sacctmgr(cmd, "-i", "modify", "user", "root", "set", "GrpTRES=gres/gpu=4", "MaxJobs=3")
    assert out == (
        " Modified user associations...\n  C = corral     A = vision               U = root     \n"
    )
    assert sacctmgr(cmd, "show", "user") == (
        "      User   Def Acct     Admin \n"
        "---------- ---------- --------- \n"
        "      root     vision      None \n"
    )
    assert sacctmgr(
        cmd, "-P", "-n", "show", "assoc", "format=Account,User,Share,GrpTRES,MaxJobs"
    ) == ("root||1||\nvision||10||\nvision|root|1|gres/gpu=4|3\n")
    gate = tmp_path / "work" / "go"
    wait = f"while [ ! -e {gate} ]; do sleep 0.2; done"
    ids = [
        cmd("sbatch", "--parsable", "--gres=gpu:2", "-t", "10", "--wrap", wait).stdout.strip()
        for _ in range(3)
    ]
    cmd.wait_state(ids[0], "RUNNING")
    cmd.wait_state(ids[1], "RUNNING")
    wait_for(
        lambda: (
            cmd("squeue", "-h", "-j", ids[2], "-o", "%T %r").stdout.strip()
            == "PENDING AssocGrpGRES"
        ),
        20,
        "the third job held by GrpTRES",
    )
    assert cmd("squeue", "-h", "-j", ids[0], "-o", "%a").stdout.strip() == "vision"
    gate.touch()  # the first two end; the third may now start
    cmd.wait_state(ids[0], "COMPLETED")
    cmd.wait_state(ids[2], "RUNNING", "COMPLETED", timeout=30)

    # submit-time limits: refused with Slurm's message and exit code 1
    sacctmgr(cmd, "-i", "modify", "user", "root", "set", "MaxWall=10")
    refused = cmd("sbatch", "-t", "20", "--wrap", "true", check=False)
    assert refused.returncode == 1
    assert refused.stderr == (
        "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
        "(job submit limit, user's size and/or time limits)\n"
    )
    bad = cmd("sacctmgr", "-i", "modify", "user", "root", "set", "GrpTRES=disk=4", check=False)
    assert bad.returncode == 1 and "Bad GrpTRES value: disk=4" in bad.stderr

    # durable: a restarted ctld has the same database
    cluster.stop_process("ctld")
    cluster.start_ctld()
    assert (
        sacctmgr(
            cmd,
            "-P",
            "-n",
            "show",
            "assoc",
            "where",
            "user=root",
            "format=Account,User,GrpTRES,MaxWall",
        )
        == "vision|root|gres/gpu=4|00:10:00\n"
    )


def test_a_user_may_read_but_not_change_it(
    cluster: LocalCluster, cmd: Commands, users: Users
) -> None:
    sacctmgr(cmd, "-i", "add", "account", "vision")
    name = users.alice.pw_name
    sacctmgr(cmd, "-i", "add", "user", name, "Account=vision")
    code, _out, err = command(
        cluster, users.alice, "sacctmgr", "-i", "modify", "user", name, "set", "MaxJobs=9"
    )
    assert code == 1
    assert "Access/permission denied" in err
    code, out, err = command(
        cluster, users.alice, "sacctmgr", "-n", "-P", "show", "user", "format=User,DefaultA"
    )
    assert code == 0, err
    assert out == f"{name}|vision\n"
    # AdminLevel=Operator in the database makes them an operator
    sacctmgr(cmd, "-i", "modify", "user", name, "set", "AdminLevel=Operator")
    code, out, err = command(
        cluster, users.alice, "sacctmgr", "-i", "modify", "user", name, "set", "MaxJobs=9"
    )
    assert code == 0, err
