"""srun's job step: CreateStep over the gateway, a task stream to each node driven by
one poll loop (the tasks' output and exits, stdin, signals, --pty's terminal), and
CompleteStep, whatever happened; a node lost mid-step is told to ctld."""

from __future__ import annotations

import os
import time

from client import srun_terminal
from client.alloc import say
from client.jobopts import export_environment, with_umask
from client.poller import EVENT_READ, EVENT_WRITE, Poller
from client.srun_exits import TaskExits
from client.srun_output import Output
from client.taskstream import NodeStream
from client.views.job import Job
from client.views.step import Step, StepNode
from corral import cjson, signals
from corral import stepstream as ss
from corral.errors import CorralError, NodeUnreachable, StepBusy

TYPE_CHECKING = False  # typing costs start-up time; srun is about start-up
if TYPE_CHECKING:
    from typing import Any

    from client.srun_resume import Resumer
    from corral.api import Controller
    from corral.wire import json_types as t

PROG = "srun"


#: what srun passes on to the tasks (SIGINT is its own: see Step._on_interrupt)
FORWARDED = (signals.SIGTERM, signals.SIGHUP, signals.SIGQUIT, signals.SIGUSR1, signals.SIGUSR2)
STDIN_HIGH_WATER = 4 * 1024 * 1024  # queued for a node before srun stops reading stdin


