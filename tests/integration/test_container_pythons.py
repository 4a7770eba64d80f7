"""Every image form docs/containers.md documents (a squashfs file, an OCI image layout
directory, an OCI archive, a docker archive, a registry reference) through real
daemons on each Python the project runs on: CI's interpreter and the image's
(Debian 12's 3.11.2, older than TarFile.extractall's ``filter``, 3.11.4: issue 36,
where noded failed on a layout directory and the job with it).

The image's interpreter is the host's Debian ``python3.11`` in a venv of its own with
this tree installed (.ci/run makes ``.venv-oldest``; CORRAL_OLDEST_PYTHON names
another): ctld and noded run on it, while the image's own noded has no container
runtime to run them with (docs/image.md). That it is the image's Python is checked
against the image where the image is built."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from corral.localcluster import containers
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.testing.images import BuiltImages
from tests.integration.conftest import local_registry, skip_or_fail
from tests.integration.realusers import Users, command

pytestmark = pytest.mark.timeout(300)

OLDEST_ENV = "CORRAL_OLDEST_PYTHON"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _oldest_python() -> str:
    """The venv of the image's interpreter, or a skip (a failure under CI) saying how."""
    path = os.environ.get(OLDEST_ENV) or str(ROOT / ".venv-oldest" / "bin" / "python")
    if not os.access(path, os.X_OK):
        skip_or_fail(
            f"no venv of the image's Python at {path} (/usr/bin/python3.11 -m venv "
            ".venv-oldest && .venv-oldest/bin/pip install -e .; .ci/run makes it)"
        )
    return path


def _version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


@pytest.fixture(scope="module", params=["ci", "image"])
def node_python(request: pytest.FixtureRequest) -> str:
    return sys.executable if request.param == "ci" else _oldest_python()


@pytest.fixture(scope="module")
def registry(images: BuiltImages, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with local_registry(images, tmp_path_factory.mktemp("registry")) as address:
        yield address


@pytest.fixture(scope="module")
def docker_archive(images: BuiltImages) -> str:
    """The test image as ``docker save`` writes it (skopeo's docker-archive)."""
    path = os.path.join(os.path.dirname(images.archive), "image.docker.tar")
    if not os.path.exists(path):
        subprocess.run(
            [
                "skopeo",
                "copy",
                "--insecure-policy",
                f"oci:{images.layout}:test",
                f"docker-archive:{path}:corral/busybox:1",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        os.chmod(path, 0o644)
    return path


@pytest.fixture(scope="module")
def lab(
    node_python: str,
    users: Users,
    images: BuiltImages,
    registry: str,
    module_cluster_factory: ClusterFactory,
) -> LocalCluster:
    # started after the registry: its noded's skopeo reads the registry's conf
    return module_cluster_factory(nodes=1, gpus_per_node=0, python=node_python)


FORMS = ["squashfs", "oci-layout-dir", "oci-archive", "docker-archive", "registry"]
PROBE = 'head -1 /etc/os-release; echo "image_var=$IMAGE_VAR"'


@pytest.mark.parametrize("form", FORMS)
def test_each_image_form_runs_on_this_python(
    form: str,
    lab: LocalCluster,
    node_python: str,
    users: Users,
    images: BuiltImages,
    registry: str,
    docker_archive: str,
) -> None:
    image = {
        "squashfs": images.squashfs,
        "oci-layout-dir": images.layout,
        "oci-archive": images.archive,
        "docker-archive": docker_archive,
        "registry": f"{registry}#corral/busybox:1",
    }[form]
    # the daemons (ctld, noded) run on the interpreter asked for, not on the test's
    running = {os.path.realpath(f"/proc/{p.pid}/exe") for p in lab.procs.values()}
    assert running == {os.path.realpath(node_python)}, running
    alice = users.alice
    code, out, err = command(
        lab,
        alice,
        "srun",
        "-N1",
        f"--container-image={image}",
        "sh",
        "-c",
        PROBE,
        cwd=users.home(alice),
    )
    assert code == 0, f"{form} on Python {_version(node_python)}: {err}"
    # the image's own files, and its environment as its form keeps it (a squashfs in
    # /etc/environment, the others in the OCI config)
    expected = "from-image" if form == "squashfs" else "from-oci"
    assert out.splitlines() == ['NAME="Corral Test Linux"', f"image_var={expected}"], out


def test_the_oldest_python_is_the_images_and_predates_the_tar_filter() -> None:
    oldest = _oldest_python()
    version = _version(oldest)
    # what made the layout directory fail: no TarFile.extractall(filter=...) before 3.11.4
    assert tuple(int(p) for p in version.split(".")) < (3, 11, 4), version
    name = containers.image()
    ok, why = containers.available()
    if not (ok and containers.image_present(name)):
        if os.environ.get("CI") == "true" and os.environ.get("CORRAL_TEST_IMAGE"):
            pytest.fail(f"CI built the image but cannot run it: {why or 'no ' + name}")
        pytest.skip(f"the image's own Python cannot be asked: {why or 'no ' + name}")
    ulimits = [arg for limit in containers.ulimits() for arg in ("--ulimit", limit)]
    in_image = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            *ulimits,
            "--entrypoint",
            "/opt/corral/bin/python",
            name,
            "-c",
            "import platform; print(platform.python_version())",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    assert in_image == version
