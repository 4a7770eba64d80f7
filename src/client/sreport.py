"""sreport: usage reports from the job records, in Slurm's layouts.

``cluster AccountUtilizationByUser``, ``cluster UserUtilizationByAccount``, ``cluster
Utilization`` and ``user TopUsage``, with ``-T/--tres`` (cpu by default; ``gres/gpu``
for GPU time), ``-t`` (Minutes by default; Hours, Seconds, Percent, HourPer, ...),
``start=``/``end=`` (Slurm's time forms, rounded to the hour as Slurm's rollups are),
``format=``, ``-P``/``-p``/``-n``. ctld adds up the stored runs (ReportUsage); the
account tree's sums, units and columns are made here by pure functions
(``format_report``), so tests compare whole outputs.
"""

from __future__ import annotations

import sys
import time

from client.acctfields import AcctField, acct_lines
from client.common import client, run
from client.fmt import split_list
from client.options import COUNT, FLAG, LIST, Option, OptionParser, answered
from client.sreport_tree import Usage, account_rows, add, user_rows
from client.views.accounting import UsageRecord
from corral.errors import InvalidOption
from corral.slurmfmt import format_timestamp, local_midnight

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from corral.wire import json_types as t

PROG = "sreport"
TRES_NAMES = ("cpu", "gres/gpu", "mem", "node", "billing")
BANNER = "-" * 80

# -t: (name, least prefix, what the banner says); "per" formats add the percentage
TIME_FORMATS = (
    ("SecPer", 6, "Seconds/Percentage of Total"),
    ("MinPer", 6, "Minutes/Percentage of Total"),
    ("HourPer", 6, "Hours/Percentage of Total"),
    ("Seconds", 1, "Seconds"),
    ("Minutes", 1, "Minutes"),
    ("Hours", 1, "Hours"),
    ("Percent", 1, "Percentage of Total"),
)

# format= fields of each report: (name, least prefix, header, width); Slurm's widths
_ASSOC_FIELDS = (
    ("Accounts", 2, "Account", 15),
    ("Cluster", 2, "Cluster", 9),
    ("Login", 1, "Login", 9),
    ("Proper", 2, "Proper Name", 15),
    ("TresCount", 5, "TRES Count", 10),
    ("TresName", 5, "TRES Name", 14),
    ("Used", 1, "Used", 10),
    ("Energy", 1, "Energy", 10),
)
_UTIL_FIELDS = (
    ("allocated", 2, "Allocated", 12),
    ("Cluster", 2, "Cluster", 9),
    ("down", 1, "Down", 10),
    ("idle", 1, "Idle", 12),
    ("PlannedDown", 2, "PLND Down", 10),
    ("reported", 3, "Reported", 12),
    ("reserved", 3, "Reserved", 9),
    ("TresCount", 5, "TRES Count", 10),
    ("TresName", 5, "TRES Name", 14),
)
_USER_FIELDS = (
    ("Accounts", 1, "Account", 15),
    ("Cluster", 1, "Cluster", 9),
    ("Energy", 1, "Energy", 10),
    ("Login", 1, "Login", 9),
    ("Proper", 1, "Proper Name", 15),
    ("TresName", 5, "TRES Name", 14),
    ("Used", 1, "Used", 10),
)
# the columns that hold amounts of time: their width follows the largest amount
_TIME_COLUMNS = frozenset(
    {"Used", "Energy", "Allocated", "Down", "Idle", "PLND Down", "Reported", "Reserved"}
)

# report -> (title, default fields, default fields with -T, field table)
REPORTS: dict[str, tuple[str, str, str, tuple[tuple[str, int, str, int], ...]]] = {
    "AccountUtilizationByUser": (
        "Cluster/Account/User Utilization",
        "Cluster,Ac,Login,Proper,Used,Energy",
        "Cluster,Ac,Login,Proper,TresName,Used",
        _ASSOC_FIELDS,
    ),
    "UserUtilizationByAccount": (
        "Cluster/User/Account Utilization",
        "Cluster,Login,Proper,Ac,Used,Energy",
        "Cluster,Login,Proper,Ac,TresName,Used",
        _ASSOC_FIELDS,
    ),
    "Utilization": (
        "Cluster Utilization",
        "Cl,al,d,planned,i,res,rep",
        "Cl,TresName,al,d,planned,i,res,rep",
        _UTIL_FIELDS,
    ),
    "TopUsage": (
        "Users",
        "Cl,L,P,A,U,Energy",
        "Cl,L,P,A,TresName,Used",
        _USER_FIELDS,
    ),
}
COMMANDS = {
    "cluster": ("AccountUtilizationByUser", "UserUtilizationByAccount", "Utilization"),
    "user": ("TopUsage",),
}


