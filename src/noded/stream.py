"""srun's task stream on this node: the framed protocol of corral/stepstream.py.

A connection gets a fresh nonce; its first frame must be START with the step
credential's proof over that nonce and the body, or it is refused and closed before
anything else is read (a bounded wait, a bounded size). Until it is proven a
connection is unproven, and those are bounded (docs/security.md, "noded's task-stream
port"): ``UNPROVEN_PER_PEER`` per peer address (all of loopback is one) and
``UNPROVEN_TOTAL`` in all, or the newcomer is refused at accept; a first frame that
is not START, or declares more than ``MAX_START`` bytes, is refused from its header
alone; the bodies being read share ``UNPROVEN_BYTES_PER_PEER`` per peer and
``UNPROVEN_BYTES`` in all (a frame waits for room, within the deadline, rather than
being buffered); and everything up to a whole START must arrive within
``AUTH_TIMEOUT_S`` of the accept. Without TLS, every frame after
START carries its tag both ways (``FrameMac``): a frame that fails it ends the step as
srun going away does. The step then runs through the
same StepRunner as gRPC's RunTasks: frames in become TaskInputs, TaskEvents go out as
frames, and ``drain`` after each write is the flow control (a slow srun fills the
socket, then the runner's bounded queue, then the tasks' pipes: nothing is dropped).
srun going away (the connection ends without DONE, or a write fails) ends the step
here as gRPC's cancellation did: its tasks are killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import structlog

from corral import stepstream as ss
from corral.errors import CorralError
from corral.peers import Places, peer_key
from corral.wire import corral_pb2 as pb
from noded.attach import write_stdin
from noded.steps import Chunk, Started, StepRunner

log = structlog.get_logger("noded")

AUTH_TIMEOUT_S = 10.0  # from accept to a whole START
UNPROVEN_PER_PEER = 32
UNPROVEN_TOTAL = 128
# START bodies being read before their proof: a peer's, and everyone's together
UNPROVEN_BYTES_PER_PEER = 16 * 1024 * 1024
UNPROVEN_BYTES = 32 * 1024 * 1024
READ_LIMIT = 32 * 1024  # a connection's read buffer (it stops reading past twice this)
CHUNK = 64 * 1024


class Refused(Exception):
    """The connection's first frame is not a START that parses."""


def parse_start(body: bytes | bytearray) -> pb.RunTasksRequest:
    """START's JSON body as the RunTasksRequest StepRunner takes (Refused if malformed).
    Only ids: the job and the step themselves come from ctld (GetStep)."""
    try:
        raw = json.loads(body)
        if not isinstance(raw, dict):
            raise TypeError("not an object")
        env = raw.get("environment", {})
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise TypeError("environment: not a map of strings")
        job_id, step_id = int(raw["jobId"]), int(raw["stepId"])
        start = pb.RunTasksRequest(
            job=pb.Job(job_id=job_id),
            step=pb.Step(job_id=job_id, step_id=step_id),
            node=str(raw.get("node", "")),
            environment=env,
            cwd=str(raw.get("cwd", "")),
            stdin_ranks=[int(r) for r in raw.get("stdinRanks", [])],
            master_addr=str(raw.get("masterAddr", "")),
            master_port=int(raw.get("masterPort", 0)),
            cluster=str(raw.get("cluster", "")),
        )
        pty = raw.get("pty")
        if pty is not None:
            start.pty.CopyFrom(pb.WindowSize(rows=int(pty["rows"]), cols=int(pty["cols"])))
        return start
    except (ValueError, TypeError, KeyError) as exc:
        raise Refused(f"malformed START: {exc}") from None


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readexactly(ss.HEADER.size)
    length, kind = ss.HEADER.unpack(head)
    if length < 1 or length > ss.MAX_FRAME:
        raise Refused(f"frame of {length} bytes (the limit is {ss.MAX_FRAME})")
    return kind, await reader.readexactly(length - 1)


def event_frame(item: Started | Chunk, mac: ss.FrameMac | None = None) -> bytes:
    if isinstance(item, Chunk):
        if item.exit is None:  # output: the bytes as they came, behind a 9-byte head
            kind = ss.STDERR if item.stderr else ss.STDOUT
            if mac is not None:
                return mac.seal(kind, ss.RANK.pack(item.rank), item.data)
            return ss.HEADER.pack(len(item.data) + 5, kind) + ss.RANK.pack(item.rank) + item.data
        kind, payload = ss.EXIT, ss.EXIT_FIELDS.pack(item.rank, *item.exit)
    else:
        body = {"masterPort": item.master_port, "pids": item.pids}
        kind, payload = ss.STARTED, json.dumps(body).encode()
    return ss.frame(kind, payload) if mac is None else mac.seal(kind, payload)


