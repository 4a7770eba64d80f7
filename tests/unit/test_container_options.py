"""sbatch's, srun's and salloc's --container-* options (client/containeropts.py): the
JobSpec and StepSpec containers they make, Pyxis's input variables and precedence,
the --X/--no-X pairs, and Pyxis's warning for options without an image."""

from __future__ import annotations

from typing import Any

import pytest

from client.containeropts import step_container
from client.jobopts import build_parser, ignored_warnings, merge, to_spec
from corral.errors import InvalidOption


def spec_of(argv: list[str], script: str = "", environ: dict[str, str] | None = None) -> Any:
    parser = build_parser("sbatch")
    cli, _ = parser.parse(argv)
    opts = merge(parser, cli, script, environ or {})
    return to_spec(
        opts,
        script=script or "#!/bin/sh\n",
        argv=[],
        environ={},
        cwd="/home/alice/run",
        submit_line="sbatch",
        default_name="job",
    )


def test_every_flag_lands_in_the_jobs_container() -> None:
    spec = spec_of(
        [
            "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
            "--container-mounts=/data:/data:ro+rprivate,./ckpt:/ckpt",
            "--container-workdir=/workspace",
            "--container-name=train",
            "--container-save=out.sqsh",
            "--no-container-mount-home",
            "--container-remap-root",
            "--container-writable",
            "--container-env=NCCL_DEBUG,PATH",
            "--no-container-entrypoint",
        ]
    )
    assert spec["container"] == {
        "image": "nvcr.io#nvidia/pytorch:24.05-py3",
        "mounts": ["/data:/data:ro+rprivate", "/home/alice/run/ckpt:/ckpt"],
        "workdir": "/workspace",
        "name": "train",
        "save": "/home/alice/run/out.sqsh",
        "noMountHome": True,
        "remapRoot": True,
        "writable": True,
        "env": ["NCCL_DEBUG", "PATH"],
        "entrypoint": False,
    }


def test_no_container_without_the_options() -> None:
    assert "container" not in spec_of([])


def test_relative_paths_follow_chdir() -> None:
    spec = spec_of(["--chdir=/scratch/x", "--container-image=./img.sqsh"])
    assert spec["container"]["image"] == "/scratch/x/img.sqsh"


def test_options_without_an_image_or_name_are_dropped_with_pyxis_warning() -> None:
    parser = build_parser("sbatch")
    opts = merge(parser, {"container_mounts": "/a:/a", "no_container_mount_home": True}, "", {})
    assert "container" not in spec_of(["--container-mounts=/a:/a"])
    (warning,) = ignored_warnings("sbatch", opts)
    assert "ignoring --container-mounts, --no-container-mount-home because neither" in warning


def test_sbatch_directives_and_pyxis_variables_with_slurms_precedence() -> None:
    script = "#!/bin/sh\n#SBATCH --container-image=ubuntu:22.04\n#SBATCH --container-readonly\n"
    assert spec_of([], script)["container"] == {"image": "ubuntu:22.04", "writable": False}
    env = {"PYXIS_CONTAINER_IMAGE": "ubuntu:24.04", "PYXIS_CONTAINER_WRITABLE": "1"}
    # the variables beat the directives (--container-readonly gives way to WRITABLE=1)
    assert spec_of([], script, env)["container"] == {"image": "ubuntu:24.04", "writable": True}
    # the command line beats both
    got = spec_of(["--container-image=debian", "--container-readonly"], script, env)
    assert got["container"] == {"image": "debian", "writable": False}


def test_pyxis_boolean_variables() -> None:
    env = {
        "PYXIS_CONTAINER_IMAGE": "ubuntu",
        "PYXIS_CONTAINER_MOUNT_HOME": "0",
        "PYXIS_CONTAINER_REMAP_ROOT": "yes",
        "PYXIS_CONTAINER_ENTRYPOINT": "maybe",  # not a boolean: ignored, as Pyxis
        "PYXIS_CONTAINER_MOUNTS": "/a:/b",
        "PYXIS_CONTAINER_ENV": "X",
    }
    got = spec_of([], "", env)["container"]
    assert got == {
        "image": "ubuntu",
        "noMountHome": True,
        "remapRoot": True,
        "mounts": ["/a:/b"],
        "env": ["X"],
    }


def test_both_flags_of_a_pair_in_one_place_is_pyxis_error() -> None:
    with pytest.raises(InvalidOption, match="both --container-writable and --container-readonly"):
        spec_of(["--container-image=u", "--container-writable", "--container-readonly"])
    script = "#!/bin/sh\n#SBATCH --container-remap-root\n#SBATCH --no-container-remap-root\n"
    with pytest.raises(InvalidOption, match="both --container-remap-root"):
        spec_of(["--container-image=u"], script)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--container-image=Ubuntu"], "registry reference"),
        (["--container-image=u", "--container-mounts=/a:rel"], "target must be an absolute"),
        (["--container-image=u", "--container-name=../x"], "letters, digits"),
        (["--container-image=u", "--container-env=A-B"], "invalid variable name"),
        (["--container-image=u", "--container-workdir=rel"], "absolute path"),
    ],
)
def test_bad_values_are_refused_before_submitting(argv: list[str], words: str) -> None:
    with pytest.raises(InvalidOption, match=words):
        spec_of(argv)


def test_sruns_step_container() -> None:
    cli = {"container_image": "./i.sqsh", "container_mounts": "/a:/a", "label": True}
    assert step_container(cli, {}, "/w") == {"image": "/w/i.sqsh", "mounts": ["/a:/a"]}
    env = {"PYXIS_CONTAINER_IMAGE": "ubuntu", "PYXIS_CONTAINER_REMAP_ROOT": "1"}
    assert step_container({"no_container_remap_root": True}, env, "/w") == {
        "image": "ubuntu",
        "remapRoot": False,
    }
    assert step_container({}, {}, "/w") is None
    assert step_container({"container_name": "keep"}, {}, "/w") == {"name": "keep"}