class JobStep:
    """One job step: CreateStep over the gateway, a task stream to each node driven by
    one selector loop (output, exits, stdin, signals), CompleteStep."""

    def __init__(
        self,
        api: Controller,
        job_id: str,
        spec: t.StepSpec,
        cli: dict[str, Any],
    ) -> None:
        self.api, self.job_id, self.spec, self.cli = api, job_id, spec, cli
        self.streams: dict[str, NodeStream] = {}
        self.failures: list[str] = []
        self.interrupted_at = 0.0
        self.stdin_conns: list[NodeStream] = []
        self.stdin_open = False
        self.reported: set[str] = set()  # nodes whose failure ctld was told of
        self.refused = ""  # a node's refusal to start the tasks: the step's reason

    def run(self) -> tuple[int, int]:
        reply = self._create_step()
        raw_step, raw_job = reply.get("step", {}), reply.get("job", {})
        step, job = self.step, self.job = Step(raw_step), Job(raw_job)
        self.nodes: list[StepNode] = step.nodes
        self.ntasks = step.ntasks
        self.step_credential = reply.get("stepCredential", "")
        self.resume_window_s = reply.get("resumeWindowS")
        self.resumer: Resumer | None = None  # made when a stream first breaks
        if self.cli.get("pty"):
            self.cli["unbuffered"] = True  # Slurm: --pty implies -u
            self.cli.pop("label", None)
        self.job_ref = str(job.job_id) if "jobId" in raw_job else self.job_id
        self.name = f"StepId={self.job_ref}.{step.step_id}"
        self.tasks = TaskExits(self.ntasks, self.cli, self.name, self._kill_all)
        code, sig = 1, 0
        output = None
        try:  # from here on the step exists: whatever fails, it is completed below
            output = self.output = Output(self.cli, raw_job, raw_step)
            code, sig = self._run_streams(reply.get("cluster", ""))
        finally:
            for conn in self.streams.values():
                conn.close()
            if output is not None:
                output.close()
            try:  # noqa: SIM105 (contextlib costs srun's start-up)
                self.api.complete_step(
                    {
                        "jobId": self.job_ref,
                        "stepId": step.step_id,
                        "exitCode": self.tasks.completed_code(code),
                        "exitSignal": sig,
                        "reason": self.refused[:1024],
                    },
                )
            except CorralError:
                pass  # the job may have ended (scancel): the step ended with it
        return code, sig

    def _create_step(self) -> t.CreateStepResponse:
        """CreateStep; while other steps hold what this one needs, wait (Slurm's words)."""
        spec = self.spec
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
                step = Step(reply.get("step", {}))
                say(PROG, f"Step created for StepId={self.job_id}.{step.step_id}")
            return reply

    # ------------------------------------------------------------ the streams

    def _run_streams(self, cluster: str) -> tuple[int, int]:
        environ = dict(os.environ)
        env = with_umask(export_environment(self.cli.get("export", "ALL"), environ), environ)
        stdin_ranks = srun_terminal.stdin_ranks(self.cli, self.ntasks)
        first = self.nodes[0]
        master_addr = first.address.rpartition(":")[0] or first.node
        timeout = self.api.timeout

        def body(node: StepNode, port: int) -> dict[str, Any]:
            out: dict[str, Any] = {
                "jobId": int(self.job_ref),
                "stepId": self.step.step_id,
                "node": node.node,
                "environment": env,
                "cwd": self.cli.get("chdir") or os.getcwd(),
                "stdinRanks": [r for r in node.ranks if r in stdin_ranks],
                "masterAddr": master_addr,
                "masterPort": port,
                "cluster": cluster,
            }
            if self.cli.get("pty") and 0 in node.ranks:
                rows, cols = srun_terminal.window()
                out["pty"] = {"rows": rows, "cols": cols}
            return out

        # the first node first: it picks MASTER_PORT, which the others are given
        try:
            head = NodeStream(first.raw, timeout)
            self.streams[head.name] = head
            head.start(self.step_credential, body(first, 0))
            kind, payload = head.await_started()
        except NodeUnreachable as exc:
            self._node_failure(first.node, str(exc))
            raise
        except OSError as exc:  # it closed the stream before STARTED
            name = first.node
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
                conn = NodeStream(node.raw, timeout)
                conn.start(self.step_credential, body(node, port))
            except (CorralError, OSError) as exc:
                failed = isinstance(exc, NodeUnreachable | OSError)  # not a refusal
                self._lost(node.node, node.ranks, exc, node_failure=failed)
                continue
            self.streams[conn.name] = conn
        self.stdin_conns = [c for c in self.streams.values() if set(c.ranks) & stdin_ranks]
        for conn in self.streams.values():
            if conn not in self.stdin_conns:
                conn.send(ss.STDIN_EOF)
        self._loop(bool(self.stdin_conns))
        for failure in self.failures:
            say(PROG, f"error: {failure}")
        return self.tasks.result()

    def _loop(self, with_stdin: bool) -> None:
        sel = Poller()  # poll, not epoll: stdin may be a regular file
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        forwarded = (*FORWARDED, signals.SIGINT, signals.SIGWINCH)
        saved = {sig: signals.set_handler(sig, _noted) for sig in forwarded}
        old_wakeup = signals.set_wakeup_fd(wake_w)
        restore = srun_terminal.raw_terminal() if self.cli.get("pty") else None
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
            while (self.resumer and self.resumer.pending) or any(
                not c.closed and not (c.done and not c.wbuf) for c in self.streams.values()
            ):
                timeout = self.resumer.due_in() if self.resumer else None
                if self.tasks.wait_deadline:
                    left = max(0.0, self.tasks.wait_deadline - time.monotonic())
                    timeout = left if timeout is None else min(timeout, left)
                for what, mask in sel.select(timeout):
                    if what is None:
                        self._signals(wake_r)
                    elif what == "stdin":
                        self._read_stdin(sel)
                    else:
                        self._ready(what, mask, sel)
                if self.tasks.wait_deadline and time.monotonic() >= self.tasks.wait_deadline:
                    self.tasks.wait_expired()
                if self.resumer and self.resumer.pending:
                    self._resume_due(sel)
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
                if rank in self.tasks.exits:  # said again by a noded that resumed the stream
                    if self.tasks.all_in(conn.ranks):
                        self._node_done(conn)
                    continue
                self.tasks.record(rank, code, sig)
                if self.tasks.all_in(conn.ranks):
                    self._node_done(conn)
                self.tasks.judge(conn.name, rank, code, sig)
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
        _unregister(sel, conn.sock)
        conn.close()
        if quiet or self.tasks.all_in(conn.ranks):
            return
        raw = next(n.raw for n in self.nodes if n.node == conn.name)
        if conn.started and not conn.tampered and self._resumer().broke(conn.name, raw, conn.ranks):
            return  # its noded may be restarting: srun reopens the stream (RESUME)
        why = "the connection to its noded was lost"
        self._lost(conn.name, conn.ranks, why, node_failure=True)

    def _resumer(self) -> Resumer:
        if self.resumer is None:
            from client.srun_resume import Resumer, node_down  # once a stream broke

            job_id = self.job.job_id or int(self.job_ref)
            self.resumer = Resumer(
                self.step_credential,
                job_id,
                self.step.step_id,
                self.resume_window_s,
                lambda name: node_down(self.api, name),
            )
        return self.resumer

    def _resume_due(self, sel: Poller) -> None:
        back, lost = self._resumer().attempt()
        for conn in back:
            old = self.streams.get(conn.name)
            self.streams[conn.name] = conn
            if old in self.stdin_conns:
                self.stdin_conns[self.stdin_conns.index(old)] = conn
            else:
                conn.send(ss.STDIN_EOF)
            sel.register(conn.sock, self._events(conn), conn)
            self._dispatch(conn, sel)  # what came with STARTED
        for name, ranks, why in lost:
            self._lost(name, ranks, why, node_failure=True)

    def _lost(self, node: str, ranks: list[int], why: object, node_failure: bool = False) -> None:
        self.failures.append(f"{node}: {why}")
        self.refused = self.refused or ("" if node_failure else self.failures[-1])
        self.tasks.lost(ranks)
        self.tasks.kill_all()  # Slurm's default: the step dies with a node (no --no-kill)
        if node_failure:
            self._node_failure(node, str(why))

    def _node_failure(self, node: str, why: str) -> None:
        """A node's noded gone mid-step (not a refusal): said as Slurm's srun says it,
        and told to ctld before srun exits, so the job's end waits for the node's
        verdict instead of ending with the batch script's exit (ctld/ops/suspects.py)."""
        if node in self.reported:
            return
        self.reported.add(node)
        say(PROG, f"error: Node failure on {node}")
        try:
            self.api.step_node_lost(
                {
                    "jobId": self.job_ref,
                    "stepId": self.step.step_id,
                    "node": node,
                    "run": self.job.restart_count,
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

    def _resized(self) -> None:
        """--pty: the task's terminal follows srun's."""
        if not self.cli.get("pty"):
            return
        for conn in self.streams.values():
            if 0 in conn.ranks and not conn.done:
                conn.send(ss.WINDOW, ss.WINDOW_FIELDS.pack(*srun_terminal.window()))

    def _send_signal(self, sig: int) -> None:
        for conn in self.streams.values():
            if not conn.done:  # a finished stream takes no more messages
                conn.send(ss.SIGNAL, ss.SIGNAL_FIELD.pack(sig))

    def _node_done(self, conn: NodeStream) -> None:
        if not conn.done:
            conn.send(ss.DONE)  # noded ends the stream once it has this
            conn.done = True

    def _kill_all(self) -> None:
        self._send_signal(signals.SIGKILL)

    def _on_interrupt(self) -> None:
        now = time.monotonic()
        if now - self.interrupted_at <= 1.0:
            say(PROG, f"sending Ctrl-C to {self.name}")
            say(PROG, "forcing job termination")
            self.tasks.kill_all()
            return
        self.interrupted_at = now
        say(PROG, "interrupt (one more within 1 sec to abort)")
        self.tasks.status(r for n in self.nodes for r in n.ranks)


def _unregister(sel: Poller, what: Any) -> None:
    try:  # noqa: SIM105 (contextlib costs srun's start-up)
        sel.unregister(what)
    except (KeyError, ValueError):
        pass  # not registered (any more)


def _noted(signum: int, frame: object) -> None:
    """The signal's number reaches srun's loop through the wake-up pipe."""
