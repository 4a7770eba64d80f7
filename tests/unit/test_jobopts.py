import os

import pytest

from client.jobopts import (
    build_parser,
    directives,
    export_environment,
    merge,
    parse_gres,
    to_spec,
    with_umask,
)
from corral.errors import InvalidOption

SCRIPT = """#!/bin/bash
#SBATCH -J directive-name
#SBATCH --time=1-00:00:00 --gres=gpu:h100:4   # a comment
#SBATCH -p a,b

#SBATCH --mem=8G
echo first command
#SBATCH --ignored=after-the-first-command
"""


def spec_for(argv: list[str], script: str = SCRIPT, environ: dict[str, str] | None = None) -> dict:
    parser = build_parser("sbatch")
    env = environ if environ is not None else {"HOME": "/home/a", "PATH": "/bin"}
    cli, rest = parser.parse(argv)
    assert rest == []
    opts = merge(parser, cli, script, env)
    return to_spec(
        opts,
        script=script,
        argv=[],
        environ=env,
        cwd="/work",
        submit_line="sbatch",
        default_name="job.sh",
    )


def test_directives_stop_at_first_command() -> None:
    assert directives(SCRIPT) == [
        "-J",
        "directive-name",
        "--time=1-00:00:00",
        "--gres=gpu:h100:4",
        "-p",
        "a,b",
        "--mem=8G",
    ]


def test_directives_fill_the_spec_and_flags_win() -> None:
    spec = spec_for(["-J", "flag-name", "--time", "30"])
    assert spec["name"] == "flag-name"
    assert spec["timeLimitS"] == 1800
    assert (spec["gpuType"], spec["gpusPerNode"]) == ("h100", 4)
    assert spec["partitions"] == ["a", "b"]
    assert spec["memPerNodeMb"] == 8192
    assert spec["workDir"] == "/work"
    mask = os.umask(0)
    os.umask(mask)
    assert spec["environment"] == {"HOME": "/home/a", "PATH": "/bin", "SLURM_UMASK": f"0{mask:03o}"}


def test_environment_variables_sit_between_directives_and_flags() -> None:
    spec = spec_for([], environ={"SBATCH_PARTITION": "envpart", "SBATCH_JOB_NAME": "envname"})
    assert spec["partitions"] == ["envpart"] and spec["name"] == "envname"
    spec = spec_for(["-p", "flag"], environ={"SBATCH_PARTITION": "envpart"})
    assert spec["partitions"] == ["flag"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("gpu", ("", 1, 0)),
        ("gpu:2", ("", 2, 0)),
        ("gpu:a100:8", ("a100", 8, 0)),
        ("gpu:h100", ("h100", 1, 0)),
        ("shard:3", ("", 0, 3)),
        ("shard", ("", 0, 1)),
    ],
)
def test_gres(value: str, expected: tuple[str, int, int]) -> None:
    assert parse_gres(value) == expected


@pytest.mark.parametrize(
    "bad", ["tpu:1", "gpu:x:y", "gpu:1:2:3", "", "shard:0", "shard:x", "shard:1:2"]
)
def test_bad_gres(bad: str) -> None:
    from corral.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="gres"):
        parse_gres(bad)


def test_export_forms() -> None:
    env = {"A": "1", "B": "2", "SLURM_X": "s"}
    assert export_environment("ALL", env) == env
    assert export_environment("NONE", env) == {}
    assert export_environment("ALL,C=3", env) == {**env, "C": "3"}
    assert export_environment("A,C=3", env) == {"SLURM_X": "s", "A": "1", "C": "3"}
    with pytest.raises(InvalidOption):
        export_environment("ALL,1BAD=x", env)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-N", "0"], "node count"),
        (["-N", "4-2"], "node count"),
        (["-n", "zero"], "ntasks"),
        (["--dependency", "afterok"], "dependency"),
        (["--array", "1-"], "array"),
        (["--mem", "lots"], "--mem"),
        (["--begin", "someday"], "begin"),
    ],
)
def test_bad_options_are_named(argv: list[str], message: str) -> None:
    with pytest.raises(InvalidOption, match=message):
        spec_for(argv, script="#!/bin/sh\n")


def test_dependency_and_array_are_stored() -> None:
    spec = spec_for(["-d", "afterok:12:13,afterany:14", "-a", "0-15:4%2"], script="#!/bin/sh\n")
    assert spec["dependency"] == "afterok:12:13,afterany:14"
    assert spec["array"] == "0-15:4%2"


def test_requeue_no_requeue_and_expedite() -> None:
    script = "#!/bin/bash\n#SBATCH --no-requeue\ntrue\n"
    spec = spec_for([], script=script)
    assert spec.get("noRequeue") is True and "requeue" not in spec
    spec = spec_for(["--requeue"], script=script)  # the flag overrides the directive
    assert spec["requeue"] is True and "noRequeue" not in spec
    spec = spec_for(["--requeue=expedite"], script="true\n")
    assert spec["requeue"] is True and spec["requeueExpedite"] is True
    spec = spec_for([], script="true\n", environ={"SBATCH_NO_REQUEUE": "1"})
    assert spec["noRequeue"] is True
    with pytest.raises(InvalidOption, match="--requeue"):
        spec_for(["--requeue=sometimes"], script="true\n")


def test_time_zero_means_no_limit() -> None:
    # sbatch(1): "A time limit of zero requests that no time limit be imposed"
    from client.jobopts import build_parser, merge, to_spec

    parser = build_parser("sbatch")
    cli, _ = parser.parse(["-t", "0"])
    spec = to_spec(
        merge(parser, cli, "#!/bin/sh\n", {}),
        script="#!/bin/sh\n",
        argv=[],
        environ={},
        cwd="/tmp",
        submit_line="sbatch -t 0",
        default_name="x",
    )
    assert spec["timeLimitS"] == -1


def test_the_callers_umask_rides_with_the_job_whatever_export_says() -> None:
    """Slurm's SLURM_UMASK: sbatch, srun and salloc record the caller's umask unless one
    is set already (inside a job); noded applies it to the job's files and processes."""
    old = os.umask(0o077)
    try:
        assert with_umask({}, {}) == {"SLURM_UMASK": "0077"}
        assert with_umask({"A": "1"}, {"SLURM_UMASK": "0027"}) == {"A": "1", "SLURM_UMASK": "0027"}
        opts = merge(build_parser("sbatch"), {"export": "NONE"}, "#!/bin/sh\n", {})
        spec = to_spec(
            opts,
            script="#!/bin/sh\n",
            argv=[],
            environ={"HOME": "/h"},
            cwd="/w",
            submit_line="sbatch",
            default_name="x",
        )
        assert spec["environment"] == {"SLURM_UMASK": "0077"}
    finally:
        os.umask(old)