class Tags:
    """The tags of one plaintext connection, once its START is proven (None with TLS)."""

    def __init__(self) -> None:
        self.inbound: ss.FrameMac | None = None
        self.outbound: ss.FrameMac | None = None
        self.started = False  # STARTED sent: from then on even REFUSED carries a tag

    def key(self, credential: str, nonce: bytes) -> None:
        up, down = ss.session_keys(credential, nonce)
        self.inbound = ss.FrameMac(up, hashlib.sha256)
        self.outbound = ss.FrameMac(down, hashlib.sha256)


def task_input(kind: int, payload: bytes) -> pb.TaskInput | None:
    if kind == ss.STDIN:
        return pb.TaskInput(stdin=payload)
    if kind == ss.STDIN_EOF:
        return pb.TaskInput(stdin_eof=True)
    if kind == ss.SIGNAL and len(payload) == ss.SIGNAL_FIELD.size:
        return pb.TaskInput(signal=ss.SIGNAL_FIELD.unpack(payload)[0])
    if kind == ss.WINDOW and len(payload) == ss.WINDOW_FIELDS.size:
        rows, cols = ss.WINDOW_FIELDS.unpack(payload)
        return pb.TaskInput(window=pb.WindowSize(rows=rows, cols=cols))
    return None


class _Budget:
    """Bytes of unproven START bodies in memory, per peer and in all: a reader waits for
    room before it allocates its body, so memory never follows what unproven peers send,
    and one peer cannot take all the room."""

    def __init__(self, per_peer: int, total: int) -> None:
        self.per_peer, self.total = per_peer, total
        self.used = 0
        self.by_peer: dict[str, int] = {}
        self._waiters: list[asyncio.Future[None]] = []

    async def take(self, key: str, n: int) -> None:
        while self.used + n > self.total or self.by_peer.get(key, 0) + n > self.per_peer:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            finally:
                self._waiters.remove(fut)
        self.used += n
        self.by_peer[key] = self.by_peer.get(key, 0) + n

    def give_back(self, key: str, n: int) -> None:
        if not n:
            return
        self.used -= n
        left = self.by_peer.pop(key, 0) - n
        if left > 0:
            self.by_peer[key] = left
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)


class _Unproven:
    """One connection's place and START body (and its bytes of the budget), given back
    once: proven, or gone. The body lives here, not in a frame of the reader: an
    exception's traceback (a cycle through asyncio.wait_for) then cannot keep it."""

    def __init__(self, server: StepStreamServer, key: str) -> None:
        self.server, self.key, self.bytes = server, key, 0
        self.body: bytearray | None = None
        self.held = True

    def release(self) -> None:
        self.body = None
        if self.held:
            self.held = False
            self.server.places.give_back(self.key)
            self.server.budget.give_back(self.key, self.bytes)
            self.bytes = 0


