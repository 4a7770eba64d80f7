"""Signals ctld sends nodes, and the requests it builds for them.

A change queues its signals (``Change.signal``); they are sent here only once the
change is durable.
"""

from __future__ import annotations

import signal as signal_mod
from collections.abc import Iterable
from typing import Protocol

import structlog

from corral.errors import ControllerUnavailable, CorralError, JobStateConflict
from corral.wire import corral_pb2 as pb
from ctld.core.state import State
from ctld.model.nodes import NodeRecord

log = structlog.get_logger("ctld")

Signal = tuple[NodeRecord, pb.SignalJobRequest]


class Dispatcher(Protocol):
    """How ctld reaches nodes (ctld/daemon/dispatch.py over gRPC; tests may record instead)."""

    async def launch(self, node: NodeRecord, request: pb.LaunchJobRequest) -> None: ...

    async def signal(self, node: NodeRecord, request: pb.SignalJobRequest) -> bool: ...

    # scontrol reconfigure: the node's noded reads its config again (its answer)
    async def reconfigure(self, node: NodeRecord) -> pb.Reconfigured: ...


class Outbox:
    def __init__(self, state: State, dispatcher: Dispatcher) -> None:
        self.state = state
        self.dispatcher = dispatcher

    def send(self, signals: Iterable[Signal]) -> None:
        for node, request in signals:
            self.state.spawn(self._send(node, request))

    async def _send(self, node: NodeRecord, req: pb.SignalJobRequest) -> None:
        """Deliver; a kill to an unreachable node is retried until the node answers or is
        declared DOWN (then fencing kills what is left when it comes back)."""
        delay = 0.5
        while True:
            try:
                await self.dispatcher.signal(node, req)
                return
            except ControllerUnavailable as exc:  # dispatch's NodeUnreachable
                if not req.terminate or node.down:
                    log.warning("signal not delivered", job_id=req.job_id, node=node.name)
                    return
                log.warning(
                    "kill not delivered, will retry",
                    job_id=req.job_id,
                    node=node.name,
                    error=str(exc),
                )
            except CorralError as exc:
                log.warning(
                    "signal not delivered", job_id=req.job_id, node=node.name, error=str(exc)
                )
                return
            await self.state.clock.sleep(delay)  # the injected clock (tests: ManualClock)
            delay = min(delay * 2, self.state.config.heartbeat.interval_s)

    def terminate_request(self, job: pb.Job) -> pb.SignalJobRequest:
        """End the job's processes on a node: SIGCONT+SIGTERM, SIGKILL after KillWait."""
        return pb.SignalJobRequest(
            job_id=job.job_id,
            run=job.restart_count,
            signal=int(signal_mod.SIGTERM),
            terminate=True,
            kill_wait_s=self.state.config.controller.kill_wait_s,
        )

    def batch_node(self, job: pb.Job) -> NodeRecord:
        node = self.state.nodes.get(job.batch_host)
        if node is None:
            raise JobStateConflict(f"job {job.job_id} has no batch host")
        return node

    def terminate_batch(self, job: pb.Job) -> Signal:
        return self.batch_node(job), self.terminate_request(job)

    def terminate_elsewhere(self, job: pb.Job) -> list[Signal]:
        """Stop the job's step tasks on its nodes other than the batch host (which its
        own terminate covers)."""
        return [
            (node, self.terminate_request(job))
            for alloc in job.allocations
            if (node := self.state.nodes.get(alloc.node)) is not None
            and alloc.node != job.batch_host
        ]

    def terminate_everywhere(self, job: pb.Job) -> list[Signal]:
        """Whatever still runs for the job on any of its nodes goes."""
        return [
            (node, self.terminate_request(job))
            for alloc in job.allocations
            if (node := self.state.nodes.get(alloc.node)) is not None
        ]
