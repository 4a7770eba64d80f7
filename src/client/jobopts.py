"""Job options shared by sbatch (and later srun/salloc): flags, #SBATCH lines, SBATCH_* vars.

Precedence is Slurm's: command-line flags, then input environment variables, then
``#SBATCH`` directives in the script. The result is a proto3-JSON JobSpec dict.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import socket
import time
from typing import Any

from corral.errors import InvalidOption
from corral.jobsyntax import parse_array, parse_dependency
from corral.slurmfmt import parse_duration, parse_size_mb, parse_timestamp

#: Input environment variables sbatch reads, as Slurm documents them.
SBATCH_ENV = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_ARRAY_INX": "array",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus_per_node",
    "SBATCH_GRES": "gres",
    "SBATCH_JOB_NAME": "job_name",
    "SBATCH_MEM_PER_CPU": "mem_per_cpu",
    "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NO_REQUEUE": "no_requeue",
    "SBATCH_OPEN_MODE": "open_mode",
    "SBATCH_PARTITION": "partition",
    "SBATCH_QOS": "qos",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_SIGNAL": "signal",
    "SBATCH_TIMELIMIT": "time",
    "SBATCH_WCKEY": "wckey",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit 2; Slurm says why and exits 1
        raise InvalidOption(message)


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, argument_default=argparse.SUPPRESS, add_help=True, allow_abbrev=False)
    a = p.add_argument
    a("-J", "--job-name", dest="job_name")
    a("-o", "--output")
    a("-e", "--error")
    a("-i", "--input")
    a("-N", "--nodes")
    a("-n", "--ntasks", type=_count("-n/--ntasks"))
    a("--ntasks-per-node", type=_count("--ntasks-per-node"))
    a("-c", "--cpus-per-task", type=_count("-c/--cpus-per-task"))
    a("--mem")
    a("--mem-per-cpu")
    a("--gres")
    a("-G", "--gpus")
    a("--gpus-per-node")
    a("-t", "--time")
    a("-p", "--partition")
    a("-A", "--account")
    a("-D", "--chdir")
    a("--export")
    a("--wrap")
    a("--parsable", action="store_true")
    a("-H", "--hold", action="store_true")
    a("-d", "--dependency")
    a("-a", "--array")
    a("-b", "--begin")
    a("--nice", nargs="?", const="100")
    a("--exclusive", nargs="?", const="exclusive")
    a("-w", "--nodelist")
    a("-x", "--exclude")
    a("--comment")
    a("--requeue", action="store_true")
    a("--no-requeue", action="store_true", dest="no_requeue")
    a("--signal")
    a("--open-mode", dest="open_mode", choices=["append", "truncate"])
    a("-q", "--qos")
    a("-C", "--constraint")
    a("--wckey")
    a("--mail-type", dest="mail_type")
    a("--mail-user", dest="mail_user")
    a("-k", "--no-kill", action="store_true", dest="no_kill")
    a("-Q", "--quiet", action="store_true")
    a("-v", "--verbose", action="count")
    a("-W", "--wait", action="store_true")
    return p


def _count(what: str) -> Any:
    def conv(value: str) -> int:
        if not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"invalid {what} value: {value!r}")
        return int(value)

    return conv


def directives(script: str, prefix: str = "#SBATCH") -> list[str]:
    """The arguments of the ``#SBATCH`` lines before the first command, as Slurm reads them."""
    args: list[str] = []
    for line in script.splitlines()[1:]:
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break  # Slurm stops at the first line that is not a comment
        if stripped.startswith(prefix) and (
            len(stripped) == len(prefix) or stripped[len(prefix)].isspace()
        ):
            try:
                args.extend(shlex.split(stripped[len(prefix) :], comments=True))
            except ValueError as exc:
                raise InvalidOption(f"bad {prefix} line {stripped!r}: {exc}") from None
    return args