class StepStreamServer:
    def __init__(self, steps: StepRunner, tls: ssl.SSLContext | None = None) -> None:
        self.steps = steps
        self.tls = tls
        self.server: asyncio.Server | None = None
        self.places = Places(UNPROVEN_PER_PEER, UNPROVEN_TOTAL)
        self.budget = _Budget(UNPROVEN_BYTES_PER_PEER, UNPROVEN_BYTES)
        # cleared while noded takes over the steps an earlier noded ran: a RESUME (or
        # anything) that comes meanwhile waits, instead of being told the step is not here
        self.ready = asyncio.Event()
        self.ready.set()

    async def start(self, host: str, port: int, *, serving: bool = True) -> int:
        """Bind the port (its number returned); take connections now, or (``serving``
        False) from ``serve()``: until then a connection is refused, as if no noded ran."""
        self.server = await asyncio.start_server(
            self.handle,
            host,
            port,
            ssl=self.tls,
            limit=READ_LIMIT,
            ssl_handshake_timeout=AUTH_TIMEOUT_S if self.tls is not None else None,
            start_serving=serving,  # asyncio listens only once serving
        )
        return int(self.server.sockets[0].getsockname()[1])

    async def serve(self) -> None:
        if self.server is not None:
            await self.server.start_serving()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2.0)

    def _warn(self, key: str, what: str, **kw: Any) -> None:
        """A refusal, logged once per peer every few seconds however many come."""
        if self.places.turned_away(key, time.monotonic()):
            log.warning(what, peer=key, **kw)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = peer_key(writer.get_extra_info("peername"))
        why = self.places.take(key)
        if why:
            self._warn(key, "task stream turned away", error=why)
            with contextlib.suppress(Exception):
                writer.write(ss.frame(ss.REFUSED, why.encode()))
                writer.close()
            return
        unproven = _Unproven(self, key)
        nonce = os.urandom(ss.NONCE_BYTES)
        try:
            writer.write(ss.frame(ss.HELLO, ss.MAGIC + nonce))
            try:
                kind, body = await asyncio.wait_for(
                    self._read_start(reader, unproven), AUTH_TIMEOUT_S
                )
                mac = bytes(body[: ss.PROOF_BYTES])
                del body[: ss.PROOF_BYTES]  # in place: no second copy of the body
                start = parse_start(body)
            except (Refused, TimeoutError, asyncio.IncompleteReadError, OSError) as exc:
                self._warn(key, "task stream refused", error=str(exc) or "timeout")
                await self._refuse(writer, str(exc) or "no START in time")
                return

            try:
                await asyncio.wait_for(self.ready.wait(), AUTH_TIMEOUT_S)
            except TimeoutError:
                await self._refuse(writer, "noded is still starting: try again")
                return
            tags = None if self.tls is not None else Tags()
            if kind == ss.ATTACH:
                await self._attach(start, bytes(body), mac, nonce, tags, reader, writer, unproven)
                return
            prove = ss.resume_proof if kind == ss.RESUME else ss.proof

            def proven(credential: str) -> bool:
                good = hmac.compare_digest(prove(credential, nonce, body), mac)
                if good:
                    unproven.release()  # a proven stream no longer counts
                    if tags is not None:
                        tags.key(credential, nonce)
                return good

            await self._serve(start, proven, tags, reader, writer, resume=kind == ss.RESUME)
        finally:
            unproven.release()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_start(
        self, reader: asyncio.StreamReader, unproven: _Unproven
    ) -> tuple[int, bytearray]:
        """The first frame (START, or sattach's ATTACH) and its payload, judged by its
        header before a byte of it is read, and read into memory only once the unproven
        connections' budget has room for it."""
        length, kind = ss.HEADER.unpack(await reader.readexactly(ss.HEADER.size))
        if kind not in (ss.START, ss.ATTACH, ss.RESUME):
            raise Refused("the stream must begin with START and the step's credential")
        size = length - 1
        if size > ss.MAX_START:
            raise Refused(f"a START of {size} bytes (the limit is {ss.MAX_START})")
        if size <= ss.PROOF_BYTES:
            raise Refused("the stream must begin with START and the step's credential")
        await self.budget.take(unproven.key, size)
        unproven.bytes = size
        unproven.body = bytearray(size)
        view, got = memoryview(unproven.body), 0
        try:
            while got < size:
                chunk = await reader.read(min(CHUNK, size - got))
                if not chunk:  # (no copy of what came: it is thrown away)
                    raise asyncio.IncompleteReadError(b"", size)
                view[got : got + len(chunk)] = chunk
                got += len(chunk)
        finally:
            view.release()  # a released view holds no buffer, whoever holds the view
        return kind, unproven.body

    async def _attach(
        self,
        start: pb.RunTasksRequest,
        body: bytes,
        mac: bytes,
        nonce: bytes,
        tags: Tags | None,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        unproven: _Unproven,
    ) -> None:
        """sattach: the step's output from here on (its recent output first), its
        input to the tasks; the step itself neither waits for it nor ends with it."""
        job_id, step_id = start.job.job_id, start.step.step_id
        try:
            _job, _step, credential = await self.steps.verify(job_id, step_id)
            proof = ss.attach_proof(credential, nonce, body) if credential else b""
            if not credential or not hmac.compare_digest(proof, mac):
                raise CorralError(f"step {job_id}.{step_id}: the step credential does not match")
            running = self.steps.steps.get((job_id, step_id))
            if running is None or start.node != self.steps.node_name:
                raise CorralError(f"step {job_id}.{step_id} runs no tasks on this node")
        except CorralError as exc:
            log.warning("sattach refused", job_id=job_id, step_id=step_id, error=str(exc))
            await self._refuse(writer, str(exc))
            return
        unproven.release()  # proven: an attached sattach no longer counts
        if tags is not None:
            tags.key(credential, nonce)
            tags.started = True
        out = tags.outbound if tags is not None else None
        ranks = None if not start.stdin_ranks else set(start.stdin_ranks)
        listener = running.listeners.subscribe()
        me = asyncio.current_task()
        log.info("sattach attached", job_id=job_id, step_id=step_id, node=self.steps.node_name)

        async def inputs() -> None:
            with contextlib.suppress(
                asyncio.IncompleteReadError, OSError, Refused, ss.TamperedError
            ):
                while True:
                    kind, raw = await read_frame(reader)
                    payload = bytearray(raw)
                    if tags is not None and tags.inbound is not None:
                        tags.inbound.open(kind, payload)
                    if kind == ss.DONE:
                        break
                    if kind == ss.STDIN:
                        await write_stdin(running.tasks, ranks, bytes(payload))
            if me is not None:
                me.cancel()  # detached (DONE) or gone: stop sending

        feeder = asyncio.create_task(inputs())
        try:
            hello = json.dumps({"ranks": [t.rank for t in running.tasks]}).encode()
            writer.write(
                ss.frame(ss.STARTED, hello) if out is None else out.seal(ss.STARTED, hello)
            )
            await writer.drain()
            while (chunk := await listener.queue.get()) is not None:
                writer.write(event_frame(chunk, out))
                await writer.drain()
            if listener.behind:
                why = "sattach fell behind the step's output and was detached"
                await self._refuse(writer, why, tags)
        except (OSError, asyncio.CancelledError):
            log.info("sattach detached", job_id=job_id, step_id=step_id)
        finally:
            running.listeners.unsubscribe(listener)
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder

    @staticmethod
    async def _refuse(writer: asyncio.StreamWriter, why: str, tags: Tags | None = None) -> None:
        with contextlib.suppress(Exception):
            if tags is not None and tags.started and tags.outbound is not None:
                writer.write(tags.outbound.seal(ss.REFUSED, why.encode()))
            else:
                writer.write(ss.frame(ss.REFUSED, why.encode()))
            await writer.drain()

    async def _serve(
        self,
        start: pb.RunTasksRequest,
        proven: Any,
        tags: Tags | None,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        resume: bool = False,
    ) -> None:
        me = asyncio.current_task()

        async def inputs() -> AsyncIterator[pb.TaskInput]:
            # read only after STARTED (StepRunner feeds the tasks then): the keys are set
            try:
                while True:
                    kind, raw = await read_frame(reader)
                    payload = bytearray(raw)
                    if tags is not None:
                        if tags.inbound is None:
                            raise ss.TamperedError("a frame before the step was proven")
                        tags.inbound.open(kind, payload)
                    if kind == ss.DONE:
                        return
                    item = task_input(kind, bytes(payload))
                    if item is not None:
                        yield item
            except ss.TamperedError as exc:
                # a peer on the path wrote into the connection: nothing more from it
                log.warning("task stream tampered with", job_id=start.job.job_id, error=str(exc))
                if me is not None:
                    me.cancel()
            except (asyncio.IncompleteReadError, OSError, Refused):
                # srun went away without DONE: its step ends (gRPC's cancellation)
                if me is not None:
                    me.cancel()

        job_id, step_id = start.job.job_id, start.step.step_id
        events = (
            self.steps.resume(job_id, step_id, start.node, proven, inputs())
            if resume
            else self.steps.events(start, inputs(), check=proven)
        )
        outbound = None
        try:
            async for event in events:
                if tags is not None and outbound is None:
                    outbound = tags.outbound  # set by the proof, before the first event
                    tags.started = True
                writer.write(event_frame(event, outbound))
                await writer.drain()
        except CorralError as exc:
            log.warning("task stream refused", job_id=start.job.job_id, error=str(exc))
            await self._refuse(writer, str(exc), tags)
        except (OSError, asyncio.CancelledError):
            log.info("srun went away", job_id=start.job.job_id, step_id=start.step.step_id)
        finally:
            await events.aclose()
