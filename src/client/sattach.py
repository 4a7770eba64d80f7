"""sattach JOBID.STEPID: attach to a running step's I/O, as Slurm's sattach.

The step's owner only (ctld's AttachStep gives its credential to no one else). Each
node of the step is reached over its task stream (corral/stepstream.py: ATTACH, the
credential proven as srun proves it); noded sends the step's recent output first,
then what follows, and the tasks' exits. Input goes to every task whose stdin is
open (``--input-filter``: one task). sattach ends when every task it sees has ended;
Ctrl-C, or the end of its own input with nothing left to read, detaches it and the
step goes on. Standard library only, as srun.
"""

from __future__ import annotations

import contextlib
import os
import sys

from client.common import client, run
from client.options import COUNT, FLAG, Option, OptionParser, answered
from client.poller import EVENT_READ, EVENT_WRITE, Poller
from client.taskstream import NodeStream
from client.views.step import Step
from corral import signals
from corral import stepstream as ss
from corral.errors import CorralError, InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from corral.wire import json_types as t

PROG = "sattach"
USAGE = f"Usage: {PROG} [options] <jobid.stepid>\n"
HELP = (
    USAGE
    + """      --input-filter=taskid  send stdin to only the specified task
      --output-filter=taskid only print stdout from the specified task
      --error-filter=taskid  only print stderr from the specified task
  -l, --label        prepend task number to lines of stdout & stderr
      --layout       print task layout info and exit (does not attach to tasks)
  -Q, --quiet        quiet mode (suppress informational messages)
  -v, --verbose      verbose mode (multiple -v's increase verbosity)
  -V, --version      print the Slurm version and exit

Help options:
  -h, --help         print this help message
  -u, --usage        print a brief usage message
"""
)
CONNECT_TIMEOUT_S = 10.0


def _task(value: str) -> int:
    if not value.strip().isdigit():
        raise InvalidOption(f"Invalid task id: {value}")
    return int(value)


OPTIONS = (
    Option("", "input-filter", "input_filter", convert=_task),
    Option("", "output-filter", "output_filter", convert=_task),
    Option("", "error-filter", "error_filter", convert=_task),
    Option("l", "label", "label", FLAG),
    Option("", "layout", "layout", FLAG),
    Option("Q", "quiet", "quiet", FLAG),
    Option("v", "verbose", "verbose", COUNT),
    Option("V", "version", "version", FLAG),
    Option("h", "help", "help", FLAG),
    Option("u", "usage", "usage", FLAG),
)


def layout(raw: t.Step) -> str:
    """--layout, as Slurm prints it."""
    step = Step(raw)
    nodes = step.nodes
    names = ",".join(n.node for n in nodes)
    out = [
        "Job step layout:",
        f"\t{step.ntasks} tasks, {len(nodes)} nodes ({step.nodelist or names})",
        "",
    ]
    for i, node in enumerate(nodes):
        tasks = "".join(f"{int(r)} " for r in node.ranks)
        out.append(f"\tNode {i} ({node.node}), {len(node.ranks)} task(s): {tasks}")
    return "\n".join(out) + "\n"


class Printer:
    """Whole lines to stdout/stderr, labelled with -l, filtered by task."""

    def __init__(self, label: bool, out_filter: int | None, err_filter: int | None) -> None:
        self.label = label
        self.filters = {False: out_filter, True: err_filter}
        self.partial: dict[tuple[int, bool], bytes] = {}

    def write(self, rank: int, is_err: bool, data: bytes) -> None:
        wanted = self.filters[is_err]
        if wanted is not None and rank != wanted:
            return
        out = sys.stderr.buffer if is_err else sys.stdout.buffer
        key = (rank, is_err)
        joined = self.partial.pop(key, b"") + data
        *lines, rest = joined.split(b"\n")
        if rest:
            self.partial[key] = rest
        prefix = f"{rank}: ".encode() if self.label else b""
        if lines:
            out.write(b"".join(prefix + line + b"\n" for line in lines))
            out.flush()

    def close(self) -> None:
        for (rank, is_err), rest in self.partial.items():
            out = sys.stderr.buffer if is_err else sys.stdout.buffer
            out.write((f"{rank}: ".encode() if self.label else b"") + rest)
        self.partial.clear()
        sys.stdout.flush()
        sys.stderr.flush()


def parse_step(words: Sequence[str]) -> tuple[int, int]:
    if len(words) != 1:
        raise InvalidOption("too many parameters")
    job, dot, step = words[0].partition(".")
    if not dot or not job.isdigit() or not step.isdigit():
        raise InvalidOption("Failed to parse stepid from command line options")
    return int(job), int(step)


