"""srun: run a job step's tasks on the allocation's nodes, their I/O streamed back.

Inside an allocation (SLURM_JOB_ID set, or --jobid) srun asks ctld for a step (over the
gateway), opens one task stream to each node's noded (corral/stepstream.py; the step's
first node first: it picks MASTER_PORT), forwards stdin and signals, prints the tasks'
output as it comes (``-l``: ``RANK: ``) and exits with the highest task exit code
(128+signal). Outside an allocation it first allocates, and releases afterwards."""

from __future__ import annotations

import os
import sys
import time

from client.alloc import allocation_options, release, request_allocation, say
from client.common import option_errors, run
from client.containeropts import pyxis_environ, step_container
from client.jobopts import export_environment, merge, parse_gpus, submit_line, with_umask
from client.options import FLAG, OPTIONAL, Option, OptionParser, answered
from client.poller import EVENT_READ, EVENT_WRITE, Poller
from client.taskstream import NodeStream
from corral import cjson, signals
from corral import stepstream as ss
from corral.api import Controller, connect
from corral.errors import CorralError, InvalidOption, NodeUnreachable, StepBusy
from corral.patterns import expand_pattern
from corral.tasks import validate_gpu_bind

TYPE_CHECKING = False  # typing costs start-up time; srun is about start-up
if TYPE_CHECKING:
    from typing import Any

    from client.common import Json
    from corral.wire import json_types as t

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
    code, sig, step = 1, 0, Step(api, job_id, cli, command, argv)
    try:
        code, sig = step.run()
    finally:
        if mine:  # a node's refusal (a container not made) is its job's reason too
            release(api, PROG, job_id, code, sig, step.refused)
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
# options a StepSpec field takes as given, under proto3 JSON's camelCase of their name
_AS_GIVEN: tuple[str, ...] = ("ntasks", "ntasks_per_node", "cpus_per_task", "nodelist")
_AS_GIVEN += ("exclude", "distribution", "gpu_bind")


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
    fields: Any = spec
    for dest in _AS_GIVEN:
        if dest in cli:
            first, *rest = dest.split("_")
            fields[first + "".join(w.title() for w in rest)] = cli[dest]
    if "gpus_per_task" in cli:
        spec["gpusPerTask"] = parse_gpus(cli["gpus_per_task"], "--gpus-per-task")[1]
    if container := step_container(cli, dict(os.environ), os.getcwd()):
        spec["container"] = container  # all its tasks on a node share one (Pyxis's rule)
    spec["exact"], spec["overlap"] = bool(cli.get("exact")), bool(cli.get("overlap"))
    return spec


