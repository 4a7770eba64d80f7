"""scontrol: show jobs, nodes and partitions in Slurm's key=value layout; hold/release.

``show job`` prints what Slurm 22.05 prints, line for line (tools split it on spaces
and ``=``), a blank line after each record; ``-o`` puts a record on one line. The
records are pure functions of the GetJobs/GetNodes/GetPartitions replies.
"""

from __future__ import annotations

import sys

from client.common import client, run
from client.fmt import Reported, call, job_filter
from client.options import COUNT, FLAG, Option, OptionParser, answered, version_line
from client.scontrol_show import (
    complete_state,
    expand_path,
    format_jobs,
    format_nodes,
    format_partitions,
    job_tres,
    std_paths,
)
from client.scontrol_update import HOLD_ACTIONS, hold_messages, top, update, update_holds
from corral.errors import CorralError, InvalidNodeName, InvalidOption

__all__ = ["complete_state", "expand_path", "format_jobs", "format_nodes", "format_partitions"]
__all__ += ["hold_messages", "job_tres", "main", "main_body", "std_paths"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TypeVar

    from corral.wire import json_types as t

    Reply = TypeVar("Reply")

PROG = "scontrol"
ON_NODE = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})


# ---------------------------------------------------------------- commands


def show(words: Sequence[str], one_liner: bool) -> int:
    if not words:
        raise Reported("too few arguments for keyword:show")
    entity, args = words[0].lower(), list(words[1:])
    if len(args) > 1:
        raise Reported("too many arguments for keyword:show")
    name = args[0] if args else ""
    if entity in ("hostnames", "hostlist", "hostlistsorted"):
        return show_hosts(entity, name)
    if _is(entity, "jobs", 1):
        return show_jobs(name, one_liner)
    if _is(entity, "nodes", 1):
        return show_nodes(name, one_liner)
    if _is(entity, "partitions", 1):
        return show_partitions(name, one_liner)
    if _is(entity, "reservations", 1):
        from client import scontrol_resv

        sys.stdout.write(scontrol_resv.show(name, one_liner))
        return 0
    raise Reported(f"invalid entity:{words[0]} for keyword:show ")


def show_hosts(entity: str, expr: str) -> int:
    """``hostnames``: one name a line; ``hostlist``/``hostlistsorted``: the expression.
    With no list, SLURM_JOB_NODELIST (as Slurm's man page says), else SLURM_NODELIST (what
    a real 22.05 reads); a list starting with / is a file."""
    import os

    from corral import hostlist

    expr = expr or os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST", "")
    if expr.startswith("/"):
        try:
            with open(expr) as fh:
                expr = ",".join(fh.read().split())
        except OSError as exc:
            raise Reported(f"Unable to read file {expr}: {exc.strerror}") from None
    try:
        names = hostlist.expand(expr) if expr else []
    except CorralError as exc:
        raise Reported(f"Invalid hostlist: {expr} ({exc})") from None
    if not names:  # a real 22.05 says so and exits 0 (checked): scripts go on
        sys.stderr.write("scontrol: error: host list is empty\n")
        return 0
    if entity == "hostnames":
        sys.stdout.write("".join(n + "\n" for n in names))
    else:
        if entity == "hostlistsorted":
            names.sort(key=hostlist.sort_key)
        sys.stdout.write(hostlist.ranged(names) + "\n")
    return 0


def _is(word: str, keyword: str, least: int) -> bool:
    """Slurm accepts any unambiguous prefix of a keyword (``sh j``, ``show part``)."""
    return len(word) >= least and keyword.startswith(word)


def load(rpc: Callable[[], Reply], what: str) -> Reply:
    return call(rpc, f"{what} error", keep=(InvalidNodeName,))


def show_jobs(job_id: str, one_liner: bool) -> int:
    request: t.GetJobsRequest = {}
    if job_id:
        try:
            request["filter"] = job_filter(job_id)
        except InvalidOption:
            raise Reported("scontrol_print_job error: Invalid job id specified") from None
    reply = load(lambda: client().get_jobs(request), "slurm_load_jobs")
    sys.stdout.write(format_jobs(reply, one_liner))
    return 0


