"""scontrol show hostnames / hostlist / hostlistsorted, as Slurm 22.05 prints them."""

from __future__ import annotations

import pytest

from client.scontrol import main_body
from corral import hostlist


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main_body(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_hostnames_one_a_line_from_the_list_or_slurm_job_nodelist(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "show", "hostnames", "node[01-03],gpu5") == (
        0,
        "node01\nnode02\nnode03\ngpu5\n",
        "",
    )
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    assert run(capsys, "show", "hostnames")[1] == "n1\nn2\n"  # the launch recipe's form
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    monkeypatch.setenv("SLURM_NODELIST", "m[3-4]")  # what a real 22.05 reads
    assert run(capsys, "show", "hostnames")[1] == "m3\nm4\n"
    monkeypatch.delenv("SLURM_NODELIST")
    rc, _, err = run(capsys, "show", "hostnames")
    assert rc == 0 and err == "scontrol: error: host list is empty\n"  # as a real 22.05


def test_hostlist_keeps_order_hostlistsorted_sorts(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "show", "hostlist", "n1,n2,n3")[1] == "n[1-3]\n"
    assert run(capsys, "show", "hostlist", "n3,n1,n2,m1,n4")[1] == "n[3,1-2],m1,n4\n"
    assert run(capsys, "show", "hostlistsorted", "n10,n3,n1,n2")[1] == "n[1-3,10]\n"
    assert run(capsys, "show", "hostlist", "node01,node02,gpu1")[1] == "node[01-02],gpu1\n"


def test_ranged_and_sort_key() -> None:
    assert hostlist.ranged(["a1", "a1"]) == "a[1,1]"
    assert sorted(["n10", "n9", "m2"], key=hostlist.sort_key) == ["m2", "n9", "n10"]
