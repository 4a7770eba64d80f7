"""Job options shared by sbatch, srun and salloc: one table from flag to JobSpec field.

Each option is one ``JobOption`` entry in ``JOB_OPTIONS``: its parsing, its --help
line, its SBATCH_* input variable, the JobSpec fields it sets and its row in
docs/cli.md (written from this table by ``make docs``). Precedence is Slurm's:
command-line flags, then input environment variables, then ``#SBATCH`` directives in
the script. The result is a proto3-JSON JobSpec dict.
"""

from __future__ import annotations

import _socket
import os
import time

from client.containeropts import (
    CONTAINER_OPTIONS,
    container_warnings,
    pyxis_layer,
    resolve,
    settle_pairs,
)
from client.options import COUNT, FLAG, OPTIONAL, JobOption, OptionParser
from corral.errors import InvalidOption
from corral.slurmfmt import (
    UNLIMITED,
    parse_duration,
    parse_gpus,
    parse_gres,
    parse_nodes,
    parse_size_mb,
    parse_timestamp,
)

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from typing import Any

    from corral.wire import json_types as t

__all__ = ["parse_gpus", "parse_gres", "parse_nodes"]  # sbatch's own syntax, in slurmfmt


def _count(value: str) -> int:
    if not value.isdecimal() or int(value) < 1:
        raise ValueError("expected a positive integer")
    return int(value)


def _seconds(value: str) -> int:
    try:
        seconds = int(value)
    except ValueError:
        seconds = -1
    if seconds <= 0:
        raise InvalidOption(f"Invalid --progress-timeout: {value} (whole seconds > 0)")
    return seconds