# ---------------------------------------------------------------- words and values


def _matches(word: str, name: str, least: int) -> bool:
    """Slurm's ``xstrncasecmp(name, word, MAX(len(word), least))``: a prefix of at
    least ``least`` characters."""
    return len(word) >= least and name.lower().startswith(word.lower())


def time_format(word: str) -> tuple[str, str]:
    """-t: the format's name and what the banner says."""
    for name, least, banner in TIME_FORMATS:
        if _matches(word, name, least):
            return name, banner
    raise InvalidOption(f"unknown time format {word}")


def tres_list(value: str | None) -> list[str]:
    if not value:
        return ["cpu"]
    names: list[str] = []
    for item in split_list(value):
        low = item.lower()
        if low == "all":
            names.extend(n for n in TRES_NAMES if n not in names)
            continue
        if low == "gres/gpu" or low.startswith("gres/gpu:"):
            low = "gres/gpu"  # GPU types are not counted apart
        if low not in TRES_NAMES:
            raise InvalidOption(f"invalid TRES {item}: known are {', '.join(TRES_NAMES)}")
        if low not in names:
            names.append(low)
    return names


def amount(seconds: float, total: float, fmt: str) -> str:
    """One amount in the -t format (Slurm rounds with printf's %.0f)."""
    secs = int(seconds)
    pct = secs / (total or 1) * 100
    if fmt == "Seconds":
        return str(secs)
    if fmt == "Minutes":
        return f"{secs / 60:.0f}"
    if fmt == "Hours":
        return f"{secs / 3600:.0f}"
    if fmt == "Percent":
        return f"{pct:.2f}%"
    if fmt == "SecPer":
        return f"{secs}({pct:.2f}%)"
    if fmt == "MinPer":
        return f"{secs / 60:.0f}({pct:.2f}%)"
    return f"{secs / 3600:.0f}({pct:.2f}%)"  # HourPer


def amount_width(largest: float, fmt: str) -> int:
    """Slurm sizes an amount column for its largest value in seconds: 8 up to 10^8,
    one more per power of ten above; 9 more with a percentage."""
    width, order = 8, 10**8
    while order < 10**25 and largest >= order:
        width += 1
        order *= 10
    return width + (9 if fmt.endswith("Per") else 0)


def proper_name(user: str) -> str:
    import pwd

    try:
        return pwd.getpwnam(user).pw_gecos.split(",")[0]
    except (KeyError, ValueError):
        return ""


# ---------------------------------------------------------------- the window


def _rounded(epoch: float) -> float:
    """To the nearest hour, as Slurm's reports round (half a minute up, half an hour up)."""
    t = time.localtime(epoch)
    minute = t.tm_min + (1 if t.tm_sec >= 30 else 0)
    hour = t.tm_hour + (1 if minute >= 30 else 0)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hour, 0, 0, 0, 0, -1))


def report_window(start: str | None, end: str | None, now: float) -> tuple[float, float]:
    """start=/end= as Slurm reads them: by default yesterday, midnight to midnight; an
    end after now is now; both rounded to the hour; at least an hour long."""
    from client.sacct import parse_when

    until = _rounded(min(parse_when(end, now), now)) if end else local_midnight(now)
    since = _rounded(parse_when(start, now)) if start else local_midnight(now, 1)
    if until - since < 3600:
        until = since + 3600
    return since, until


# ---------------------------------------------------------------- the command line

OPTIONS = (
    Option("a", "all_clusters", "all_clusters", FLAG, help="(no effect: one cluster)"),
    Option("h", "help", "help", FLAG, help="this help"),
    Option("M", "cluster", "cluster", LIST, help="(no effect: one cluster)"),
    Option("n", "noheader", "noheader", FLAG, help="no banner and no header lines"),
    Option("p", "parsable", "parsable", FLAG, help="'|' after every field"),
    Option("P", "parsable2", "parsable2", FLAG, help="'|' between fields"),
    Option("Q", "quiet", "quiet", FLAG, help="(accepted for compatibility)"),
    Option("t", "", "time", help="Minutes (default), Hours, Seconds, Percent, HourPer, ..."),
    Option("T", "tres", "tres", help="TRES to report: cpu (default), gres/gpu, mem, node, ALL"),
    Option("v", "verbose", "verbose", COUNT, help="(accepted for compatibility)"),
    Option("V", "version", "version", FLAG, help="print the version"),
    Option("", "usage", "usage", FLAG, help="this help"),
)
USAGE = (
    "sreport [OPTIONS] cluster AccountUtilizationByUser|UserUtilizationByAccount|"
    "Utilization [start=TIME] [end=TIME] [accounts=A,...] [users=U,...] [format=F,...]\n"
    "       sreport [OPTIONS] user TopUsage [TopCount=N] [group] [start=...] [end=...]"
)


