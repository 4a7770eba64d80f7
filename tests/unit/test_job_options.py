"""What a new sbatch flag touches (docs/architecture.md): one ``JobOption`` entry in
client/jobopts.py is its parsing, --help line, SBATCH_* variable, JobSpec fields and
docs/cli.md row; the proto field is the second file; a scheduling flag's JobRequest
field, named as its JobSpec field, is copied without a line in ctld. These tests hold
the table, the proto, the page and the request together."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
from typing import Any

import pytest

from client.containeropts import DESTS as CONTAINER_DESTS
from client.jobopts import JOB_OPTIONS, SBATCH_ENV, build_parser, merge, to_spec
from client.options import FLAG
from corral.wire import corral_pb2 as pb
from ctld.model import validate
from ctld.sched import JobRequest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC_FIELDS = {f.json_name for f in pb.JobSpec.DESCRIPTOR.fields}

#: JobSpec fields no sbatch option sets, and who does
NOT_FROM_OPTIONS = {
    "script": "sbatch: the script's text",
    "argv": "sbatch: the script's arguments",
    "command": "sbatch: the script's path",
    "submitLine": "sbatch: the command line",
    "submitHost": "sbatch: this host",
    "submitDir": "sbatch: the current directory",
    "allocationOnly": "salloc and srun",
    "warnSignal": "ctld: --signal typed at submit",
    "arrayTasks": "ctld: --array typed at submit",
    "dependencies": "ctld: --dependency typed at submit",
}

#: a value each option may be given (the option's own syntax)
SAMPLES = {
    "nodes": "2-3",
    "ntasks": 4,
    "ntasks_per_node": 2,
    "cpus_per_task": 2,
    "progress_timeout": "60",
    "mem": "2G",
    "mem_per_cpu": "1G",
    "gres": "gpu:a100:2",
    "gpus_per_node": "2",
    "gpus": "4",
    "gpus_per_task": "1",
    "time": "1:00:00",
    "partition": "a,b",
    "dependency": "afterok:1",
    "array": "0-3%1",
    "begin": "now+60",
    "nice": "10",
    "requeue": "expedite",
    "propagate": "NOFILE",
    "open_mode": "append",
    "container_image": "ubuntu:24.04",
    "container_mounts": "/data:/data:ro",
    "container_workdir": "/opt",
    "container_name": "keep",
    "container_save": "/out.sqsh",
    "container_env": "PATH",
}


def _gendocs() -> Any:
    spec = importlib.util.spec_from_file_location("gendocs", ROOT / "scripts" / "gendocs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_md_has_the_tables_rows_written_by_make_docs() -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    assert _gendocs().render(page) == page, "docs/cli.md is stale: run `make docs`"


def test_each_entry_sets_jobspec_fields_and_every_field_has_its_option() -> None:
    declared = {name for o in JOB_OPTIONS for name in o.fields}
    assert declared <= SPEC_FIELDS, declared - SPEC_FIELDS
    assert SPEC_FIELDS - declared == set(NOT_FROM_OPTIONS), (
        "a JobSpec field without an option: give it one in client/jobopts.py or say here who "
        f"sets it: {sorted(SPEC_FIELDS - declared - set(NOT_FROM_OPTIONS))}"
    )


def test_each_input_variable_is_slurms_spelling_of_one_option() -> None:
    envs = [o.env for o in JOB_OPTIONS if o.env]
    assert len(envs) == len(set(envs)) and all(e.startswith("SBATCH_") for e in envs)
    read = {
        "SBATCH_ACCOUNT": "account",
        "SBATCH_ARRAY_INX": "array",
        "SBATCH_EXCLUSIVE": "exclusive",
        "SBATCH_EXPORT": "export",
        "SBATCH_GPUS": "gpus",
        "SBATCH_GPUS_PER_NODE": "gpus_per_node",
        "SBATCH_GPUS_PER_TASK": "gpus_per_task",
        "SBATCH_GRES": "gres",
        "SBATCH_JOB_NAME": "job_name",
        "SBATCH_MEM_PER_CPU": "mem_per_cpu",
        "SBATCH_MEM_PER_NODE": "mem",
        "SBATCH_NO_REQUEUE": "no_requeue",
        "SBATCH_OPEN_MODE": "open_mode",
        "SBATCH_PARTITION": "partition",
        "SBATCH_QOS": "qos",
        "SBATCH_RESERVATION": "reservation",
        "SBATCH_REQUEUE": "requeue",
        "SBATCH_SIGNAL": "signal",
        "SBATCH_TIMELIMIT": "time",
        "SBATCH_WCKEY": "wckey",
    }
    assert read == SBATCH_ENV  # what sbatch read before the table: none lost


@pytest.mark.parametrize("opt", [o for o in JOB_OPTIONS if o.fields], ids=lambda o: o.long)
def test_an_option_sets_exactly_the_fields_its_entry_declares(opt: Any) -> None:
    parser = build_parser("sbatch")
    # the --container-* options mean something with an image only (Pyxis's rule)
    with_image = {"container_image": "ubuntu"} if opt.dest in CONTAINER_DESTS else {}
    base = to_spec(
        merge(parser, with_image, "", {}),
        script="#!/bin/sh\n",
        argv=[],
        environ={},
        cwd="/w",
        submit_line="sbatch",
        default_name="the-default",
    )
    value = True if opt.kind == FLAG else SAMPLES.get(opt.dest, "x")
    given = to_spec(
        merge(parser, {**with_image, opt.dest: value}, "", {}),
        script="#!/bin/sh\n",
        argv=[],
        environ={},
        cwd="/w",
        submit_line="sbatch",
        default_name="the-default",
    )
    changed = {k for k in given if given.get(k) != base.get(k)}  # type: ignore[misc]
    assert changed and changed <= set(opt.fields), (changed, opt.fields)


def _other(value: Any) -> Any:
    """A value of the same type that differs."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, tuple):
        return (*value, "n9")
    raise AssertionError(f"no other value for {value!r}")


def test_a_jobrequest_field_named_as_a_jobspec_field_is_copied_from_the_spec() -> None:
    """A scheduling flag adds a JobSpec field and a JobRequest field of one name: the
    request carries it with no line in ctld (validate.request_from_spec)."""
    spec = pb.JobSpec()
    expected = {}
    for name in validate._COPIED:
        field = pb.JobSpec.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated:
            getattr(spec, name).extend(["a", "b"])
            expected[name] = ("a", "b")
        else:
            value = _other(getattr(spec, name))
            setattr(spec, name, value)
            expected[name] = value
    req = validate.request_from_spec(spec)
    assert {n: getattr(req, n) for n in expected} == expected
    spec_names = set(pb.JobSpec.DESCRIPTOR.fields_by_name)
    named = {f.name for f in dataclasses.fields(JobRequest) if f.init} & spec_names
    assert named == set(validate._COPIED) | (validate._BY_RULE & spec_names)


#: what the core's class of a request leaves out: who and when, not what it needs
NOT_IN_CLASS = {"job_id", "priority", "submit_time", "eligible_time", "blocked_reason"}


def test_every_request_field_but_identity_and_age_is_in_its_class() -> None:
    """A new JobRequest field is in ``klass`` (jobs equal in it are decided once per
    pass), so a scheduling flag cannot make two different jobs look alike."""
    base = JobRequest(job_id=1, partitions=("p",))
    for field in dataclasses.fields(JobRequest):
        if not field.init or field.name in NOT_IN_CLASS:
            continue
        other = dataclasses.replace(base, **{field.name: _other(getattr(base, field.name))})
        assert other.klass != base.klass, f"JobRequest.{field.name} is not in its klass"