class Output:
    """Where the tasks' bytes go: srun's stdout/stderr (optionally labelled) or files."""

    def __init__(self, cli: dict[str, Any], job: Json, step: Json) -> None:
        self.label = bool(cli.get("label"))
        self.unbuffered = bool(cli.get("unbuffered"))
        self.patterns = {False: cli.get("output"), True: cli.get("error") or cli.get("output")}
        self.job, self.step = job, step
        self.partial: dict[tuple[int, bool], bytes] = {}
        self.files: dict[str, Any] = {}
        self.node_of = {int(r): n for n in step.get("nodes", []) for r in n.get("ranks", [])}
        self.array_job_id, self.array_task_id = array_ids(job)

    def _target(self, rank: int, is_err: bool) -> Any:
        pattern = self.patterns[is_err]
        if not pattern:
            return sys.stderr.buffer if is_err else sys.stdout.buffer
        node = self.node_of.get(rank)
        path = expand_pattern(
            pattern,
            job_id=int(self.job.get("jobId", 0)),
            job_name=str(self.job.get("spec", {}).get("name", "")),
            user=str(self.job.get("user", "")),
            node=str(node.get("node", "")) if node else "",
            node_id=int(node.get("nodeId", 0)) if node else 0,
            array_job_id=self.array_job_id,
            array_task_id=self.array_task_id,
            task_id=rank,
            step=str(self.step.get("stepId", 0)),
        )
        fh = self.files.get(path)
        if fh is None:
            fh = self.files[path] = open(path, "wb")  # noqa: SIM115 (closed in close())
        return fh

    def write(self, rank: int, is_err: bool, data: bytes | bytearray) -> None:
        """Whole lines only (Slurm's default), so tasks interleave by line, never mid-line;
        -u passes bytes through as they come."""
        out = self._target(rank, is_err)
        if self.unbuffered and not self.label:
            out.write(data)
            out.flush()
            return
        key = (rank, is_err)
        if not self.label:  # the whole lines at once: one search, no split
            cut = data.rfind(b"\n") + 1
            if not cut:
                self.partial[key] = self.partial.get(key, b"") + data
                return
            out.write(self.partial.pop(key, b""))
            out.write(data[:cut])
            if cut < len(data):
                self.partial[key] = bytes(data[cut:])
            out.flush()
            return
        joined = self.partial.pop(key, b"") + data
        *lines, rest = joined.split(b"\n")
        if rest:
            self.partial[key] = rest
        if lines:
            prefix = f"{rank}: ".encode()
            out.write(b"".join(prefix + line + b"\n" for line in lines))
            out.flush()

    def close(self) -> None:
        for (rank, is_err), rest in list(self.partial.items()):
            prefix = f"{rank}: ".encode() if self.label else b""
            self._target(rank, is_err).write(prefix + rest)
        self.partial.clear()
        sys.stdout.flush()
        for fh in self.files.values():
            fh.close()


def array_ids(job: Json) -> tuple[int, int | None]:
    """The job's array master id and task index for %A and %a: ctld's record of the job,
    else (an older ctld) SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID when srun runs inside
    that very job, as Slurm's srun reads them."""
    if "arrayTaskId" in job:
        return int(job.get("arrayJobId", 0)), int(job["arrayTaskId"])
    env = os.environ
    inside = env.get("SLURM_JOB_ID") == str(job.get("jobId", ""))
    master, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if inside and master.isdecimal() and task.isdecimal():
        return int(master), int(task)
    return 0, None


#: what srun passes on to the tasks (SIGINT is its own: see Step._on_interrupt)
FORWARDED = (signals.SIGTERM, signals.SIGHUP, signals.SIGQUIT, signals.SIGUSR1, signals.SIGUSR2)
STDIN_HIGH_WATER = 4 * 1024 * 1024  # queued for a node before srun stops reading stdin


