"""Fixtures of the integration tests alone."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from corral.localcluster.layout import free_port
from corral.testing.images import BuiltImages, build, missing_tools, runtime_blocker
from tests.conftest import wait_for
from tests.integration.realusers import Users, can_make_users, open_dir, real_users


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    """Three real users (alice, bob, op) for this test module, removed afterwards."""
    if not can_make_users():
        pytest.skip("needs root and useradd")
    with real_users() as made:
        yield made


def skip_or_fail(reason: str) -> None:
    # .ci/run installs the tools and sets the host up: there a missing piece is a failure
    if os.environ.get("CI") == "true":
        pytest.fail(f"containers cannot run here under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def images() -> Iterator[BuiltImages]:
    """The container test images (corral/testing/images.py), world-readable."""
    missing = missing_tools()
    if missing:
        skip_or_fail(f"missing {', '.join(missing)} (apt: crun fuse-overlayfs ...)")
    blocker = runtime_blocker()
    if blocker:
        skip_or_fail(blocker)
    base = open_dir("corral-images-")
    try:
        yield build(str(base / "img"))
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


@contextlib.contextmanager
def local_registry(images: BuiltImages, base: pathlib.Path) -> Iterator[str]:
    """A local registry (docker-registry, plain HTTP, its data under ``base``) holding
    the test image as corral/busybox:1; daemons started meanwhile tell their skopeo it
    is insecure (CONTAINERS_REGISTRIES_CONF, which they inherit). Yields host:port."""
    if shutil.which("docker-registry") is None:
        skip_or_fail("needs docker-registry (the distribution registry)")
    port = free_port()
    config = base / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {base / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address = f"127.0.0.1:{port}"

        def pushed() -> bool:
            return (
                subprocess.run(
                    [
                        "skopeo",
                        "copy",
                        "--insecure-policy",
                        "--dest-tls-verify=false",
                        f"oci:{images.layout}:test",
                        f"docker://{address}/corral/busybox:1",
                    ],
                    capture_output=True,
                ).returncode
                == 0
            )

        wait_for(pushed, 30, "the test image in the local registry")
        conf = base / "registries.conf"
        conf.write_text(f'[[registry]]\nlocation = "{address}"\ninsecure = true\n')
        conf.chmod(0o644)
        old = os.environ.get("CONTAINERS_REGISTRIES_CONF")
        os.environ["CONTAINERS_REGISTRIES_CONF"] = str(conf)  # the daemons inherit it
        try:
            yield address
        finally:
            if old is None:
                os.environ.pop("CONTAINERS_REGISTRIES_CONF", None)
            else:
                os.environ["CONTAINERS_REGISTRIES_CONF"] = old
    finally:
        proc.terminate()
        proc.wait(10)
