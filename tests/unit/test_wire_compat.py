"""The wire contract stays compatible with the last release (docs/upgrading.md).

``buf breaking`` (compat/buf.yaml's rules: WIRE_JSON, and no service or RPC removed) of
proto/ against the last release's FileDescriptorSet kept in compat/: an older noded or
command, which the window lets a newer ctld serve, must find every field, number, JSON
name and RPC it knows. buf is the npm registry's @bufbuild/buf, installed by .ci/run;
``CORRAL_BUF`` names its binary (else ``buf`` on PATH). Without it the buf tests skip,
and fail under CI=true.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
from google.protobuf import descriptor_pb2

from tests.releases import missing, releases

pytestmark = pytest.mark.timeout(120)

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"
BUF_ENV = "CORRAL_BUF"


def buf() -> str:
    path = os.environ.get(BUF_ENV) or shutil.which("buf") or ""
    if not path or not os.access(path, os.X_OK):
        missing(f"no buf: set {BUF_ENV} (npm install @bufbuild/buf; .ci/run does)")
    return path


def breaking(proto_dir: pathlib.Path, tmp_path: pathlib.Path) -> list[dict[str, str]]:
    """buf's findings for ``proto_dir`` against the last release (empty: compatible)."""
    run = subprocess.run(
        [
            buf(),
            "breaking",
            ".",
            "--against",
            str(releases.last().wire),
            "--config",
            str(releases.BUF_CONFIG),
            "--error-format",
            "json",
        ],
        cwd=proto_dir,  # the module is the proto directory: paths as protoc's -I gives them
        env={**os.environ, "BUF_CACHE_DIR": str(tmp_path / "buf-cache")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if run.returncode not in (0, 100):  # 100: breaking changes found
        raise AssertionError(f"buf failed ({run.returncode}): {run.stderr}")
    return [json.loads(line) for line in run.stdout.splitlines() if line.strip()]


def test_the_proto_is_wire_compatible_with_the_last_release(tmp_path: pathlib.Path) -> None:
    found = breaking(PROTO, tmp_path)
    assert not found, (
        f"proto/ breaks the wire contract of {releases.last().version} (add fields, never "
        "change or remove one; reserve what goes):\n"
        + "\n".join(f"{f['path']}:{f['start_line']}: {f['message']}" for f in found)
    )


# each edit a proto change that a noded or command of the last release would trip on
BREAKS = {
    "a field renumbered": (r"  string version = 5;", "  string version = 55;", "FIELD_NO_DELETE"),
    "a field renamed (its JSON name)": (r"  string os = 6;", "  string os_name = 6;", "FIELD_SAME"),
    "an RPC removed": (r"  rpc Witness\(.*\n", "", "RPC_NO_DELETE"),
    "a field's type changed": (r"  double boot_time = 4;", "  string boot_time = 4;", "TYPE"),
}


@pytest.mark.parametrize("change", sorted(BREAKS))
def test_buf_finds_a_break(change: str, tmp_path: pathlib.Path) -> None:
    pattern, replacement, rule = BREAKS[change]
    copy = tmp_path / "proto"
    shutil.copytree(PROTO, copy)
    path = copy / "corral" / "v1" / "corral.proto"
    text, n = re.subn(pattern, replacement, path.read_text())
    assert n == 1, f"the proto no longer has {pattern!r}: choose another line"
    path.write_text(text)
    found = breaking(copy, tmp_path)
    assert any(rule in f["type"] for f in found), found


def test_each_release_keeps_its_wire_contract() -> None:
    for release in releases.releases():
        assert release.wire.exists(), f"{release.wire}: python scripts/releases.py wire"
        descriptors = descriptor_pb2.FileDescriptorSet.FromString(release.wire.read_bytes())
        assert "corral/v1/corral.proto" in [f.name for f in descriptors.file]


def test_the_kept_wire_contract_is_the_release_commits_proto() -> None:
    last = releases.last()
    if not releases.have_commit(last.commit):
        missing(f"{last.version}'s commit {last.commit} is not in this clone (shallow?)")
    assert last.wire.read_bytes() == releases.descriptor_set(last.commit), (
        f"{last.wire} is not proto/ of {last.commit}: python scripts/releases.py wire"
    )