def _nice(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidOption(f"Invalid nice value: {value}") from None


# --dependency and --array: the value as given, once corral.jobsyntax's parser took it
# (early, clear errors; ctld parses it for the job); only jobs that use one import it
def _dependency(value: str) -> str:
    from corral.jobsyntax import parse_dependency

    parse_dependency(value)
    return value


def _array(value: str) -> str:
    from corral.jobsyntax import parse_array

    parse_array(value)
    return value


def _mail_user(value: str) -> str:
    """ctld's own check, made first (a clear message before anything is sent)."""
    from corral.mailaddress import check_mail_user  # only when --mail-user is given

    return check_mail_user(value) if value else value


def _gres(value: str) -> tuple[str | None, int | None, int | None]:
    gpu_type, gpus, shards = parse_gres(value)
    return (gpu_type if gpus else None), (gpus or None), (shards or None)


RLIMITS = ("AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK", "NOFILE", "NPROC", "RSS", "STACK")


def _propagate(value: str) -> dict[str, int] | None:
    """--propagate[=ALL|NONE|NAME,...]: this process's soft limits, by Slurm's names."""
    names = [n.strip().upper() for n in value.split(",") if n.strip()]
    if names in (["ALL"], []):
        names = list(RLIMITS)
    for name in names:
        if name not in RLIMITS and name != "NONE":
            raise InvalidOption(f"Invalid --propagate specification: {name}")
    import resource  # only jobs that propagate pay for it

    out = {n: resource.getrlimit(getattr(resource, "RLIMIT_" + n))[0] for n in names if n != "NONE"}
    return out or None


_SIZE = "MiB, or a number with `K`, `M`, `G`, `T`"
# fmt: off
JOB_OPTIONS = (
    JobOption("J", "job-name", "job_name", help="name of the job", metavar="NAME",
              env="SBATCH_JOB_NAME", fields=("name",),
              doc="job name, one line (a control character is refused). Default: the "
              "script's file name, `wrap` for `--wrap`, `sbatch` "
              "for stdin"),
    JobOption("o", "output", "output", help="stdout file pattern (%j %x %u %N %A %a)",
              metavar="PATTERN", fields=("stdoutPattern",),
              doc="stdout file. Default `slurm-%j.out` ([patterns](quickstart.md#output-files))"),
    JobOption("e", "error", "error", help="stderr file pattern", metavar="PATTERN",
              fields=("stderrPattern",), doc="stderr file. Default: with stdout"),
    JobOption("i", "input", "input", help="stdin file pattern", metavar="PATTERN",
              fields=("stdinPath",), doc="stdin file. Default `/dev/null`"),
    JobOption("N", "nodes", "nodes", help="number of nodes, N or MIN-MAX", metavar="N[-M]",
              fields=("nodesMin", "nodesMax"), put=parse_nodes,
              doc="node count. With a range, the minimum is used (with `--elastic`: up to "
              "the maximum, as many as are free)"),
    JobOption("n", "ntasks", "ntasks", convert=_count, help="number of tasks", metavar="N",
              fields=("ntasks",), doc="tasks"),
    JobOption("", "ntasks-per-node", "ntasks_per_node", convert=_count, help="tasks per node",
              metavar="N", fields=("ntasksPerNode",)),
    JobOption("c", "cpus-per-task", "cpus_per_task", convert=_count, help="CPUs per task",
              metavar="N", fields=("cpusPerTask",)),
    JobOption("", "progress-timeout", "progress_timeout",
              help="seconds without a touch of $CORRAL_PROGRESS_FILE (GPUs idle): stalled, "
              "requeued", metavar="SECONDS", fields=("progressTimeoutS",), put=_seconds,
              doc="corral's own: stalled and requeued after this long without progress "
              "(below)"),
    JobOption("", "mem", "mem", help="memory per node (MB, or with K/M/G/T)", metavar="SIZE",
              env="SBATCH_MEM_PER_NODE", fields=("memPerNodeMb",),
              put=lambda v: parse_size_mb(v, what="--mem"), doc=f"memory per node: {_SIZE}"),
    JobOption("", "mem-per-cpu", "mem_per_cpu", help="memory per allocated CPU",
              metavar="SIZE", env="SBATCH_MEM_PER_CPU", fields=("memPerCpuMb",),
              put=lambda v: parse_size_mb(v, what="--mem-per-cpu")),
    JobOption("", "gres", "gres", help="generic resources: gpu[:type]:N", metavar="GRES",
              env="SBATCH_GRES", fields=("gpuType", "gpusPerNode", "shardsPerNode"), put=_gres,
              doc="`gpu[:TYPE][:N]`: GPUs per node; `shard[:K]`: GPU sharing (Slurm's "
              "gres/shard), K shards of one GPU on each node, on nodes configured with "
              "`shards_per_gpu` (docs/config.md). Only `gpu` and `shard` GRES exist. The "
              "job's shards come from one GPU per node (22.05 without "
              "`MULTIPLE_SHARING_GRES_PJ`); a GPU holding shards is never given whole to a "
              "`gpu` job, nor a whole-allocated GPU's shards to a shard job. The job sees "
              "the GPU in `CUDA_VISIBLE_DEVICES` (and `SLURM_JOB_GPUS`) and its shard count "
              "in `SLURM_SHARDS_ON_NODE`. Asking for shards and GPUs together is refused "
              "(`Invalid generic resource (gres) specification: shard with gpu`); more "
              "shards than a GPU has gives `Requested node configuration is not "
              "available`. Shard jobs do not preempt, and a forecast plans a blocked shard "
              "job on a whole free GPU (it may start earlier, on a shared one)"),
    JobOption("", "gpus-per-node", "gpus_per_node", help="GPUs per node: [type:]N",
              metavar="[TYPE:]N", env="SBATCH_GPUS_PER_NODE", fields=("gpuType", "gpusPerNode"),
              put=lambda v: parse_gpus(v, "--gpus-per-node"), doc="GPUs per node, as `--gres`"),
    JobOption("G", "gpus", "gpus", help="GPUs for the whole job: [type:]N", metavar="[TYPE:]N",
              env="SBATCH_GPUS", fields=("gpuType", "gpus"),
              put=lambda v: parse_gpus(v, "--gpus"),
              doc="GPUs for the whole job, spread over its nodes"),
    JobOption("", "gpus-per-task", "gpus_per_task", help="GPUs per task: [type:]N",
              metavar="[TYPE:]N", env="SBATCH_GPUS_PER_TASK", fields=("gpuType", "gpusPerTask"),
              put=lambda v: parse_gpus(v, "--gpus-per-task"), doc="GPUs per task"),
    JobOption("t", "time", "time", help="time limit (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)",
              metavar="TIME", env="SBATCH_TIMELIMIT", fields=("timeLimitS",),
              # Slurm: "A time limit of zero requests that no time limit be imposed"
              put=lambda v: parse_duration(v, what="--time") or UNLIMITED,
              doc="time limit: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`, `UNLIMITED` "
              "(`0`: no limit). Default: the partition's `default_time`"),
    JobOption("p", "partition", "partition", help="partition(s), comma separated",
              metavar="P[,P...]", env="SBATCH_PARTITION", fields=("partitions",),
              put=lambda v: [p for p in v.split(",") if p],
              doc="partitions, in order of preference. Default: the default partition"),
    JobOption("A", "account", "account", help="account to charge", metavar="NAME",
              env="SBATCH_ACCOUNT", fields=("account",), doc="account"),
    JobOption("D", "chdir", "chdir", help="working directory of the job", metavar="DIR",
              fields=("workDir",),
              doc="working directory, relative to the current one. Default: the current "
              "directory"),
    JobOption("", "export", "export", help="ALL, NONE, or [ALL,]VAR[=value],...",
              metavar="ALL\\|NONE\\|[ALL,]VAR[=VAL],...", env="SBATCH_EXPORT",
              fields=("export", "environment"),
              doc="what of this environment the job gets "
              "([environment.md](environment.md#--export))"),
    JobOption("", "wrap", "wrap", help="wrap a command line in a /bin/sh script",
              metavar="COMMAND", doc="wrap a command line in a `/bin/sh` script. No script "
              "or arguments may be given with it"),
    JobOption("", "parsable", "parsable", FLAG, help="print only the job id"),
    JobOption("", "test-only", "test_only", FLAG,
              help="say when and where it would start; submit nothing",
              doc="submit nothing: check the job as a submission would, and print on stderr "
              "when and where one scheduler pass over the current queue would start it, as "
              "Slurm: `sbatch: Job N to start at TIME using C processors on nodes NODES in "
              "partition P` (N is the id it would get). A refusal prints `Job verification "
              "failed: ...` and exits 1"),
    JobOption("H", "hold", "hold", FLAG, help="submit held", fields=("hold",),
              doc="submit held (reason `JobHeldUser`)"),
    JobOption("d", "dependency", "dependency", help="after, afterok, afternotok, afterany, ...",
              metavar="LIST", fields=("dependency",), put=_dependency,
              doc="`after`, `afterany`, `afterok`, `afternotok`, `aftercorr`, `singleton` "
              "([scheduling.md](scheduling.md#dependencies))"),
    JobOption("a", "array", "array", help="job array indices: 0-15, 1,3,5, 0-15:4, %N",
              metavar="INDICES", env="SBATCH_ARRAY_INX", fields=("array",),
              put=_array,
              doc="`0-15`, `1,3,5`, `0-15:4`, each with an optional `%N` throttle "
              "([scheduling.md](scheduling.md#arrays))"),
    JobOption("b", "begin", "begin", help="start no earlier than this time", metavar="TIME",
              fields=("beginTime",), put=lambda v: parse_timestamp(v, now=time.time()),
              doc="not before this time (`now+3600`, `2026-12-03T08:00`, ...)"),
    JobOption("", "nice", "nice", OPTIONAL, const="100", help="lower the job's priority",
              metavar="N", fields=("nice",), put=_nice,
              doc="lower the priority by N (default 100). A negative N raises it: sbatch "
              "does not check who asks, unlike Slurm (`scontrol update ... Nice=` does)"),
    JobOption("", "exclusive", "exclusive", OPTIONAL, const="exclusive",
              help="whole nodes, not shared", env="SBATCH_EXCLUSIVE", fields=("exclusive",),
              put=lambda v: True, doc="whole nodes"),
    JobOption("w", "nodelist", "nodelist", help="nodes the job must have", metavar="HOSTLIST",
              fields=("nodelist",)),
    JobOption("x", "exclude", "exclude", help="nodes the job must not have",
              metavar="HOSTLIST", fields=("exclude",)),
    JobOption("", "comment", "comment", help="free text stored with the job", metavar="TEXT",
              fields=("comment",), doc="stored with the job (squeue `%k`, sacct `Comment`)"),
    JobOption("", "requeue", "requeue", OPTIONAL, const="yes",
              help="may be requeued (=expedite: at the top of the queue)", metavar="expedite",
              env="SBATCH_REQUEUE", fields=("requeue", "requeueExpedite"),
              put=lambda v: (True, True if v == "expedite" else None),
              doc="requeued when its node fails (below)"),
    JobOption("", "elastic", "elastic", FLAG,
              help="with -N MIN-MAX: a requeue runs at once at any size MIN..MAX",
              fields=("elastic",),
              doc="corral's own: after a node failure (or a drain) requeued at once onto "
              "its healthy nodes plus free ones, at any size from MIN to MAX "
              "([reliability.md](reliability.md))"),
    JobOption("", "no-requeue", "no_requeue", FLAG, help="never requeue",
              env="SBATCH_NO_REQUEUE", fields=("noRequeue",),
              doc="ends `NODE_FAIL` when its node fails (below)"),
    JobOption("", "signal", "signal", help="[{R|B}:]SIG[@secs] before the time limit",
              metavar="[{R\\|B}:]SIG[@SECS]", env="SBATCH_SIGNAL", fields=("signal",),
              doc="SIG before the time limit (below)"),
    JobOption("", "propagate", "propagate", OPTIONAL, const="ALL",
              help="give the job this shell's soft limits: ALL, NONE or AS,CORE,NOFILE,...",
              metavar="NAME,...", fields=("rlimits",), put=_propagate,
              doc="the job's processes start with these soft resource limits of sbatch's "
              "own process (`ulimit -S`): `ALL` (without a value), `NONE`, or some of `AS`, "
              "`CORE`, `CPU`, `DATA`, `FSIZE`, `MEMLOCK`, `NOFILE`, `NPROC`, `RSS`, `STACK`; "
              "on a node whose hard limit is lower, that. Without it a job starts with "
              "noded's limits (Slurm's default `PropagateResourceLimits=ALL` propagates all)"),
    JobOption("", "open-mode", "open_mode", help="append or truncate the output files",
              metavar="append\\|truncate", env="SBATCH_OPEN_MODE", fields=("openMode",),
              doc="append to the output files instead of truncating them"),
    JobOption("q", "qos", "qos", help="quality of service", metavar="NAME", env="SBATCH_QOS",
              fields=("qos",), doc="QOS. Default `normal`"),
    JobOption("", "reservation", "reservation", help="run inside this advance reservation",
              metavar="NAME", env="SBATCH_RESERVATION", fields=("reservation",)),
    JobOption("C", "constraint", "constraint",
              help="ignored with a warning: nodes have no features", metavar="LIST",
              fields=("constraint",), doc="stored, ignored with a warning (below)"),
    JobOption("", "wckey", "wckey", help="workload characterization key", metavar="KEY",
              env="SBATCH_WCKEY", fields=("wckey",), doc="stored without effect"),
    JobOption("", "mail-type", "mail_type",
              help="mail on BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT[_50|_80|_90], "
              "INVALID_DEPEND, ARRAY_TASKS (the cluster's [mail] must be on)",
              metavar="TYPE", fields=("mailType",),
              doc="mail when the job begins, ends, fails, ... (below); "
              "refused while the cluster's `[mail]` is off"),
    JobOption("", "mail-user", "mail_user", help="who gets the mail (default: you)",
              metavar="USER", fields=("mailUser",), put=_mail_user,
              doc="who gets the mail: a user name or an address, several separated by "
              "commas. Default: you"),
    JobOption("k", "no-kill", "no_kill", FLAG, help="do not kill the job when a node fails",
              fields=("noKill",), doc="stored without effect"),
    *CONTAINER_OPTIONS,
    JobOption("Q", "quiet", "quiet", FLAG, help="print nothing on success"),
    JobOption("v", "verbose", "verbose", COUNT, help="more messages", doc="accepted and ignored"),
    JobOption("W", "wait", "wait", FLAG, help="wait for the job to end",
              doc="return when the job has ended, with its exit code (below)"),
    JobOption("h", "help", "help", FLAG, help="show this help"),
    JobOption("V", "version", "version", FLAG, help="show the version"),
)
# fmt: on
# set by to_spec from more than the value: the name's default, the directory, the environment
_BY_HAND = {"job_name", "chdir", "export"}

#: Input environment variables sbatch reads, as Slurm documents them.
SBATCH_ENV = {o.env: o.dest for o in JOB_OPTIONS if o.env}


#: options taken so that scripts written for Slurm run, but without effect here: each
#: gets a warning on stderr, never silence (a job that asked for a node feature must
#: not look as if it got one). Mail is sent, or refused by ctld where [mail] is off.
IGNORED = {
    "constraint": "--constraint is ignored: corral places jobs by no node feature but "
    "`container` (--container-image), so the job may run on any node of its partition",
}


def ignored_warnings(prog: str, opts: dict[str, Any]) -> list[str]:
    """``PROG: warning: ...`` for each option given that has no effect (once each)."""
    said = dict.fromkeys([*(IGNORED[k] for k in IGNORED if k in opts), *container_warnings(opts)])
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
        settle_pairs({}, opts)
    for layer in (env_options(environ), pyxis_layer(environ), cli):
        settle_pairs(opts, layer)  # --container-X and --no-container-X: the later word
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
    its keys are checked against the proto by mypy (corral/wire/json_types.py) and by
    tests/unit/test_job_options.py (the table's ``fields``)."""
    spec: t.JobSpec = {"script": script}
    work_dir = g.get("chdir") or cwd
    if not os.path.isabs(work_dir):
        work_dir = os.path.normpath(os.path.join(cwd, work_dir))
    spec["workDir"] = work_dir
    spec["submitDir"] = cwd
    from corral.textcheck import check_one_line  # ctld's own check, made first

    spec["name"] = check_one_line(g.get("job_name") or default_name, "job name")
    spec["argv"] = argv
    spec["export"] = g.get("export", "ALL")
    spec["environment"] = with_umask(export_environment(spec["export"], environ), environ)
    fields: Any = spec  # each entry's fields are JobSpec keys: the test holds them so
    for opt in JOB_OPTIONS:  # in the table's order: a later --gpus* sets gpuType last
        if opt.dest not in g or not opt.fields or opt.dest in _BY_HAND:
            continue
        value = g[opt.dest] if opt.put is None else opt.put(g[opt.dest])
        values = value if len(opt.fields) > 1 else (value,)
        for name, item in zip(opt.fields, values, strict=True):
            if isinstance(item, dict):  # a message's part (--container-*): merged
                fields[name] = {**fields.get(name, {}), **item}
            elif item is not None:
                fields[name] = item
    if "container" in spec:
        container = resolve(fields["container"], work_dir)
        if container is None:
            del spec["container"]  # without an image or name: ignored, as Pyxis
        else:
            spec["container"] = container
    spec["submitLine"] = submit_line
    spec["submitHost"] = _socket.gethostname()  # socket.gethostname, without socket
    return spec