class Step:
    """One job step: CreateStep over the gateway, a task stream to each node driven by
    one selector loop (output, exits, stdin, signals), CompleteStep."""

    def __init__(
        self,
        api: Controller,
        job_id: str,
        cli: dict[str, Any],
        command: list[str],
        argv: list[str],
    ) -> None:
        self.api, self.job_id, self.cli, self.command, self.argv = api, job_id, cli, command, argv
        self.exits: dict[int, tuple[int, int]] = {}
        self.streams: dict[str, NodeStream] = {}
        self.failures: list[str] = []
        self.interrupted_at = 0.0
        self.killed = False
        self.first_exit_at = 0.0
        self.wait_deadline = 0.0
        self.stdin_conns: list[NodeStream] = []
        self.stdin_open = False
        self.reported: set[str] = set()  # nodes whose failure ctld was told of
        self.refused = ""  # a node's refusal to start the tasks: the step's reason

    def run(self) -> tuple[int, int]:
        reply = self._create_step()
        step: Json = reply.get("step", {})
        job: Json = reply.get("job", {})
        self.step, self.job = step, job
        self.nodes: list[Json] = list(step.get("nodes", []))
        self.ntasks = int(step.get("ntasks", 0))
        self.step_credential = str(reply.get("stepCredential", ""))
        if self.cli.get("pty"):
            self.cli["unbuffered"] = True  # Slurm: --pty implies -u
            self.cli.pop("label", None)
        self.name = f"StepId={job.get('jobId', self.job_id)}.{step.get('stepId', 0)}"
        code, sig = 1, 0
        output = None
        try:  # from here on the step exists: whatever fails, it is completed below
            output = self.output = Output(self.cli, job, step)
            code, sig = self._run_streams(str(reply.get("cluster", "")))
        finally:
            for conn in self.streams.values():
                conn.close()
            if output is not None:
                output.close()
            codes = [c for c, killed in self.exits.values() if not killed]
            try:  # noqa: SIM105 (contextlib costs srun's start-up)
                self.api.complete_step(
                    {
                        "jobId": str(job.get("jobId", self.job_id)),
                        "stepId": int(step.get("stepId", 0)),
                        "exitCode": max(codes, default=code),
                        "exitSignal": sig,
                        "reason": self.refused[:1024],
                    },
                )
            except CorralError:
                pass  # the job may have ended (scancel): the step ended with it
        return code, sig

    def _create_step(self) -> t.CreateStepResponse:
        """CreateStep; while other steps hold what this one needs, wait (Slurm's words)."""
        with option_errors():
            spec = step_spec(self.job_id, self.cli, self.command, self.argv)
        waited = False
        while True:
            try:
                reply = self.api.create_step({"spec": spec})
            except StepBusy:
                if not waited:
                    say(
                        PROG,
                        f"Job {self.job_id} step creation temporarily disabled, retrying "
                        "(Requested nodes are busy)",
                    )
                    waited = True
                time.sleep(0.2)
                continue
            except CorralError as exc:
                raise type(exc)(
                    f"Unable to create step for job {self.job_id}: {exc.message}"
                ) from None
            if waited:
                step = reply.get("step", {})
                say(PROG, f"Step created for StepId={self.job_id}.{step.get('stepId', 0)}")
            return reply

    # ------------------------------------------------------------ the streams

    def _run_streams(self, cluster: str) -> tuple[int, int]:
        environ = dict(os.environ)
        env = with_umask(export_environment(self.cli.get("export", "ALL"), environ), environ)
        stdin_ranks = self._stdin_ranks()
        first = self.nodes[0]
        master_addr = str(first.get("address", "")).rpartition(":")[0] or str(first["node"])
        timeout = self.api.timeout

        def body(node: Json, port: int) -> dict[str, Any]:
            out: dict[str, Any] = {
                "jobId": int(self.job.get("jobId", self.job_id)),
                "stepId": int(self.step.get("stepId", 0)),
                "node": node["node"],
                "environment": env,
                "cwd": self.cli.get("chdir") or os.getcwd(),
                "stdinRanks": [int(r) for r in node.get("ranks", []) if int(r) in stdin_ranks],
                "masterAddr": master_addr,
                "masterPort": port,
                "cluster": cluster,
            }
            if self.cli.get("pty") and 0 in [int(r) for r in node.get("ranks", [])]:
                rows, cols = self._window()
                out["pty"] = {"rows": rows, "cols": cols}
            return out

        # the first node first: it picks MASTER_PORT, which the others are given
        try:
            head = NodeStream(first, timeout)
            self.streams[head.name] = head
            head.start(self.step_credential, body(first, 0))
            kind, payload = head.await_started()
        except NodeUnreachable as exc:
            self._node_failure(str(first.get("node", "")), str(exc))
            raise
        except OSError as exc:  # it closed the stream before STARTED
            name = str(first.get("node", ""))
            self._node_failure(name, str(exc))
            raise CorralError(f"{name}: the connection to its noded was lost: {exc}") from None
        if kind != ss.STARTED:
            why = payload.decode(errors="replace") if kind == ss.REFUSED else "no answer"
            self.refused = f"{head.name}: {why}" if kind == ss.REFUSED else ""
            raise CorralError(f"{head.name}: {why}")
        head.started = True
        port = int(cjson.loads(payload).get("masterPort", 0))
        for node in self.nodes[1:]:
            try:
                conn = NodeStream(node, timeout)
                conn.start(self.step_credential, body(node, port))
            except (CorralError, OSError) as exc:
                failed = isinstance(exc, NodeUnreachable | OSError)  # not a refusal
                name, ranks = str(node.get("node", "")), [int(r) for r in node.get("ranks", [])]
                self._lost(name, ranks, exc, node_failure=failed)
                continue
            self.streams[conn.name] = conn
        self.stdin_conns = [c for c in self.streams.values() if set(c.ranks) & stdin_ranks]
        for conn in self.streams.values():
            if conn not in self.stdin_conns:
                conn.send(ss.STDIN_EOF)
        self._loop(bool(self.stdin_conns))
        for failure in self.failures:
            say(PROG, f"error: {failure}")
        return self._result()

    def _loop(self, with_stdin: bool) -> None:
        sel = Poller()  # poll, not epoll: stdin may be a regular file
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        forwarded = (*FORWARDED, signals.SIGINT, signals.SIGWINCH)
        saved = {sig: signals.set_handler(sig, _noted) for sig in forwarded}
        old_wakeup = signals.set_wakeup_fd(wake_w)
        restore = self._raw_terminal() if self.cli.get("pty") else None
        try:
            sel.register(wake_r, EVENT_READ, None)
            for conn in self.streams.values():
                sel.register(conn.sock, self._events(conn), conn)
            if with_stdin:
                self.stdin_open = True
                try:
                    sel.register(0, EVENT_READ, "stdin")
                except (ValueError, OSError):  # no stdin at all: end of input
                    self._stdin_ended(sel)
            for conn in list(self.streams.values()):  # what came with STARTED
                self._dispatch(conn, sel)
            # a node whose every exit is in has sent all its output (exits come after
            # the pipes' end, in order): once DONE is written srun need not wait for
            # noded's clean-up to close the stream
            while any(not c.closed and not (c.done and not c.wbuf) for c in self.streams.values()):
                timeout = None
                if self.wait_deadline:
                    timeout = max(0.0, self.wait_deadline - time.monotonic())
                for what, mask in sel.select(timeout):
                    if what is None:
                        self._signals(wake_r)
                    elif what == "stdin":
                        self._read_stdin(sel)
                    else:
                        self._ready(what, mask, sel)
                if self.wait_deadline and time.monotonic() >= self.wait_deadline:
                    self.wait_deadline = 0.0
                    self._wait_expired()
                self._update(sel)
        finally:
            if restore is not None:
                restore()
            signals.set_wakeup_fd(old_wakeup)
            for sig, handler in saved.items():
                signals.set_handler(sig, handler)
            sel.close()
            os.close(wake_r)
            os.close(wake_w)

    @staticmethod
    def _events(conn: NodeStream) -> int:
        return EVENT_READ | (EVENT_WRITE if conn.wbuf else 0)

    def _update(self, sel: Poller) -> None:
        """Each open stream wants writes only while it has something to send; stdin is
        read only while every node has room for it (flow control for input)."""
        for conn in self.streams.values():
            if conn.closed:
                continue
            events = self._events(conn)
            if sel.events(conn.sock) != events:
                sel.modify(conn.sock, events, conn)
        if self.stdin_open:
            full = any(len(c.wbuf) > STDIN_HIGH_WATER for c in self.stdin_conns)
            registered = 0 in sel
            if full and registered:
                sel.unregister(0)
            elif not full and not registered:
                sel.register(0, EVENT_READ, "stdin")

    def _ready(self, conn: NodeStream, mask: int, sel: Poller) -> None:
        if mask & EVENT_WRITE and not conn.flush():
            self._closed(conn, sel)
            return
        if mask & EVENT_READ:
            alive = conn.receive()
            self._dispatch(conn, sel)
            if not alive:
                self._closed(conn, sel)

    def _dispatch(self, conn: NodeStream, sel: Poller) -> None:
        for kind, payload in conn.frames():
            if kind == ss.STDOUT or kind == ss.STDERR:
                rank = ss.RANK.unpack_from(payload)[0]
                self.output.write(rank, kind == ss.STDERR, payload[4:])
            elif kind == ss.EXIT:
                rank, code, sig = ss.EXIT_FIELDS.unpack(payload)
                self.exits[rank] = (code, sig)
                if all(r in self.exits for r in conn.ranks):
                    self._node_done(conn)
                self._report_exit(conn.name, rank, code, sig)
                self._after_exit(code, sig)
            elif kind == ss.STARTED:
                conn.started = True
            elif kind == ss.REFUSED:
                why = bytes(payload).decode(errors="replace")
                self._lost(conn.name, conn.ranks, why)
                self._closed(conn, sel, quiet=True)
                return

    def _closed(self, conn: NodeStream, sel: Poller, quiet: bool = False) -> None:
        if conn.closed:
            return
        if not quiet and not all(r in self.exits for r in conn.ranks):
            why = "the connection to its noded was lost"
            self._lost(conn.name, conn.ranks, why, node_failure=True)
        _unregister(sel, conn.sock)
        conn.close()

    def _lost(self, node: str, ranks: list[int], why: object, node_failure: bool = False) -> None:
        self.failures.append(f"{node}: {why}")
        self.refused = self.refused or ("" if node_failure else self.failures[-1])
        for rank in ranks:
            self.exits.setdefault(rank, (1, 0))
        self._kill_all()  # Slurm's default: the step dies with a node (no --no-kill)
        if node_failure:
            self._node_failure(node, str(why))

    def _node_failure(self, node: str, why: str) -> None:
        """A node's noded gone mid-step (not a refusal): said as Slurm's srun says it,
        and told to ctld before srun exits, so the job's end waits for the node's
        verdict instead of ending with the batch script's exit (ctld/suspects.py)."""
        if node in self.reported:
            return
        self.reported.add(node)
        say(PROG, f"error: Node failure on {node}")
        try:
            self.api.step_node_lost(
                {
                    "jobId": str(self.job.get("jobId", self.job_id)),
                    "stepId": int(self.step.get("stepId", 0)),
                    "node": node,
                    "run": int(self.job.get("restartCount", 0)),
                    "detail": why[:256],
                }
            )
        except (CorralError, OSError) as exc:
            say(PROG, f"error: could not report the node failure to the controller: {exc}")

    def _signals(self, wake: int) -> None:
        try:
            got = os.read(wake, 256)
        except BlockingIOError:
            return
        for sig in got:
            if sig == signals.SIGINT:
                self._on_interrupt()
            elif sig == signals.SIGWINCH:
                self._resized()
            else:
                self._send_signal(sig)

    def _read_stdin(self, sel: Poller) -> None:
        try:
            chunk = os.read(0, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._stdin_ended(sel)
            return
        for conn in self.stdin_conns:
            if not conn.done:
                conn.send(ss.STDIN, chunk)

    def _stdin_ended(self, sel: Poller) -> None:
        self.stdin_open = False
        _unregister(sel, 0)
        for conn in self.stdin_conns:
            if not conn.done:
                conn.send(ss.STDIN_EOF)

    def _window(self) -> tuple[int, int]:
        try:
            cols, rows = os.get_terminal_size(0)
        except OSError:
            cols, rows = 80, 24
        return rows, cols

    def _resized(self) -> None:
        """--pty: the task's terminal follows srun's."""
        if not self.cli.get("pty"):
            return
        for conn in self.streams.values():
            if 0 in conn.ranks and not conn.done:
                conn.send(ss.WINDOW, ss.WINDOW_FIELDS.pack(*self._window()))

    def _raw_terminal(self) -> Any:
        """--pty: srun's terminal passes every key through (Ctrl-C, Ctrl-Z reach the
        task's terminal, where they become its signals). Returns what restores it."""
        if not os.isatty(0):
            return None
        import termios
        import tty

        saved = termios.tcgetattr(0)
        tty.setraw(0)
        return lambda: termios.tcsetattr(0, termios.TCSADRAIN, saved)

    def _stdin_ranks(self) -> set[int]:
        if self.cli.get("pty"):
            return {0}
        mode = str(self.cli.get("input", "all")).lower()
        if mode == "none":
            return set()
        if mode.isdigit():
            return {int(mode)}
        if mode != "all":
            raise InvalidOption(f"Invalid --input: {mode} (all, none or a task id)")
        return set(range(self.ntasks))

    def _report_exit(self, node: str, rank: int, code: int, sig: int) -> None:
        if sig:
            how = signals.name(sig).removeprefix("SIG").capitalize()
            how = {"Kill": "Killed", "Term": "Terminated", "Int": "Interrupt"}.get(how, how)
            if not self.killed:
                say(PROG, f"error: {node}: task {rank}: {how}")
        elif code:
            say(PROG, f"error: {node}: task {rank}: Exited with exit code {code}")

    def _after_exit(self, code: int, sig: int) -> None:
        bad = code or sig
        if bad and self.cli.get("kill_on_bad_exit") not in (None, "0") and not self.killed:
            say(PROG, f"Terminating {self.name}")
            self._kill_all()
        wait = self.cli.get("wait")
        if wait and not self.first_exit_at and len(self.exits) < self.ntasks:
            self.first_exit_at = time.monotonic()
            try:
                seconds = float(wait)
            except ValueError:
                raise InvalidOption(f"Invalid --wait value: {wait}") from None
            if seconds > 0:
                self.wait_deadline = self.first_exit_at + seconds

    def _wait_expired(self) -> None:
        if len(self.exits) < self.ntasks:
            say(PROG, "error: Timed out waiting for job step to complete")
            self._kill_all()

    def _send_signal(self, sig: int) -> None:
        for conn in self.streams.values():
            if not conn.done:  # a finished stream takes no more messages
                conn.send(ss.SIGNAL, ss.SIGNAL_FIELD.pack(sig))

    def _node_done(self, conn: NodeStream) -> None:
        if not conn.done:
            conn.send(ss.DONE)  # noded ends the stream once it has this
            conn.done = True

    def _kill_all(self) -> None:
        self.killed = True
        self._send_signal(signals.SIGKILL)

    def _on_interrupt(self) -> None:
        now = time.monotonic()
        if now - self.interrupted_at <= 1.0:
            say(PROG, f"sending Ctrl-C to {self.name}")
            say(PROG, "forcing job termination")
            self._kill_all()
            return
        self.interrupted_at = now
        say(PROG, "interrupt (one more within 1 sec to abort)")
        ranks = [int(r) for n in self.nodes for r in n.get("ranks", [])]
        running = sorted(r for r in ranks if r not in self.exits)
        done = sorted(self.exits)
        if running:
            say(PROG, f"{self.name} tasks {_ranges(running)}: running")
        if done:
            say(PROG, f"{self.name} tasks {_ranges(done)}: exited")

    def _result(self) -> tuple[int, int]:
        code, first_signal = 0, 0
        for exit_code, exit_signal in self.exits.values():
            if exit_signal:
                first_signal = first_signal or exit_signal
                code = max(code, 128 + exit_signal)
            else:
                code = max(code, exit_code)
        if len(self.exits) < self.ntasks:
            code = max(code, 1)
        return code, first_signal


def _unregister(sel: Poller, what: Any) -> None:
    try:  # noqa: SIM105 (contextlib costs srun's start-up)
        sel.unregister(what)
    except (KeyError, ValueError):
        pass  # not registered (any more)


def _noted(signum: int, frame: object) -> None:
    """The signal's number reaches srun's loop through the wake-up pipe."""


def _ranges(ranks: list[int]) -> str:
    out: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(out)
