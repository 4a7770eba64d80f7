"""srun: run a job step's tasks on the allocation's nodes, their I/O streamed back.

Inside an allocation (SLURM_JOB_ID set, or --jobid) srun asks ctld for a step, opens
one RunTasks stream to each node's noded (the step's first node first: it picks
MASTER_PORT), forwards stdin and signals, prints the tasks' output as it comes
(``-l`` prefixes ``RANK: ``) and exits with the highest task exit code (128+signal for
a signalled task). Outside an allocation it first allocates, and releases afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from client.alloc import allocation_options, release, request_allocation, say
from client.common import option_errors, run
from client.jobopts import export_environment, merge, parse_gpus
from client.options import FLAG, OPTIONAL, Option, OptionParser
from corral import __version__
from corral.api import Controller, connect
from corral.errors import CorralError, InvalidOption, StepBusy
from corral.patterns import expand_pattern
from corral.tasks import validate_gpu_bind

if TYPE_CHECKING:
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
    if cli.pop("help", False):
        sys.stdout.write(parser.help_text())
        return 0
    if cli.pop("version", False):
        sys.stdout.write(f"slurm {__version__} (corral srun)\n")
        return 0
    api = connect(grpc=True)  # srun streams over gRPC anyway: the controller too
    job_id = str(cli.get("jobid") or os.environ.get("SLURM_JOB_ID", ""))
    mine = not job_id
    if mine:
        with option_errors():
            opts = merge(parser, {k: v for k, v in cli.items() if k not in _STEP_DESTS}, "", {})
        job_id = request_allocation(api, PROG, opts, argv, os.path.basename(command[0]))
    code, sig = 1, 0
    try:
        code, sig = asyncio.run(Step(api, job_id, cli, command, argv).run())
    finally:
        if mine:
            release(api, PROG, job_id, code, sig)
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
        "submitLine": shlex.join([PROG, *argv]),
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
    if cli.get("exact"):
        spec["exact"] = True
    if cli.get("overlap"):
        spec["overlap"] = True
    return spec


class Output:
    """Where the tasks' bytes go: srun's stdout/stderr (optionally labelled) or files."""

    def __init__(self, cli: dict[str, Any], job: Any, step: Any) -> None:
        self.label = bool(cli.get("label"))
        self.unbuffered = bool(cli.get("unbuffered"))
        self.patterns = {False: cli.get("output"), True: cli.get("error") or cli.get("output")}
        self.job, self.step = job, step
        self.partial: dict[tuple[int, bool], bytes] = {}
        self.files: dict[str, Any] = {}
        self.node_of = {r: n for n in step.nodes for r in n.ranks}

    def _target(self, rank: int, is_err: bool) -> Any:
        pattern = self.patterns[is_err]
        if not pattern:
            return sys.stderr.buffer if is_err else sys.stdout.buffer
        node = self.node_of.get(rank)
        path = expand_pattern(
            pattern,
            job_id=self.job.job_id,
            job_name=self.job.spec.name,
            user=self.job.user,
            node=node.node if node else "",
            node_id=node.node_id if node else 0,
            task_id=rank,
            step=str(self.step.step_id),
        )
        fh = self.files.get(path)
        if fh is None:
            fh = self.files[path] = open(path, "wb")  # noqa: SIM115 (closed in close())
        return fh

    def write(self, rank: int, is_err: bool, data: bytes) -> None:
        """Whole lines only (Slurm's default), so tasks interleave by line, never mid-line;
        -u passes bytes through as they come."""
        out = self._target(rank, is_err)
        if self.unbuffered and not self.label:
            out.write(data)
            out.flush()
            return
        data = self.partial.pop((rank, is_err), b"") + data
        *lines, rest = data.split(b"\n")
        if rest:
            self.partial[(rank, is_err)] = rest
        if lines:
            prefix = f"{rank}: ".encode() if self.label else b""
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


class Step:
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
        self.queues: dict[str, asyncio.Queue[Any]] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.done_nodes: set[str] = set()  # nodes whose tasks all ended
        self.interrupted_at = 0.0
        self.killed = False
        self.first_exit_at = 0.0

    async def run(self) -> tuple[int, int]:
        from google.protobuf import json_format

        from corral.wire import corral_pb2 as pb

        reply = await self._create_step()
        step = json_format.ParseDict(dict(reply["step"]), pb.Step())
        job = json_format.ParseDict(dict(reply["job"]), pb.Job())
        self.step, self.job, self.pb = step, job, pb
        self.step_credential = str(reply.get("stepCredential", ""))
        if self.cli.get("pty"):
            self.cli["unbuffered"] = True  # Slurm: --pty implies -u
            self.cli.pop("label", None)
        self.output = Output(self.cli, job, step)
        self.name = f"StepId={job.job_id}.{step.step_id}"
        loop = asyncio.get_running_loop()
        restore = self._raw_terminal(loop) if self.cli.get("pty") else None
        loop.add_signal_handler(signal.SIGINT, self._on_interrupt)
        for forwarded in (
            signal.SIGTERM,
            signal.SIGHUP,
            signal.SIGQUIT,
            signal.SIGUSR1,
            signal.SIGUSR2,
        ):
            loop.add_signal_handler(forwarded, self._forward, int(forwarded))
        code, sig = 1, 0
        try:
            code, sig = await self._run_streams(reply.get("cluster", ""))
        finally:
            if restore is not None:
                restore()
            self.output.close()
            codes = [c for c, killed in self.exits.values() if not killed]
            # the job may have ended (scancel): the step ended with it
            with contextlib.suppress(CorralError):
                self.api.complete_step(
                    {
                        "jobId": str(job.job_id),
                        "stepId": step.step_id,
                        "exitCode": max(codes, default=code),
                        "exitSignal": sig,
                    },
                )
        return code, sig

    async def _create_step(self) -> t.CreateStepResponse:
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
                await asyncio.sleep(0.2)
                continue
            except CorralError as exc:
                raise type(exc)(
                    f"Unable to create step for job {self.job_id}: {exc.message}"
                ) from None
            if waited:
                step = reply.get("step", {})
                say(PROG, f"Step created for StepId={self.job_id}.{step.get('stepId', 0)}")
            return reply

    async def _run_streams(self, cluster: str) -> tuple[int, int]:
        import grpc
        from grpc import aio

        from corral.wire import corral_pb2_grpc as pbg

        pb, step = self.pb, self.step
        env = export_environment(self.cli.get("export", "ALL"), dict(os.environ))
        stdin_ranks = self._stdin_ranks()
        first = step.nodes[0]
        master_addr = first.address.rpartition(":")[0] or first.node
        channels = {n.node: aio.insecure_channel(n.address) for n in step.nodes}
        failures: list[str] = []

        def start_for(node: Any, port: int) -> Any:
            request = pb.RunTasksRequest(
                job=self.job,
                step=step,
                node=node.node,
                environment=env,
                cwd=self.cli.get("chdir") or os.getcwd(),
                stdin_ranks=[r for r in node.ranks if r in stdin_ranks],
                master_addr=master_addr,
                master_port=port,
                cluster=cluster,
                step_credential=self.step_credential,
            )
            if self.cli.get("pty") and 0 in node.ranks:
                request.pty.CopyFrom(self._window())
            return pb.TaskInput(start=request)

        async def requests(node: Any, port: int) -> AsyncIterator[Any]:
            yield start_for(node, port)
            # nothing more before the node answered: a write racing a refusal would
            # turn its reason into gRPC's INTERNAL. After that, noded keeps the stream
            # open until this side half-closes, so no write can meet a finished call.
            await self.started[node.node].wait()
            queue = self.queues[node.node]
            while True:
                item = await queue.get()
                if item is None:
                    return
                yield item

        async def consume(node: Any, call: Any, first_event: Any = None) -> None:
            try:
                if first_event is not None:
                    self._event(node, first_event)
                eof = aio.EOF  # type: ignore[attr-defined]
                while (event := await call.read()) is not eof:
                    self._event(node, event)
            except grpc.RpcError as exc:
                if all(r in self.exits for r in node.ranks):
                    return  # its tasks had all ended: a late write raced the stream's end
                detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
                failures.append(f"{node.node}: {detail}")
                for rank in node.ranks:
                    self.exits.setdefault(rank, (1, 0))
                self._kill_all()
            finally:
                self._node_done(node.node)

        for n in step.nodes:
            self.queues[n.node] = asyncio.Queue()
            self.started[n.node] = asyncio.Event()
        stubs = {name: pbg.NodeAgentStub(ch) for name, ch in channels.items()}
        try:
            head = stubs[first.node].RunTasks(requests(first, 0))
            try:
                started = await head.read()
            except grpc.RpcError as exc:
                detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
                raise CorralError(f"{first.node}: {detail}") from None
            port = getattr(getattr(started, "started", None), "master_port", 0)
            workers = [asyncio.create_task(consume(first, head, started))]
            for n in step.nodes[1:]:
                workers.append(
                    asyncio.create_task(consume(n, stubs[n.node].RunTasks(requests(n, port))))
                )
            if stdin_ranks:
                self._start_stdin({n.node for n in step.nodes if set(n.ranks) & stdin_ranks})
            else:
                for q in self.queues.values():
                    q.put_nowait(pb.TaskInput(stdin_eof=True))
            await asyncio.gather(*workers)
        finally:
            for ch in channels.values():
                await ch.close(None)
        for failure in failures:
            say(PROG, f"error: {failure}")
        return self._result()

    def _window(self) -> Any:
        try:
            cols, rows = os.get_terminal_size(0)
        except OSError:
            cols, rows = 80, 24
        return self.pb.WindowSize(rows=rows, cols=cols)

    def _raw_terminal(self, loop: asyncio.AbstractEventLoop) -> Any:
        """--pty: srun's terminal passes every key through (Ctrl-C, Ctrl-Z reach the
        task's terminal, where they become its signals) and resizes follow. Returns
        what restores the terminal."""
        import termios
        import tty

        def resized() -> None:
            node = next(n.node for n in self.step.nodes if 0 in n.ranks)
            if node not in self.done_nodes and node in self.queues:
                self.queues[node].put_nowait(self.pb.TaskInput(window=self._window()))

        loop.add_signal_handler(signal.SIGWINCH, resized)
        if not os.isatty(0):
            return None
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
        return set(range(self.step.ntasks))

    def _start_stdin(self, nodes: set[str]) -> None:
        loop = asyncio.get_running_loop()
        pb = self.pb

        def put(item: Any) -> None:
            for name in nodes - self.done_nodes:
                self.queues[name].put_nowait(item)

        def pump() -> None:  # a daemon thread: a blocked read never holds srun's exit
            try:
                while chunk := os.read(0, 65536):
                    loop.call_soon_threadsafe(put, pb.TaskInput(stdin=chunk))
            except OSError:
                pass
            loop.call_soon_threadsafe(put, pb.TaskInput(stdin_eof=True))

        threading.Thread(target=pump, daemon=True, name="srun-stdin").start()

    def _event(self, node: Any, event: Any) -> None:
        what = event.WhichOneof("what")
        if what == "started":
            self.started[node.node].set()
        elif what == "output":
            self.output.write(event.output.rank, event.output.stderr, event.output.data)
        elif what == "exit":
            ex = event.exit
            self.exits[ex.rank] = (ex.exit_code, ex.exit_signal)
            if all(r in self.exits for r in node.ranks):
                self._node_done(node.node)
            self._report_exit(node.node, ex)
            self._after_exit(ex)

    def _report_exit(self, node: str, ex: Any) -> None:
        if ex.exit_signal:
            try:
                how = signal.Signals(ex.exit_signal).name.removeprefix("SIG").capitalize()
            except ValueError:
                how = f"Signal {ex.exit_signal}"
            how = {"Kill": "Killed", "Term": "Terminated", "Int": "Interrupt"}.get(how, how)
            if not self.killed:
                say(PROG, f"error: {node}: task {ex.rank}: {how}")
        elif ex.exit_code:
            say(PROG, f"error: {node}: task {ex.rank}: Exited with exit code {ex.exit_code}")

    def _after_exit(self, ex: Any) -> None:
        bad = ex.exit_code or ex.exit_signal
        if bad and self.cli.get("kill_on_bad_exit") not in (None, "0") and not self.killed:
            say(PROG, f"Terminating {self.name}")
            self._kill_all()
        wait = self.cli.get("wait")
        if wait and not self.first_exit_at and len(self.exits) < self.step.ntasks:
            self.first_exit_at = time.monotonic()
            try:
                seconds = float(wait)
            except ValueError:
                raise InvalidOption(f"Invalid --wait value: {wait}") from None
            if seconds > 0:
                asyncio.get_running_loop().call_later(seconds, self._wait_expired)

    def _wait_expired(self) -> None:
        if len(self.exits) < self.step.ntasks:
            say(PROG, "error: Timed out waiting for job step to complete")
            self._kill_all()

    def _send_signal(self, sig: int) -> None:
        for name, q in self.queues.items():
            if name not in self.done_nodes:  # a finished stream takes no more messages
                q.put_nowait(self.pb.TaskInput(signal=sig))

    def _node_done(self, name: str) -> None:
        if name not in self.done_nodes:
            self.done_nodes.add(name)
            self.queues[name].put_nowait(None)  # ends that node's request stream
            self.started[name].set()  # a node that failed before starting: end it too

    def _kill_all(self) -> None:
        self.killed = True
        self._send_signal(signal.SIGKILL)

    def _forward(self, sig: int) -> None:
        self._send_signal(sig)

    def _on_interrupt(self) -> None:
        now = time.monotonic()
        if now - self.interrupted_at <= 1.0:
            say(PROG, f"sending Ctrl-C to {self.name}")
            say(PROG, "forcing job termination")
            self._kill_all()
            return
        self.interrupted_at = now
        say(PROG, "interrupt (one more within 1 sec to abort)")
        running = sorted(r for n in self.step.nodes for r in n.ranks if r not in self.exits)
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
        if len(self.exits) < self.step.ntasks:
            code = max(code, 1)
        return code, first_signal


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