def env_options(environ: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for var, dest in SBATCH_ENV.items():
        value = environ.get(var)
        if value is None:
            continue
        if dest in ("requeue", "no_requeue"):
            out[dest] = True
        elif dest == "exclusive":
            out[dest] = value or "exclusive"
        else:
            out[dest] = value
    return out


def merge(
    parser: argparse.ArgumentParser, cli: argparse.Namespace, script: str, environ: dict[str, str]
) -> argparse.Namespace:
    """Directives, overridden by environment variables, overridden by flags."""
    ns = parser.parse_args(directives(script)) if script else argparse.Namespace()
    for key, value in env_options(environ).items():
        setattr(ns, key, value)
    for key, value in vars(cli).items():
        setattr(ns, key, value)
    return ns


_GPU_COUNT = re.compile(r"(?:([A-Za-z0-9_.\-]+):)?(\d+)")


def parse_gres(value: str) -> tuple[str, int]:
    """``gpu``, ``gpu:4``, ``gpu:h100:4`` -> (type, count). Only gpu GRES exist here."""
    items = [v for v in value.split(",") if v]
    gpu: tuple[str, int] | None = None
    for item in items:
        parts = item.split(":")
        if parts[0] != "gpu" or len(parts) > 3:
            raise InvalidOption(f"Invalid generic resource (gres) specification: {item}")
        if len(parts) == 1:
            gpu = ("", 1)
        elif len(parts) == 2:
            gpu = ("", _int(parts[1], item)) if parts[1].isdigit() else (parts[1], 1)
        else:
            gpu = (parts[1], _int(parts[2], item))
    if gpu is None:
        raise InvalidOption(f"Invalid generic resource (gres) specification: {value}")
    return gpu


def _int(text: str, whole: str) -> int:
    if not text.isdigit():
        raise InvalidOption(f"Invalid generic resource (gres) specification: {whole}")
    return int(text)


def parse_gpus(value: str, what: str) -> tuple[str, int]:
    m = _GPU_COUNT.fullmatch(value.strip())
    if not m:
        raise InvalidOption(f"Invalid {what} specification: {value}")
    return m.group(1) or "", int(m.group(2))


def parse_nodes(value: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", value.strip())
    if not m or int(m.group(1)) < 1:
        raise InvalidOption(f"Invalid node count specification: {value}")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) else 0
    if hi and hi < lo:
        raise InvalidOption(f"Invalid node count specification: {value}")
    return lo, hi


def export_environment(value: str, environ: dict[str, str]) -> dict[str, str]:
    """Slurm's --export: ALL (default), NONE, ``ALL,VAR=x``, or ``VAR1,VAR2=x`` (only those)."""
    items = [v for v in value.split(",") if v]
    upper = [v.upper() for v in items]
    if not items or upper[0] == "ALL":
        env = dict(environ)
        items = items[1:]
    elif upper[0] == "NONE":
        env = {}
        items = items[1:]
    else:
        env = {k: v for k, v in environ.items() if k.startswith("SLURM_")}
    for item in items:
        name, eq, val = item.partition("=")
        if not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise InvalidOption(f"invalid --export variable {item!r}")
        if eq:
            env[name] = val
        elif name in environ:
            env[name] = environ[name]
    return env


def to_spec(
    ns: argparse.Namespace,
    *,
    script: str,
    argv: list[str],
    environ: dict[str, str],
    cwd: str,
    submit_line: str,
    default_name: str,
) -> dict[str, Any]:
    """The proto3-JSON JobSpec for these options (validated here for early, clear errors)."""
    g = vars(ns)
    spec: dict[str, Any] = {"script": script}
    work_dir = g.get("chdir") or cwd
    if not os.path.isabs(work_dir):
        work_dir = os.path.normpath(os.path.join(cwd, work_dir))
    spec["workDir"] = work_dir
    spec["name"] = g.get("job_name") or default_name
    spec["argv"] = argv
    spec["export"] = g.get("export", "ALL")
    spec["environment"] = export_environment(spec["export"], environ)
    for key, field in (
        ("output", "stdoutPattern"),
        ("error", "stderrPattern"),
        ("input", "stdinPath"),
        ("account", "account"),
        ("comment", "comment"),
        ("nodelist", "nodelist"),
        ("exclude", "exclude"),
        ("signal", "signal"),
        ("open_mode", "openMode"),
        ("qos", "qos"),
        ("constraint", "constraint"),
        ("wckey", "wckey"),
        ("mail_type", "mailType"),
        ("mail_user", "mailUser"),
    ):
        if key in g:
            spec[field] = g[key]
    if "partition" in g:
        spec["partitions"] = [p for p in g["partition"].split(",") if p]
    if "nodes" in g:
        spec["nodesMin"], spec["nodesMax"] = parse_nodes(g["nodes"])
    for key, field in (
        ("ntasks", "ntasks"),
        ("ntasks_per_node", "ntasksPerNode"),
        ("cpus_per_task", "cpusPerTask"),
    ):
        if key in g:
            spec[field] = g[key]
    if "mem" in g:
        spec["memPerNodeMb"] = parse_size_mb(g["mem"], what="--mem")
    if "mem_per_cpu" in g:
        spec["memPerCpuMb"] = parse_size_mb(g["mem_per_cpu"], what="--mem-per-cpu")
    if "gres" in g:
        spec["gpuType"], spec["gpusPerNode"] = parse_gres(g["gres"])
    if "gpus_per_node" in g:
        spec["gpuType"], spec["gpusPerNode"] = parse_gpus(g["gpus_per_node"], "--gpus-per-node")
    if "gpus" in g:
        spec["gpuType"], spec["gpus"] = parse_gpus(g["gpus"], "--gpus")
    if "time" in g:
        spec["timeLimitS"] = parse_duration(g["time"])
        if spec["timeLimitS"] == 0:
            raise InvalidOption(f"Invalid time limit specification: {g['time']!r}")
    if g.get("hold"):
        spec["hold"] = True
    if "dependency" in g:
        parse_dependency(g["dependency"])
        spec["dependency"] = g["dependency"]
    if "array" in g:
        parse_array(g["array"])
        spec["array"] = g["array"]
    if "begin" in g:
        spec["beginTime"] = parse_timestamp(g["begin"], now=time.time())
    if "nice" in g:
        try:
            spec["nice"] = int(g["nice"])
        except ValueError:
            raise InvalidOption(f"Invalid nice value: {g['nice']}") from None
    if "exclusive" in g:
        spec["exclusive"] = True
    if g.get("requeue"):
        spec["requeue"] = True
    if g.get("no_kill"):
        spec["noKill"] = True
    spec["submitLine"] = submit_line
    spec["submitHost"] = socket.gethostname()
    return spec
