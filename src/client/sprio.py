"""sprio: the factors that make up each pending job's priority.

Columns as Slurm 22.05's (``%Y`` priority, ``%A`` age, ``%F`` fair-share, ``%J`` job
size, ``%P`` partition, ``%Q`` QOS, ``%N`` nice; lower-case letters print the factor
normalized to [0, 1], as ``-n``). Like Slurm, the default format leaves out factors
whose weight is zero; corral has no site, association or TRES factors, so those
letters print 0. Output is a pure function of the replies (``format_priorities``).
"""

from __future__ import annotations

import sys

from client.common import client, run
from client.fmt import (
    Column,
    Reported,
    call,
    check_format,
    justify,
    parse_format,
    parse_job_ids,
    parse_users,
    render,
    split_list,
)
from client.options import FLAG, Option, OptionParser, parse_command
from client.views.job import Job

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from client.views.job import Factors
    from corral.wire import json_types as t

PROG = "sprio"
DEFAULT_FORMAT = "%.15i %9r %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %20T"
LONG_FORMAT = "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"
NORM_FORMAT = "%.15i %9r %.10y %.10s %.10a %.10b %.10f %.10j %.10p %.10q %20t"
# letter -> the weight that, when zero, leaves the column out of a default format
WEIGHT_OF = {"A": "AGE", "F": "FAIRSHARE", "J": "JOBSIZE", "P": "PARTITION", "Q": "QOS"}
UNWEIGHTED = set("SBT")  # site, association, TRES: corral has none of them


class Row:
    __slots__ = ("factors", "job", "weights")

    def __init__(self, job: Job, weights: Mapping[str, int]) -> None:
        self.job = job
        self.factors = job.priority_factors
        self.weights = weights


def _weighted(factor: Callable[[Factors], float], weight: str) -> Callable[[Row], str]:
    return lambda r: str(round(factor(r.factors) * r.weights.get(weight, 0)))


def _norm(factor: Callable[[Factors], float]) -> Callable[[Row], str]:
    return lambda r: f"{factor(r.factors):.7f}"


def _age(f: Factors) -> float:
    return f.age


def _fairshare(f: Factors) -> float:
    return f.fairshare


def _job_size(f: Factors) -> float:
    return f.job_size


def _partition_factor(f: Factors) -> float:
    return f.partition


def _qos(f: Factors) -> float:
    return f.qos


def _zero(r: Row) -> str:
    return "0"


def _partition(r: Row) -> str:
    return r.job.partition


COLUMNS: dict[str, Column] = {
    "i": Column("JOBID", lambda r: str(r.job.job_id), cut=False),
    "r": Column("PARTITION", _partition),
    "u": Column("USER", lambda r: r.job.user),
    "Y": Column("PRIORITY", lambda r: str(r.job.priority)),
    "y": Column("PRIORITY", lambda r: f"{r.job.priority / 0xFFFFFFFF:.7f}"),
    "S": Column("SITE", _zero),
    "s": Column("SITE", _zero),
    "A": Column("AGE", _weighted(_age, "AGE")),
    "a": Column("AGE", _norm(_age)),
    "B": Column("ASSOC", _zero),
    "b": Column("ASSOC", _zero),
    "F": Column("FAIRSHARE", _weighted(_fairshare, "FAIRSHARE")),
    "f": Column("FAIRSHARE", _norm(_fairshare)),
    "J": Column("JOBSIZE", _weighted(_job_size, "JOBSIZE")),
    "j": Column("JOBSIZE", _norm(_job_size)),
    "P": Column("PARTITION", _weighted(_partition_factor, "PARTITION")),
    "p": Column("PARTITION", _norm(_partition_factor)),
    "Q": Column("QOS", _weighted(_qos, "QOS")),
    "q": Column("QOS", _norm(_qos)),
    "N": Column("NICE", lambda r: str(r.factors.nice)),
    "n": Column("NICE", lambda r: str(r.factors.nice)),
    "T": Column("TRES", lambda r: ""),
    "t": Column("TRES", lambda r: ""),
}


