"""srun: run a job step's tasks on the allocation's nodes, their I/O streamed back.

Inside an allocation (SLURM_JOB_ID set, or --jobid) srun asks ctld for a step (over
the HTTP/JSON gateway), opens one task stream to each node's noded (corral/stepstream.py;
the step's first node first: it picks MASTER_PORT), forwards stdin and signals, prints
the tasks' output as it comes (``-l`` prefixes ``RANK: ``) and exits with the highest
task exit code (128+signal for a signalled task). Outside an allocation it first
allocates, and releases afterwards.
"""

from __future__ import annotations

import os
import sys

from client.alloc import allocation_options, release, request_allocation
from client.common import option_errors, run
from client.containeropts import pyxis_environ, step_container
from client.jobopts import merge, parse_gpus, submit_line
from client.options import FLAG, OPTIONAL, Option, OptionParser, answered
from client.srun_output import Output, array_ids
from client.srun_step import JobStep
from corral.api import connect
from corral.errors import InvalidOption
from corral.tasks import validate_gpu_bind

TYPE_CHECKING = False  # typing costs start-up time; srun is about start-up
if TYPE_CHECKING:
    from typing import Any

    from corral.wire import json_types as t

__all__ = ["Output", "array_ids", "build_parser", "main", "srun", "step_spec"]

PROG = "srun"
STEP_OPTIONS = (
    Option("l", "label", "label", FLAG, help="prefix each output line with its task rank"),
    Option("o", "output", "output", help="stdout file pattern (%t task, %n node, %s step, %j)"),
    Option("e", "error", "error", help="stderr file pattern"),
    Option("i", "input", "input", help="stdin to: all (default), none, or a task id"),
    Option(
        "K",
        "kill-on-bad-exit",
        "kill_on_bad_exit",
        OPTIONAL,
        const="1",
        help="kill the step when a task exits non-zero",
    ),
    Option("W", "wait", "wait", help="kill the remaining tasks SECS after the first ends"),
    Option("m", "distribution", "distribution", help="block or cyclic"),
    Option("", "gpu-bind", "gpu_bind", help="closest, none, or map_gpu:LIST"),
    Option("", "exact", "exact", FLAG, help="hold only the CPUs/GPUs the tasks ask for"),
    Option("", "overlap", "overlap", FLAG, help="hold nothing: run beside any step"),
    Option("u", "unbuffered", "unbuffered", FLAG, help="output as it comes, not by line"),
    Option("", "mpi", "mpi", help="accepted: no MPI plugins"),
    Option("", "cpu-bind", "cpu_bind", help="accepted: tasks inherit the job's cores"),
    Option("", "jobid", "jobid", help="run inside this allocation"),
    Option("", "pty", "pty", FLAG, help="run task 0 in a pseudo-terminal (srun --pty bash)"),
    Option("Q", "quiet", "quiet", FLAG, help="fewer messages"),
    Option("v", "verbose", "verbose", FLAG, help="more messages"),
    Option("h", "help", "help", FLAG, help="show this help"),
    Option("V", "version", "version", FLAG, help="show the version"),
)


def build_parser() -> OptionParser:
    return OptionParser(
        PROG,
        [*allocation_options(), *STEP_OPTIONS],
        usage=f"{PROG} [OPTIONS...] executable [args...]",
    )


def main() -> None:
    run(PROG, lambda: srun(sys.argv[1:]))


def srun(argv: list[str]) -> int:
    parser = build_parser()
    with option_errors():  # 255, as Slurm's srun
        cli, command = _parse(parser, argv)
    if answered(parser, cli):
        return 0
    api = connect()  # the gateway (HTTP/JSON): no grpc or protobuf in srun's start-up
    job_id = str(cli.get("jobid") or os.environ.get("SLURM_JOB_ID", ""))
    mine = not job_id
    if mine:
        with option_errors():
            mine_opts = {k: v for k, v in cli.items() if k not in _STEP_DESTS}
            opts = merge(parser, mine_opts, "", pyxis_environ(os.environ))
        job_id = request_allocation(api, PROG, opts, argv, os.path.basename(command[0]))
    code, sig, step = 1, 0, None
    try:
        with option_errors():
            spec = step_spec(job_id, cli, command, argv)
        step = JobStep(api, job_id, spec, cli)
        code, sig = step.run()
    finally:
        if mine:  # a node's refusal (a container not made) is its job's reason too
            release(api, PROG, job_id, code, sig, step.refused if step else "")
    return code


def _parse(parser: OptionParser, argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    cli, command = parser.parse(argv)
    if cli.get("help") or cli.get("version"):
        return cli, command
    if not command:
        raise InvalidOption("No command given to execute.")
    if "gpu_bind" in cli:
        validate_gpu_bind(cli["gpu_bind"])
    if "wait" in cli:
        try:
            float(cli["wait"])
        except ValueError:
            raise InvalidOption(f"Invalid --wait value: {cli['wait']}") from None
    return cli, command


_STEP_DESTS = {o.dest for o in STEP_OPTIONS} | {"export"}


def step_spec(job_id: str, cli: dict[str, Any], command: list[str], argv: list[str]) -> t.StepSpec:
    spec: t.StepSpec = {
        "jobId": job_id,
        "name": os.path.basename(command[0]),
        "argv": command,
        "submitLine": submit_line([PROG, *argv]),
    }
    if "nodes" in cli:
        low = cli["nodes"].split("-", 1)[0]
        if not low.isdigit() or int(low) < 1:
            raise InvalidOption(f"Invalid node count specification: {cli['nodes']}")
        spec["numNodes"] = int(low)
    if "ntasks" in cli:
        spec["ntasks"] = cli["ntasks"]
    if "ntasks_per_node" in cli:
        spec["ntasksPerNode"] = cli["ntasks_per_node"]
    if "cpus_per_task" in cli:
        spec["cpusPerTask"] = cli["cpus_per_task"]
    if "nodelist" in cli:
        spec["nodelist"] = cli["nodelist"]
    if "exclude" in cli:
        spec["exclude"] = cli["exclude"]
    if "distribution" in cli:
        spec["distribution"] = cli["distribution"]
    if "gpu_bind" in cli:
        spec["gpuBind"] = cli["gpu_bind"]
    if "gpus_per_task" in cli:
        spec["gpusPerTask"] = parse_gpus(cli["gpus_per_task"], "--gpus-per-task")[1]
    if container := step_container(cli, dict(os.environ), os.getcwd()):
        spec["container"] = container  # all its tasks on a node share one (Pyxis's rule)
    if cli.get("exact"):
        spec["exact"] = True
    if cli.get("overlap"):
        spec["overlap"] = True
    return spec
