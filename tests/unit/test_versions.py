"""ctld's compatibility window (ctld/control/versions.py, docs/upgrading.md): ctld M.m serves
nodeds and commands of M.m and M.(m-1) silently, warns about any other of its major or
an older one, and refuses a newer major, naming both versions and the fix."""

from __future__ import annotations

import pathlib

import pytest
import structlog

from corral import __version__
from corral.config import parse_config
from corral.errors import VersionMismatch
from corral.testing.inprocess import ManualClock, make_cluster
from corral.wire import corral_pb2 as pb
from ctld.control import versions
from ctld.control.versions import CommandVersions


@pytest.mark.parametrize(
    ("peer", "own", "verdict"),
    [
        ("1.1.0", "1.1.0", versions.SAME),
        ("1.1.7", "1.1.0", versions.SAME),  # patches of one minor always work together
        ("1.1.0rc1", "1.1.2", versions.SAME),
        ("1.0.0", "1.1.0", versions.WINDOW),
        ("1.0.3", "1.1.0", versions.WINDOW),
        ("1.0.0", "1.2.0", versions.OLDER),
        ("0.1.0", "1.1.0", versions.OLDER),  # before 1.0: no supervisors
        ("0.9.0", "1.0.0", versions.OLDER),  # a new major's .0 serves only itself
        ("1.2.0", "1.1.0", versions.NEWER),
        ("2.0.0", "1.1.0", versions.NEWER_MAJOR),
        ("10.0.0", "9.9.0", versions.NEWER_MAJOR),
        ("", "1.1.0", versions.UNKNOWN),
        ("dev", "1.1.0", versions.UNKNOWN),
    ],
)
def test_where_a_version_stands(peer: str, own: str, verdict: str) -> None:
    assert versions.judge(peer, own) == verdict


def test_the_window_in_words() -> None:
    assert versions.window("1.1.0") == "1.0 and 1.1"
    assert versions.window("2.0.1") == "2.0"


def test_a_noded_of_a_newer_major_is_refused_with_both_versions_and_the_fix() -> None:
    with pytest.raises(VersionMismatch) as err:
        versions.check_node("node07", "2.0.0", "1.1.0")
    message = err.value.message
    assert "noded node07 2.0.0" in message and "ctld 1.1.0" in message
    assert "1.0 and 1.1" in message and "Upgrade ctld first" in message


@pytest.mark.parametrize("version", ["1.1.0", "1.1.4", "1.0.0"])
def test_a_noded_in_the_window_registers_without_a_word(version: str) -> None:
    with structlog.testing.capture_logs() as logs:
        versions.check_node("node01", version, "1.1.0")
    assert logs == []


@pytest.mark.parametrize(
    ("version", "hint"),
    [
        ("0.1.0", "upgrade it"),
        ("1.0.0", "upgrade it"),  # against 1.2: out of the window
        ("1.3.0", "upgrade ctld first"),
        ("", "no version"),
    ],
)
def test_a_noded_outside_the_window_registers_with_a_warning(version: str, hint: str) -> None:
    with structlog.testing.capture_logs() as logs:
        versions.check_node("node01", version, "1.2.0")
    assert len(logs) == 1 and logs[0]["log_level"] == "warning", logs
    assert logs[0]["node"] == "node01" and hint in logs[0]["hint"]
    assert logs[0]["window"] == "1.1 and 1.2"


async def test_ctld_refuses_the_registration_of_a_newer_major_and_keeps_the_node_out(
    tmp_path: pathlib.Path,
) -> None:
    config = parse_config(
        {
            "nodes": [{"names": "n1", "cpus": 2, "memory_mb": 1024}],
            "partitions": [{"name": "p", "nodes": "n1", "default": True}],
        }
    )
    cluster = make_cluster(config, f"sqlite:///{tmp_path}/c.db", clock=ManualClock())
    major = int(__version__.split(".")[0])
    request = pb.RegisterNodeRequest(
        name="n1", address="10.0.0.7:1", resources=pb.NodeResources(cpus=2, memory_mb=1024)
    )
    request.version = f"{major + 1}.0.0"
    with pytest.raises(VersionMismatch):
        await cluster.register_node(request)
    assert not cluster.nodes["n1"].address  # never registered: nothing of it was taken
    request.version = __version__
    node = await cluster.register_node(request)
    assert node.address == "10.0.0.7:1" and node.version == __version__


def test_a_command_of_a_newer_major_is_refused_and_one_that_says_nothing_is_served() -> None:
    judged = CommandVersions("1.1.0")
    with pytest.raises(VersionMismatch) as err:
        judged.check({"x-corral-version": "2.0.0"}, "SubmitJob")
    assert "this command 2.0.0" in err.value.message and "ctld 1.1.0" in err.value.message
    with structlog.testing.capture_logs() as logs:
        judged.check({}, "SubmitJob")  # 1.0 and older send no version
        judged.check({"x-corral-version": "1.0.2"}, "GetJobs")
        judged.check({"x-corral-version": "1.1.0"}, "GetJobs")
    assert logs == []


def test_a_command_outside_the_window_is_warned_about_once_per_version() -> None:
    judged = CommandVersions("1.2.0")
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            judged.check({"x-corral-version": "1.0.0"}, "GetJobs")
            judged.check({"x-corral-version": "1.3.0"}, "GetJobs")
    assert [(e["version"], e["log_level"]) for e in logs] == [
        ("1.0.0", "warning"),
        ("1.3.0", "warning"),
    ]
    for n in range(versions.MAX_WARNED + 10):  # any number of versions: a bounded log
        judged.check({"x-corral-version": f"0.{n}.0"}, "GetJobs")
    assert len(judged.warned) == versions.MAX_WARNED