def show_nodes(name: str, one_liner: bool) -> int:
    try:
        nodes: t.GetNodesRequest = {"names": [name]} if name else {}
        reply = load(lambda: client().get_nodes(nodes), "slurm_load_node")
    except InvalidNodeName:
        raise Reported(f"Node {name} not found") from None
    sys.stdout.write(format_nodes(reply, one_liner))
    return 0


def show_partitions(name: str, one_liner: bool) -> int:
    try:
        request: t.GetPartitionsRequest = {"names": [name]} if name else {}
        reply = load(lambda: client().get_partitions(request), "slurm_load_partitions")
    except Reported:
        if name:
            raise Reported(f"Partition {name} not found") from None  # Slurm's words
        raise
    partitions = reply.get("partitions", [])
    if name and not partitions:
        raise Reported(f"Partition {name} not found")
    sys.stdout.write(format_partitions(partitions, one_liner))
    return 0


OPTIONS = (
    Option("a", "all", "all", FLAG, help="(no effect: hidden partitions are shown)"),
    Option("d", "details", "details", FLAG, help="(accepted for compatibility)"),
    Option("h", "help", "help", FLAG, help="this help"),
    Option("o", "oneliner", "oneliner", FLAG, help="one line per record"),
    Option("Q", "quiet", "quiet", FLAG, help="no error messages"),
    Option("v", "verbose", "verbose", COUNT, help="(accepted for compatibility)"),
    Option("V", "version", "version", FLAG, help="print the version"),
)


def dispatch(words: Sequence[str], one_liner: bool) -> int:
    command = words[0].lower()
    if len(command) >= 3 and "show".startswith(command):
        return show(words[1:], one_liner)
    if command in HOLD_ACTIONS:
        return update_holds(command, words[1:])
    if len(command) >= 3 and "update".startswith(command):
        if any(w.lower().startswith("reservationname=") for w in words[1:]):
            from client import scontrol_resv

            scontrol_resv.update(words[1:])
            return 0
        return update(words[1:])
    if command == "create":
        from client import scontrol_resv

        sys.stdout.write(scontrol_resv.create(words[1:]))
        return 0
    if command == "delete":
        from client import scontrol_resv

        scontrol_resv.delete(words[1:])
        return 0
    if command == "top":
        return top(words[1:])
    if command == "write":  # scontrol write batch_script JOBID [FILE]
        if len(words) < 2 or words[1].lower() != "batch_script":
            raise Reported(f"invalid write entity: {' '.join(words[1:2]) or '(none)'}")
        from client.batchscript import write_batch_script

        return write_batch_script(words[2:])
    if command == "power":  # scontrol power up|down [asap|force] NODELIST
        from client import nodepower

        return nodepower.power(words[1:])
    if len(command) >= 5 and "reconfigure".startswith(command):  # Slurm takes "reconfig"
        from client.scontrol_reconfig import reconfigure

        return reconfigure(words[1:])
    if command == "ping":
        from client.ping import ping_all, ping_lines

        pinged = ping_all()
        sys.stdout.write(ping_lines(pinged))
        return 0 if any(p.primary for p in pinged) else 1
    if command in ("version", "-v"):
        sys.stdout.write(version_line())
        return 0
    raise Reported(f"invalid keyword: {words[0]}")


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...] [command]")
    # options may follow the command words too (getopt permutes, as in Slurm)
    flags = [a for a in argv if a.startswith("-") and a != "-"]
    opts: dict[str, Any]
    opts, _ = parser.parse(flags)
    words = [a for a in argv if a not in flags]
    if not words and not opts.get("version"):
        opts["help"] = True  # a bare scontrol: its help (no interactive mode here)
    if answered(parser, opts):
        return 0
    try:
        return dispatch(words, bool(opts.get("oneliner")))
    except Reported as exc:
        if not opts.get("quiet"):
            sys.stderr.write(exc.message + "\n")
        return 1


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