def attach(opts: dict[str, Any], job_id: int, step_id: int) -> int:
    api = client()
    try:
        reply = api.attach_step({"jobId": str(job_id), "stepId": step_id})
    except CorralError as exc:
        raise CorralError(f"Could not get job step info: {exc.message}") from None
    step = reply.get("step") or {}
    if opts.get("layout"):
        sys.stdout.write(layout(step))
        return 0
    credential = reply.get("stepCredential", "")
    out_filter = opts.get("output_filter")
    err_filter = opts.get("error_filter", out_filter)  # as Slurm's: the output filter
    printer = Printer(bool(opts.get("label")), out_filter, err_filter)
    streams: list[NodeStream] = []
    ranks: set[int] = set()
    stdin_ranks = [opts["input_filter"]] if opts.get("input_filter") is not None else []
    try:
        for node in step.get("nodes", []):
            conn = NodeStream(node, CONNECT_TIMEOUT_S)
            body = {
                "jobId": job_id,
                "stepId": step_id,
                "node": conn.name,
                "stdinRanks": stdin_ranks,
            }
            conn.attach(credential, body)
            kind, payload = conn.await_started()
            if kind != ss.STARTED:
                why = payload.decode(errors="replace")
                conn.close()
                if not opts.get("quiet"):
                    sys.stderr.write(f"{PROG}: Node {conn.name}: {why or 'no tasks running'}\n")
                continue
            ranks.update(conn.ranks)
            streams.append(conn)
        if streams:
            _loop(streams, ranks, printer)
    finally:
        printer.close()
        for conn in streams:
            conn.close()
    return 0


def _loop(streams: list[NodeStream], ranks: set[int], printer: Printer) -> None:
    sel = Poller()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    saved = signals.set_handler(signals.SIGINT, _noted)
    old_wakeup = signals.set_wakeup_fd(wake_w)
    exited: set[int] = set()
    try:
        sel.register(wake_r, EVENT_READ, None)
        for conn in streams:
            sel.register(conn.sock, EVENT_READ, conn)
        with contextlib.suppress(ValueError, OSError):  # no stdin at all
            sel.register(0, EVENT_READ, "stdin")
        while any(not c.closed for c in streams) and not ranks <= exited:
            for what, mask in sel.select(None):
                if what is None:
                    return  # Ctrl-C: detach; the step goes on
                if what == "stdin":
                    data = _read(0)
                    if data == b"":  # its end: nothing more to send (the tasks' stays open)
                        sel.unregister(0)
                    elif data is not None:
                        for conn in streams:
                            conn.send(ss.STDIN, data)
                    continue
                conn = what
                if mask & EVENT_WRITE:
                    conn.flush()
                alive = conn.receive()
                for kind, payload in conn.frames():
                    if kind in (ss.STDOUT, ss.STDERR):
                        rank = ss.RANK.unpack_from(payload)[0]
                        printer.write(rank, kind == ss.STDERR, bytes(payload[4:]))
                    elif kind == ss.EXIT:
                        exited.add(ss.EXIT_FIELDS.unpack(payload)[0])
                    elif kind == ss.REFUSED:
                        sys.stderr.write(
                            f"{PROG}: {conn.name}: {payload.decode(errors='replace')}\n"
                        )
                if not alive:
                    sel.unregister(conn.sock)
                    conn.close()
            for conn in streams:
                if not conn.closed and conn.sock.fileno() >= 0:
                    events = EVENT_READ | (EVENT_WRITE if conn.wbuf else 0)
                    if sel.events(conn.sock) != events:
                        sel.modify(conn.sock, events, conn)
    finally:
        for conn in streams:
            if not conn.closed:
                conn.send(ss.DONE)
        signals.set_wakeup_fd(old_wakeup)
        signals.set_handler(signals.SIGINT, saved)
        sel.close()
        os.close(wake_r)
        os.close(wake_w)


def _read(fd: int) -> bytes | None:
    """What stdin has (b"": its end; None: nothing now)."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _noted(signum: int, frame: object) -> None:
    """The wake-up pipe carries the signal to the loop."""


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=USAGE.strip())
    opts, rest = parser.parse(argv)
    if answered(HELP, opts, usage=USAGE):
        return 0
    try:
        job_id, step_id = parse_step(rest)
    except InvalidOption as exc:
        sys.stderr.write(f"{PROG}: error: {exc.message}\n{USAGE}")
        return 1
    return attach(opts, job_id, step_id)


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
