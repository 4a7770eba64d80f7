"""Job options shared by sbatch (and later srun/salloc): flags, #SBATCH lines, SBATCH_* vars.

Precedence is Slurm's: command-line flags, then input environment variables, then
``#SBATCH`` directives in the script. The result is a proto3-JSON JobSpec dict.
"""

from __future__ import annotations

import _socket
import os
import time

from client.options import COUNT, FLAG, OPTIONAL, Option, OptionParser
from corral.errors import InvalidOption, InvalidRequest
from corral.slurmfmt import UNLIMITED, parse_duration, parse_size_mb, parse_timestamp

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from typing import Any

    from corral.wire import json_types as t

#: Input environment variables sbatch reads, as Slurm documents them.
SBATCH_ENV = {
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


def _count(value: str) -> int:
    if not value.isdecimal() or int(value) < 1:
        raise ValueError("expected a positive integer")
    return int(value)


JOB_OPTIONS = (
    Option("J", "job-name", "job_name", help="name of the job"),
    Option("o", "output", "output", help="stdout file pattern (%j %x %u %N %A %a)"),
    Option("e", "error", "error", help="stderr file pattern"),
    Option("i", "input", "input", help="stdin file pattern"),
    Option("N", "nodes", "nodes", help="number of nodes, N or MIN-MAX"),
    Option("n", "ntasks", "ntasks", convert=_count, help="number of tasks"),
    Option("", "ntasks-per-node", "ntasks_per_node", convert=_count, help="tasks per node"),
    Option("c", "cpus-per-task", "cpus_per_task", convert=_count, help="CPUs per task"),
    Option("", "mem", "mem", help="memory per node (MB, or with K/M/G/T)"),
    Option("", "mem-per-cpu", "mem_per_cpu", help="memory per allocated CPU"),
    Option("", "gres", "gres", help="generic resources: gpu[:type]:N"),
    Option("G", "gpus", "gpus", help="GPUs for the whole job: [type:]N"),
    Option("", "gpus-per-node", "gpus_per_node", help="GPUs per node: [type:]N"),
    Option("", "gpus-per-task", "gpus_per_task", help="GPUs per task: [type:]N"),
    Option("t", "time", "time", help="time limit (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)"),
    Option("p", "partition", "partition", help="partition(s), comma separated"),
    Option("A", "account", "account", help="account to charge"),
    Option("D", "chdir", "chdir", help="working directory of the job"),
    Option("", "export", "export", help="ALL, NONE, or [ALL,]VAR[=value],..."),
    Option("", "wrap", "wrap", help="wrap a command line in a /bin/sh script"),
    Option("", "parsable", "parsable", FLAG, help="print only the job id"),
    Option(
        "", "test-only", "test_only", FLAG, help="say when and where it would start; submit nothing"
    ),
    Option("H", "hold", "hold", FLAG, help="submit held"),
    Option("d", "dependency", "dependency", help="after, afterok, afternotok, afterany, ..."),
    Option("a", "array", "array", help="job array indices: 0-15, 1,3,5, 0-15:4, %N"),
    Option("b", "begin", "begin", help="start no earlier than this time"),
    Option("", "nice", "nice", OPTIONAL, const="100", help="lower the job's priority"),
    Option(
        "", "exclusive", "exclusive", OPTIONAL, const="exclusive", help="whole nodes, not shared"
    ),
    Option("w", "nodelist", "nodelist", help="nodes the job must have"),
    Option("x", "exclude", "exclude", help="nodes the job must not have"),
    Option("", "comment", "comment", help="free text stored with the job"),
    Option(
        "",
        "requeue",
        "requeue",
        OPTIONAL,
        const="yes",
        help="may be requeued (=expedite: at the top of the queue)",
    ),
    Option("", "no-requeue", "no_requeue", FLAG, help="never requeue"),
    Option("", "signal", "signal", help="[{R|B}:]SIG[@secs] before the time limit"),
    Option(
        "",
        "progress-timeout",
        "progress_timeout",
        help="seconds without a touch of $CORRAL_PROGRESS_FILE (GPUs idle): stalled, requeued",
    ),
    Option("", "open-mode", "open_mode", help="append or truncate the output files"),
    Option("q", "qos", "qos", help="quality of service"),
    Option("", "reservation", "reservation", help="run inside this advance reservation"),
    Option("C", "constraint", "constraint", help="ignored with a warning: nodes have no features"),
    Option("", "wckey", "wckey", help="workload characterization key"),
    Option(
        "",
        "mail-type",
        "mail_type",
        help="mail on BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT[_50|_80|_90], "
        "INVALID_DEPEND, ARRAY_TASKS (the cluster's [mail] must be on)",
    ),
    Option("", "mail-user", "mail_user", help="who gets the mail (default: you)"),
    Option("k", "no-kill", "no_kill", FLAG, help="do not kill the job when a node fails"),
    Option("Q", "quiet", "quiet", FLAG, help="print nothing on success"),
    Option("v", "verbose", "verbose", COUNT, help="more messages"),
    Option("W", "wait", "wait", FLAG, help="wait for the job to end"),
    Option("h", "help", "help", FLAG, help="show this help"),
    Option("V", "version", "version", FLAG, help="show the version"),
)


#: options taken so that scripts written for Slurm run, but without effect here: each
#: gets a warning on stderr, never silence (a job that asked for a node feature must
#: not look as if it got one). Mail is sent, or refused by ctld where [mail] is off.
IGNORED = {
    "constraint": "--constraint is ignored: corral's nodes have no features, so the job "
    "may run on any node of its partition",
}


def ignored_warnings(prog: str, opts: dict[str, Any]) -> list[str]:
    """``PROG: warning: ...`` for each option given that has no effect (once each)."""
    said = dict.fromkeys(IGNORED[k] for k in IGNORED if k in opts)
    return [f"{prog}: warning: {text}" for text in said]


def build_parser(prog: str) -> OptionParser:
    return OptionParser(prog, JOB_OPTIONS, usage=f"{prog} [OPTIONS...] executable [args...]")


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
            import shlex  # only scripts with directives pay for it (it imports re)

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
        if dest == "no_requeue":
            out[dest] = True
        elif dest == "requeue":
            out[dest] = value if value == "expedite" else "yes"
        elif dest == "exclusive":
            out[dest] = value or "exclusive"
        else:
            out[dest] = value
    return out


def merge(
    parser: OptionParser, cli: dict[str, Any], script: str, environ: dict[str, str]
) -> dict[str, Any]:
    """Directives, overridden by environment variables, overridden by flags."""
    opts: dict[str, Any] = {}
    if script:
        opts, stray = parser.parse(directives(script), stop_at_positional=True)
        if stray:
            raise InvalidOption(f"unexpected argument {stray[0]!r} in an #SBATCH line")
    for layer in (env_options(environ), cli):
        # --requeue and --no-requeue: the later layer's word wins
        if "requeue" in layer:
            opts.pop("no_requeue", None)
        if "no_requeue" in layer:
            opts.pop("requeue", None)
        opts.update(layer)
    if opts.get("requeue") not in (None, "yes", "expedite"):
        raise InvalidOption(f"Invalid --requeue: {opts['requeue']} (only --requeue=expedite)")
    if opts.get("open_mode") not in (None, "append", "truncate"):
        raise InvalidOption(f"Invalid --open-mode: {opts['open_mode']} (append or truncate)")
    return opts


_ASCII_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_NAME_START = frozenset(_ASCII_LETTERS + "_")  # an environment variable's first letter
_NAME_CHARS = frozenset(_ASCII_LETTERS + "0123456789_")
_GPU_TYPE_CHARS = _NAME_CHARS | {".", "-"}
# what shlex.quote leaves bare (its [^\w@%+=:,./-] with re.ASCII)
_SHELL_SAFE = _NAME_CHARS | frozenset("@%+=:,./-")


def shell_quote(word: str) -> str:
    """shlex.quote without shlex (which imports re): ``word`` as one shell word."""
    if not word:
        return "''"
    if all(c in _SHELL_SAFE for c in word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def submit_line(argv: list[str]) -> str:
    """The command line as one shell line (Slurm's SubmitLine), as shlex.join."""
    return " ".join(shell_quote(word) for word in argv)


def parse_gres(value: str) -> tuple[str, int, int]:
    """``gpu``, ``gpu:4``, ``gpu:h100:4``, ``shard:K`` -> (type, GPUs, shards). Only gpu
    and shard GRES exist here. An unknown GRES is a refused request (exit 1, Slurm's
    controller says it), not a malformed option (255)."""
    items = [v for v in value.split(",") if v]
    gpu: tuple[str, int] | None = None
    shards = 0
    for item in items:
        parts = item.split(":")
        if parts[0] == "shard" and len(parts) <= 2:
            shards = _int(parts[1], item) if len(parts) == 2 else 1
            if not shards:
                raise InvalidRequest(f"Invalid generic resource (gres) specification: {item}")
            continue
        if parts[0] != "gpu" or len(parts) > 3:
            raise InvalidRequest(f"Invalid generic resource (gres) specification: {item}")
        if len(parts) == 1:
            gpu = ("", 1)
        elif len(parts) == 2:
            gpu = ("", _int(parts[1], item)) if parts[1].isdecimal() else (parts[1], 1)
        else:
            gpu = (parts[1], _int(parts[2], item))
    if gpu is None and not shards:
        raise InvalidRequest(f"Invalid generic resource (gres) specification: {value}")
    gpu_type, count = gpu or ("", 0)
    return gpu_type, count, shards


def _int(text: str, whole: str) -> int:
    if not text.isdecimal():
        raise InvalidRequest(f"Invalid generic resource (gres) specification: {whole}")
    return int(text)


def parse_gpus(value: str, what: str) -> tuple[str, int]:
    """``[type:]N``: the type ("" when none) and the count."""
    kind, colon, count = value.strip().rpartition(":")
    if not count.isdecimal() or (colon and not (kind and set(kind) <= _GPU_TYPE_CHARS)):
        raise InvalidOption(f"Invalid {what} specification: {value}")
    return kind, int(count)


def parse_nodes(value: str) -> tuple[int, int]:
    first, dash, last = value.strip().partition("-")  # N or N-M
    if not first.isdecimal() or (dash and not last.isdecimal()) or int(first) < 1:
        raise InvalidOption(f"Invalid node count specification: {value}")
    lo = int(first)
    hi = int(last) if dash else 0
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
        if not name or name[0] not in _NAME_START or not set(name) <= _NAME_CHARS:
            raise InvalidOption(f"invalid --export variable {item!r}")
        if eq:
            env[name] = val
        elif name in environ:
            env[name] = environ[name]
    return env


UMASK_VAR = "SLURM_UMASK"


def with_umask(env: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """``env`` plus Slurm's SLURM_UMASK: the caller's umask ("0077"), unless one is set
    already (--export=...,SLURM_UMASK=, the caller's environment: inside a job, or by
    hand). Whatever --export says, the job's files and processes get it on the node, as
    sbatch, srun and salloc do."""
    mask = env.get(UMASK_VAR) or environ.get(UMASK_VAR)
    if not mask:
        current = os.umask(0)
        os.umask(current)
        mask = f"0{current:03o}"
    return {**env, UMASK_VAR: mask}


def to_spec(
    g: dict[str, Any],
    *,
    script: str,
    argv: list[str],
    environ: dict[str, str],
    cwd: str,
    submit_line: str,
    default_name: str,
) -> t.JobSpec:
    """The proto3-JSON JobSpec for these options (validated here for early, clear errors);
    its keys are checked against the proto by mypy (corral/wire/json_types.py)."""
    spec: t.JobSpec = {"script": script}
    work_dir = g.get("chdir") or cwd
    if not os.path.isabs(work_dir):
        work_dir = os.path.normpath(os.path.join(cwd, work_dir))
    spec["workDir"] = work_dir
    spec["submitDir"] = cwd
    spec["name"] = g.get("job_name") or default_name
    spec["argv"] = argv
    spec["export"] = g.get("export", "ALL")
    spec["environment"] = with_umask(export_environment(spec["export"], environ), environ)
    if "output" in g:
        spec["stdoutPattern"] = g["output"]
    if "error" in g:
        spec["stderrPattern"] = g["error"]
    if "input" in g:
        spec["stdinPath"] = g["input"]
    if "account" in g:
        spec["account"] = g["account"]
    if "comment" in g:
        spec["comment"] = g["comment"]
    if "nodelist" in g:
        spec["nodelist"] = g["nodelist"]
    if "exclude" in g:
        spec["exclude"] = g["exclude"]
    if "signal" in g:
        spec["signal"] = g["signal"]
    if "open_mode" in g:
        spec["openMode"] = g["open_mode"]
    if "qos" in g:
        spec["qos"] = g["qos"]
    if "reservation" in g:
        spec["reservation"] = g["reservation"]
    if "constraint" in g:
        spec["constraint"] = g["constraint"]
    if "wckey" in g:
        spec["wckey"] = g["wckey"]
    if "mail_type" in g:
        spec["mailType"] = g["mail_type"]
    if "mail_user" in g:
        spec["mailUser"] = g["mail_user"]
    if "partition" in g:
        spec["partitions"] = [p for p in g["partition"].split(",") if p]
    if "nodes" in g:
        spec["nodesMin"], spec["nodesMax"] = parse_nodes(g["nodes"])
    if "ntasks" in g:
        spec["ntasks"] = g["ntasks"]
    if "ntasks_per_node" in g:
        spec["ntasksPerNode"] = g["ntasks_per_node"]
    if "cpus_per_task" in g:
        spec["cpusPerTask"] = g["cpus_per_task"]
    if "progress_timeout" in g:
        try:
            seconds = int(g["progress_timeout"])
        except ValueError:
            seconds = -1
        if seconds <= 0:
            raise InvalidOption(
                f"Invalid --progress-timeout: {g['progress_timeout']} (whole seconds > 0)"
            )
        spec["progressTimeoutS"] = seconds
    if "mem" in g:
        spec["memPerNodeMb"] = parse_size_mb(g["mem"], what="--mem")
    if "mem_per_cpu" in g:
        spec["memPerCpuMb"] = parse_size_mb(g["mem_per_cpu"], what="--mem-per-cpu")
    if "gres" in g:
        gpu_type, gpus, shards = parse_gres(g["gres"])
        if gpus:
            spec["gpuType"], spec["gpusPerNode"] = gpu_type, gpus
        if shards:
            spec["shardsPerNode"] = shards
    if "gpus_per_node" in g:
        spec["gpuType"], spec["gpusPerNode"] = parse_gpus(g["gpus_per_node"], "--gpus-per-node")
    if "gpus" in g:
        spec["gpuType"], spec["gpus"] = parse_gpus(g["gpus"], "--gpus")
    if "gpus_per_task" in g:
        spec["gpuType"], spec["gpusPerTask"] = parse_gpus(g["gpus_per_task"], "--gpus-per-task")
    if "time" in g:
        # Slurm: "A time limit of zero requests that no time limit be imposed"
        spec["timeLimitS"] = parse_duration(g["time"], what="--time") or UNLIMITED
    if g.get("hold"):
        spec["hold"] = True
    if "dependency" in g:
        from corral.jobsyntax import parse_dependency  # only jobs that use it pay for it

        parse_dependency(g["dependency"])
        spec["dependency"] = g["dependency"]
    if "array" in g:
        from corral.jobsyntax import parse_array

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
        if g["requeue"] == "expedite":
            spec["requeueExpedite"] = True
    if g.get("no_requeue"):
        spec["noRequeue"] = True
    if g.get("no_kill"):
        spec["noKill"] = True
    spec["submitLine"] = submit_line
    spec["submitHost"] = _socket.gethostname()  # socket.gethostname, without socket
    return spec