def _drop_unweighted(fmt: str, weights: Mapping[str, int]) -> str:
    """A default format without the factors whose weight is zero (as Slurm)."""
    kept = []
    for piece in fmt.split(" "):
        letter = piece[-1]
        upper = letter.upper()
        if upper in UNWEIGHTED or (upper in WEIGHT_OF and not weights.get(WEIGHT_OF[upper])):
            continue
        kept.append(piece)
    return " ".join(kept)


def format_priorities(
    jobs: t.GetJobsResponse,
    weights: Mapping[str, int],
    fmt: str,
    *,
    header: bool = True,
    default: bool = True,
) -> str:
    if default:
        fmt = _drop_unweighted(fmt, weights)
    prefix, specs = parse_format(fmt)
    check_format(specs, COLUMNS, "sprio")
    pending = (job for job in map(Job, jobs.get("jobs", [])) if job.state_name == "PENDING")
    rows = sorted((Row(job, weights) for job in pending), key=lambda r: r.job.job_id)
    lines = [render(prefix, specs, COLUMNS, None)] if header else []
    lines.extend(render(prefix, specs, COLUMNS, r) for r in rows)
    return "".join(line + "\n" for line in lines)


def format_weights(weights: Mapping[str, int]) -> str:
    """``sprio -w``: the configured weights, in the default columns."""
    fmt = _drop_unweighted("%.15i %9r %.10Y %.10A %.10F %.10J %.10P %.10Q", weights)
    prefix, specs = parse_format(fmt)
    header = render(prefix, specs, COLUMNS, None)
    cells = []
    for spec in specs:
        if spec.letter == "i":
            value = "Weights"
        elif spec.letter in WEIGHT_OF:
            value = str(weights.get(WEIGHT_OF[spec.letter], 0))
        else:
            value = ""
        cells.append(justify(value, spec.width, spec.right) + spec.suffix)
    return header + "\n" + prefix + "".join(cells) + "\n"


OPTIONS = (
    Option("h", "noheader", "noheader", FLAG, help="no header line"),
    Option("j", "jobs", "jobs", help="comma separated list of job ids"),
    Option("l", "long", "long", FLAG, help="more columns (user, nice)"),
    Option("n", "norm", "norm", FLAG, help="normalized factors"),
    Option("o", "format", "format", help="output format (%[.][size]type)"),
    Option("p", "partition", "partition", help="comma separated list of partitions"),
    Option("u", "user", "user", help="comma separated list of users"),
    Option("w", "weights", "weights", FLAG, help="print the configured weights"),
    Option("", "help", "help", FLAG, help="this help"),
    Option("", "usage", "usage", FLAG, help="this help"),
    Option("V", "version", "version", FLAG, help="print the version"),
)


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...]")
    opts = parse_command(parser, argv)
    if opts is None:
        return 0
    api = client()
    try:
        info = call(lambda: api.get_cluster_info({}), "sprio")
        weights = {k: int(v) for k, v in (info.get("priorityWeights") or {}).items()}
        if opts.get("weights"):
            sys.stdout.write(format_weights(weights))
            return 0
        flt: t.JobFilter = {"states": ["JOB_STATE_PENDING"]}
        if opts.get("jobs"):
            flt["jobIds"] = parse_job_ids(opts["jobs"])
        if opts.get("user"):
            flt["users"] = parse_users(opts["user"])
        if opts.get("partition"):
            flt["partitions"] = split_list(opts["partition"])
        jobs = call(lambda: api.get_jobs({"filter": flt}), "sprio")
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    fmt = opts.get("format") or ""
    default = (
        NORM_FORMAT if opts.get("norm") else LONG_FORMAT if opts.get("long") else DEFAULT_FORMAT
    )
    if opts.get("jobs") and not jobs.get("jobs"):
        sys.stderr.write("Unable to find jobs matching user/id(s) specified\n")
        return 1
    sys.stdout.write(
        format_priorities(
            jobs, weights, fmt or default, header=not opts.get("noheader"), default=not fmt
        )
    )
    return 0


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
