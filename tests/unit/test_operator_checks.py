"""The pure parts of the operator's path checks (issue 22): noded's loopback address,
corral up's reach of its Python, the ignored options' warnings, the credential a
command on a login node sends. The daemons' side: tests/integration/test_operator_path.py."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest

from client import corral_cmd
from client.jobopts import ignored_warnings
from corral import rest
from noded.address import advertised_host, is_loopback, loopback_problem


def test_loopback_is_a_problem_only_beside_a_controller_elsewhere() -> None:
    assert is_loopback("127.0.1.1") and is_loopback("localhost")
    assert not is_loopback("192.0.2.10") and not is_loopback("no-such-host.invalid")
    assert loopback_problem("127.0.0.2", ["127.0.0.1"]) == ""  # a one-machine cluster
    assert loopback_problem("192.0.2.5", ["192.0.2.10"]) == ""
    why = loopback_problem("127.0.1.1", ["127.0.0.1", "192.0.2.10"])
    assert "127.0.1.1 (127.0.1.1), a loopback address" in why and "192.0.2.10" in why


def test_the_advertised_host_and_whether_it_was_given() -> None:
    assert advertised_host("10.0.0.5", "", "") == ("10.0.0.5", True)
    assert advertised_host("", "gpu01", "0.0.0.0") == ("gpu01", True)
    assert advertised_host("", "", "10.0.0.7") == ("10.0.0.7", True)
    host, given = advertised_host("", "", "0.0.0.0")
    assert host and not given  # the FQDN: a guess


def test_corral_up_finds_the_directory_others_cannot_enter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = pathlib.Path(tempfile.mkdtemp(prefix="corral-reach-"))  # pytest's tmp is 0700
    try:
        base.chmod(0o755)
        shut = base / "shut"
        (shut / "bin").mkdir(parents=True)
        python = shut / "bin" / "python"
        python.write_text("")
        python.chmod(0o755)
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        monkeypatch.setattr("sys.executable", str(python))
        monkeypatch.setattr("sys.prefix", str(shut))
        assert corral_cmd.unreachable_by_others() == ""
        shut.chmod(0o700)
        assert f"{shut} is mode 0700" in corral_cmd.unreachable_by_others()
        monkeypatch.setattr(os, "geteuid", lambda: 1000)  # jobs run as this user only
        assert corral_cmd.unreachable_by_others() == ""
    finally:
        shutil.rmtree(base)


def test_each_ignored_option_warns_once() -> None:
    # mail is sent (or refused by ctld without [mail]): no warning that it is ignored
    assert ignored_warnings("sbatch", {"mail_type": "END", "mail_user": "me"}) == []
    assert ignored_warnings("salloc", {"constraint": "a100"})[0].startswith(
        "salloc: warning: --constraint is ignored"
    )
    assert ignored_warnings("sbatch", {"time": "10"}) == []


def test_a_login_node_without_config_sends_munge_when_munged_is_there(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in (rest.AUTH_ENV, rest.TOKEN_ENV, rest.TOKEN_FILE_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CORRAL_CONF", str(tmp_path / "none.toml"))
    monkeypatch.setenv(rest.ADDRESS_ENV, "10.0.0.1:6919")
    sock = tmp_path / "munge.socket"
    monkeypatch.setenv(rest.MUNGE_SOCKET_ENV, str(sock))
    assert rest._auth_choice()[0] == ""  # no munged: nothing, and why
    assert rest.credential_headers("GetJobs") == []
    assert f"no munged at {sock}" in rest.unsent_credential()
    sock.touch()
    assert rest._auth_choice() == ("munge", str(sock), "")
    conf = tmp_path / "corral.toml"
    conf.write_text('[auth]\ntype = "munge"\nmunge_socket = "/x/munge.sock"\n')
    monkeypatch.setenv("CORRAL_CONF", str(conf))
    monkeypatch.delenv(rest.MUNGE_SOCKET_ENV)
    assert rest._auth_choice()[:2] == ("munge", "/x/munge.sock")  # the config, read anyway
