"""corral's releases (compat/releases.toml) and the wire contract each was cut with.

    python scripts/releases.py wire            # write compat/wire-VERSION.binpb of each release
    python scripts/releases.py wire --check    # fail if one is not its commit's proto

A release's wire contract is kept as a FileDescriptorSet (binary, with its imports):
protoc's (grpcio-tools, the version pyproject pins) output for ``proto/`` as it was at
the release's commit, read with ``git show``, so a clone without the commit (shallow)
still checks the current proto against it (tests/unit/test_wire_compat.py runs
``buf breaking``). Cutting a release: docs/upgrading.md.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat"
RELEASES = COMPAT / "releases.toml"
BUF_CONFIG = COMPAT / "buf.yaml"


@dataclass(frozen=True)
class Release:
    version: str
    commit: str

    @property
    def wire(self) -> pathlib.Path:
        """Its wire contract, kept in the repository."""
        return COMPAT / f"wire-{self.version}.binpb"


def releases() -> list[Release]:
    """Every release, oldest first."""
    with RELEASES.open("rb") as fh:
        entries = tomllib.load(fh)["releases"]
    return [Release(str(e["version"]), str(e["commit"])) for e in entries]


def last() -> Release:
    """The release main stays compatible with."""
    return releases()[-1]


def have_commit(commit: str) -> bool:
    """Whether this clone has ``commit`` (a shallow one may not)."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
    )
    return found.returncode == 0


def descriptor_set(commit: str) -> bytes:
    """protoc's FileDescriptorSet of every .proto under proto/ at ``commit``."""
    from grpc_tools import protoc  # dev dependency only

    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit, "proto/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    protos = [name for name in listed if name.endswith(".proto")]
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        for name in protos:
            path = pathlib.Path(tmp, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            shown = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{commit}:{name}"],
                capture_output=True,
                check=True,
            )
            path.write_bytes(shown.stdout)
        out = pathlib.Path(tmp, "wire.binpb")
        args = [
            "protoc",
            f"-I{tmp}/proto",
            f"-I{include}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            *(str(pathlib.Path(name).relative_to("proto")) for name in protos),
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on proto/ at {commit}")
        return out.read_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    wire = sub.add_parser("wire", help="each release's wire contract in compat/")
    wire.add_argument("--check", action="store_true", help="fail if one differs")
    args = parser.parse_args()
    stale = []
    for release in releases():
        if not have_commit(release.commit):
            print(f"{release.version}: commit {release.commit} is not in this clone")
            return 1
        made = descriptor_set(release.commit)
        if args.check:
            if not release.wire.exists() or release.wire.read_bytes() != made:
                stale.append(release.version)
            continue
        release.wire.write_bytes(made)
        print(f"{release.wire.relative_to(ROOT)}: {release.version} ({release.commit[:12]})")
    if stale:
        print(f"stale or missing: {', '.join(stale)} (python scripts/releases.py wire)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
