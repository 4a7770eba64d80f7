"""srun's task stream on this node: the framed protocol of corral/stepstream.py.

A connection gets a fresh nonce; its first frame must be START with the step
credential's proof over that nonce and the body, or it is refused and closed before
anything else is read (a bounded wait, a bounded size). Without TLS, every frame after
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
from collections.abc import AsyncIterator
from typing import Any

import structlog

from corral import stepstream as ss
from corral.errors import CorralError
from corral.wire import corral_pb2 as pb
from noded.attach import write_stdin
from noded.steps import Chunk, Started, StepRunner

log = structlog.get_logger("noded")

AUTH_TIMEOUT_S = 10.0  # from accept to a proven START


class Refused(Exception):
    """The connection's first frame is not a START that parses."""


def parse_start(body: bytes) -> pb.RunTasksRequest:
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


class StepStreamServer:
    def __init__(self, steps: StepRunner, tls: ssl.SSLContext | None = None) -> None:
        self.steps = steps
        self.tls = tls
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self.handle, host, port, ssl=self.tls)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2.0)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        nonce = os.urandom(ss.NONCE_BYTES)
        try:
            writer.write(ss.frame(ss.HELLO, ss.MAGIC + nonce))
            try:
                kind, payload = await asyncio.wait_for(read_frame(reader), AUTH_TIMEOUT_S)
                if kind not in (ss.START, ss.ATTACH) or len(payload) <= ss.PROOF_BYTES:
                    raise Refused("the stream must begin with START and the step's credential")
                mac, body = payload[: ss.PROOF_BYTES], payload[ss.PROOF_BYTES :]
                start = parse_start(body)
            except (Refused, TimeoutError, asyncio.IncompleteReadError, OSError) as exc:
                log.warning("task stream refused", peer=str(peer), error=str(exc) or "timeout")
                await self._refuse(writer, str(exc) or "no START in time")
                return

            tags = None if self.tls is not None else Tags()
            if kind == ss.ATTACH:
                await self._attach(start, body, mac, nonce, tags, reader, writer)
                return

            def proven(credential: str) -> bool:
                good = hmac.compare_digest(ss.proof(credential, nonce, body), mac)
                if good and tags is not None:
                    tags.key(credential, nonce)
                return good

            await self._serve(start, proven, tags, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _attach(
        self,
        start: pb.RunTasksRequest,
        body: bytes,
        mac: bytes,
        nonce: bytes,
        tags: Tags | None,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
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

        events = self.steps.events(start, inputs(), check=proven)
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