def parse_argv(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Options anywhere (GNU getopt permutes, and people write ``-t hours`` last), and
    the command's words in order."""
    parser = OptionParser(PROG, OPTIONS, usage=USAGE)
    opts: dict[str, Any] = {}
    words: list[str] = []
    rest = list(argv)
    while rest:
        found, rest = parser.parse(rest)
        for key, value in found.items():
            if key == "verbose":
                opts[key] = int(opts.get(key, 0)) + int(value)
            else:
                opts[key] = value
        if rest:
            words.append(rest.pop(0))
    opts["_help"] = parser.help_text()
    return opts, words


def _unquote(value: str) -> str:
    return value.strip().strip("'\"")


def parse_conditions(report: str, words: Sequence[str]) -> dict[str, Any]:
    """The report's conditions: ``Start=``, ``End=``, ``Accounts=``, ``Users=``,
    ``Format=``, ``TopCount=``, ``Group``, ``Tree``, ``Clusters=`` (case-insensitive
    prefixes); a bare word names users (clusters for Utilization)."""
    cond: dict[str, Any] = {"accounts": [], "users": [], "format": [], "top": 10}
    for word in words:
        key, eq, value = word.partition("=")
        value = _unquote(value)
        if not eq:
            if _matches(key, "all_clusters", 1) and report != "TopUsage":
                continue
            if report == "TopUsage" and _matches(key, "group", 1):
                cond["group"] = True
            elif _matches(key, "Tree", 4) and report != "Utilization":
                cond["tree"] = True
            elif report == "Utilization":
                continue  # a cluster's name: there is one
            else:
                cond["users"] += split_list(word)
        elif _matches(key, "Users", 1) and report != "Utilization":
            cond["users"] += split_list(value)
        elif report != "Utilization" and (
            _matches(key, "Accounts", 1 if report == "TopUsage" else 2) or _matches(key, "Acct", 4)
        ):
            cond["accounts"] += split_list(value)
        elif _matches(key, "Clusters", 1):
            continue
        elif _matches(key, "End", 1):
            cond["end"] = value
        elif _matches(key, "Format", 1):
            cond["format"] += split_list(value)
        elif _matches(key, "Start", 1):
            cond["start"] = value
        elif report == "TopUsage" and _matches(key, "TopCount", 1):
            if not value.lstrip("-").isdigit():
                raise InvalidOption(f"Invalid value for TopCount ({value})")
            cond["top"] = max(int(value), 0)
        else:
            raise InvalidOption(f"Unknown condition: {word}\nUse keyword set to modify value")
    return cond


def report_fields(report: str, spec: Sequence[str], with_tres: bool) -> list[tuple[str, int]]:
    """(header, width) of each column asked for (or the report's defaults)."""
    _, plain, tres, table = REPORTS[report]
    items = list(spec) or (tres if with_tres else plain).split(",")
    out: list[tuple[str, int]] = []
    for item in items:
        name, pct, width_text = item.strip().partition("%")
        found = next((f for f in table if _matches(name, f[0], f[1])), None)
        if found is None:
            raise InvalidOption(f"Unknown field '{name}'")
        width = found[3]
        if pct and width_text.strip().lstrip("-").isdigit() and int(width_text) != 0:
            width = int(width_text)
        out.append((found[2], width))
    return out


def pick_report(words: Sequence[str]) -> tuple[str, list[str]]:
    if not words:
        raise InvalidOption(f"no report asked for\nUsage: {USAGE}")
    command = next((c for c in COMMANDS if _matches(words[0], c, 1)), None)
    if command is None:
        raise InvalidOption(f"invalid keyword: {words[0]}\nUsage: {USAGE}")
    if len(words) < 2:
        raise InvalidOption(f"{command}: which report? ({', '.join(COMMANDS[command])})")
    report = next((r for r in COMMANDS[command] if _matches(words[1], r, 2)), None)
    if report is None:
        raise InvalidOption(
            f"Not valid report {words[1]}\nValid {command} reports are "
            + ", ".join(f'"{r}"' for r in COMMANDS[command])
        )
    return report, list(words[2:])


# ---------------------------------------------------------------- the reports


def _banner(title: str, start: float, end: float, usage: str, secs: bool) -> list[str]:
    span = f" ({int(end - start)} secs)" if secs else ""
    return [
        BANNER,
        f"{title} {format_timestamp(start)} - {format_timestamp(end - 1)}{span}",
        f"Usage reported in {usage}",
        BANNER,
    ]


def format_report(
    reply: t.ReportUsageResponse,
    report: str,
    cond: dict[str, Any],
    *,
    start: float,
    end: float,
    tres: Sequence[str] = ("cpu",),
    tres_given: bool = False,
    time_fmt: str = "Minutes",
    header: bool = True,
    parsable: str = "",
) -> str:
    """The whole output of one report (with newlines)."""
    fmt, fmt_banner = time_format(time_fmt)
    title, *_ = REPORTS[report]
    cluster = reply.get("cluster", "")
    window = end - start
    capacity = {k: float(v) for k, v in (reply.get("capacity") or {}).items()}
    fields = report_fields(report, cond.get("format", []), tres_given)
    usage = fmt_banner if fmt == "Percent" else f"{'TRES' if tres_given else 'CPU'} {fmt_banner}"

    rows: list[dict[str, str]] = []
    largest: dict[str, float] = {}

    def note(column: str, seconds: float) -> None:
        largest[column] = max(largest.get(column, 0.0), seconds)

    if report == "Utilization":
        used: Usage = {}
        for rec in map(UsageRecord, reply.get("records", [])):
            add(used, rec.tres_s)
        for name in tres:
            reported = capacity.get(name, 0.0) * window
            alloc = used.get(name, 0.0)
            idle = max(reported - alloc, 0.0)
            reported = alloc + idle
            values = {"Allocated": alloc, "Down": 0.0, "PLND Down": 0.0, "Idle": idle}
            values |= {"Reserved": 0.0, "Reported": reported}
            for column, secs in values.items():
                note(column, secs)
            row = {c: amount(s, reported, fmt) for c, s in values.items()}
            row |= {"Cluster": cluster, "TRES Name": name}
            row["TRES Count"] = str(int(capacity.get(name, 0.0)))
            rows.append(row)
    else:
        if report == "AccountUtilizationByUser":
            entries = account_rows(reply, cond.get("accounts", []))
        else:
            group = bool(cond.get("group")) and report == "TopUsage"
            entries = user_rows(reply, tres[0], group)
            if report == "TopUsage":
                entries = entries[: cond.get("top", 10)]
        names: dict[str, str] = {}
        for account, user, used in entries:
            if user and user not in names:
                names[user] = proper_name(user)
            for name in tres:
                total = capacity.get(name, 0.0) * window
                secs = used.get(name, 0.0)
                note("Used", secs)
                rows.append(
                    {
                        "Cluster": cluster,
                        "Account": account,
                        "Login": user,
                        "Proper Name": names.get(user, ""),
                        "TRES Name": name,
                        "TRES Count": str(int(capacity.get(name, 0))),
                        "Used": amount(secs, total, fmt),
                        "Energy": "0",
                    }
                )
    columns = [
        AcctField(h, amount_width(largest.get(h, 0.0), fmt) if h in _TIME_COLUMNS else w, "s")
        for h, w in fields
    ]
    for col in columns:
        if col.name in _TIME_COLUMNS:
            col.kind = "n"  # amounts are never cut
    lines: list[str] = []
    if header:
        if report == "TopUsage":
            title = f"Top {cond.get('top', 10)} {title}"
        lines += _banner(title, start, end, usage, secs=report != "Utilization")
    cells = [[r.get(c.name, "") for c in columns] for r in rows]
    lines += acct_lines(columns, cells, header=header, parsable=parsable)
    return "".join(line + "\n" for line in lines)


def main_body(argv: Sequence[str]) -> int:
    opts, words = parse_argv(argv)
    if answered(opts["_help"], opts):
        return 0
    report, rest = pick_report(words)
    cond = parse_conditions(report, rest)
    tres = tres_list(opts.get("tres"))
    time_fmt = opts.get("time") or "Minutes"
    time_format(time_fmt)  # a bad -t fails before the controller is asked
    report_fields(report, cond["format"], bool(opts.get("tres")))
    start, end = report_window(cond.get("start"), cond.get("end"), time.time())
    api = client()
    request: t.ReportUsageRequest = {"bounds": [start, end]}
    if cond["users"]:
        request["users"] = cond["users"]
    if cond["accounts"] and report != "AccountUtilizationByUser":  # that one walks sub-accounts
        request["accounts"] = cond["accounts"]
    reply = api.report_usage(request)  # a failure: "sreport: error: ...", exit 1
    parsable = "P" if opts.get("parsable2") else "p" if opts.get("parsable") else ""
    sys.stdout.write(
        format_report(
            reply,
            report,
            cond,
            start=start,
            end=end,
            tres=tres,
            tres_given=bool(opts.get("tres")),
            time_fmt=time_fmt,
            header=not opts.get("noheader"),
            parsable=parsable,
        )
    )
    return 0


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
