"""ctld.daemon.sockdir: ctld binds its socket only in a directory no one else can write."""

from __future__ import annotations

import os
import pathlib

import pytest

from corral.errors import ConfigError
from ctld.daemon.sockdir import prepare, unsafe

OTHER = 65534  # nobody


@pytest.fixture
def base(tmp_path: pathlib.Path) -> pathlib.Path:
    tmp_path.chmod(0o755)
    return tmp_path


def test_a_directory_it_makes_or_owns_alone_is_taken(base: pathlib.Path) -> None:
    path = str(base / "run" / "ctld.sock")
    assert prepare(path) == path
    assert (base / "run").is_dir() and unsafe(str(base / "run"), os.geteuid()) == ""
    (base / "run" / "ctld.sock").write_text("stale")
    assert prepare(path) == path and not os.path.exists(path)  # a stale one goes


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_another_users_directory_is_refused(base: pathlib.Path) -> None:
    theirs = base / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(ConfigError) as err:
        prepare(str(theirs / "ctld.sock"))
    assert f"{theirs} belongs to" in str(err.value) and f"uid {OTHER}" in str(err.value)
    # nor through a directory of theirs on the way (they could rename what is inside)
    inner = theirs / "inner"
    inner.mkdir(mode=0o755)
    assert "on the way" in unsafe(str(inner), os.geteuid())
    # nor a link of theirs to a good directory
    good = base / "good"
    good.mkdir(mode=0o755)
    link = base / "link"
    link.symlink_to(good)
    os.lchown(link, OTHER, OTHER)
    assert "symbolic link" in unsafe(str(link), os.geteuid())


def test_a_directory_others_may_write_is_refused(base: pathlib.Path) -> None:
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o775)
    assert "writable by others (mode 0775)" in unsafe(str(shared), os.geteuid())
    # a sticky world-writable directory on the way is fine (others cannot rename ours)
    sticky = base / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "mine").mkdir(mode=0o755)
    assert unsafe(str(sticky / "mine"), os.geteuid()) == ""


def test_an_abstract_socket_has_no_directory_to_check() -> None:
    assert prepare("@corral-test") == "\0corral-test"
