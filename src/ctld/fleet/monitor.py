"""ctld's watch over its nodes: each heartbeat interval it enforces allocations' limits,
judges silence (NOT_RESPONDING when late, DOWN past the timeout, nobody while most
nodes are silent at once: liveness.py), signals jobs before a maintenance reservation
and lets the disruptions act. A node is declared DOWN through NodeOps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from corral.clock import Clock, SystemClock
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change, liveness
from ctld.core.outbox import Outbox
from ctld.core.state import State
from ctld.fleet.liveness import Verdicts
from ctld.fleet.loopwatch import LoopWatch
from ctld.model import failures
from ctld.model.nodes import POWER_ON
from ctld.ops.disruptions import Disruptions
from ctld.ops.endings import Endings
from ctld.ops.suspects import Suspects
from ctld.ops.time_limits import enforce_allocation_limits

log = structlog.get_logger("ctld")
#: NodeOps.node_down
NodeDown = Callable[..., Awaitable[None]]


class HeartbeatMonitor:
    def __init__(
        self,
        state: State,
        outbox: Outbox,
        endings: Endings,
        suspects: Suspects,
        disruptions: Disruptions,
        verdicts: Verdicts,
        watch: LoopWatch,
        node_down: NodeDown,
    ) -> None:
        self.state = state
        self.outbox = outbox
        self.endings = endings
        self.suspects = suspects
        self.disruptions = disruptions
        self.verdicts = verdicts
        self.watch = watch
        self.node_down = node_down
        self._maint_warned: set[tuple[int, int, str]] = set()  # (job, run, reservation)

    async def run_monitor(self) -> None:
        # on the real clock only: a test's ManualClock never stalls
        watching = asyncio.create_task(self.watch.run()) if _real(self.state.clock) else None
        try:
            while True:  # check first: a clock already past a deadline is acted on at once
                await enforce_allocation_limits(self.state, self.outbox, self.endings)
                await self.check_heartbeats()
                await self.warn_maintenance()
                await self.disruptions.check()
                hb = self.state.config.heartbeat  # as it is now: a reconfigure changes it
                await self.state.clock.sleep(min(hb.interval_s / 2, hb.timeout_s / 4))
        finally:
            if watching is not None:
                watching.cancel()

    async def check_heartbeats(self) -> None:
        """Late nodes get NOT_RESPONDING; silent ones past the timeout go DOWN (jobs requeued).

        A node not heard of since ctld started is timed from the start, so a node that
        died while ctld was away goes DOWN too.
        """
        st = self.state
        hb = st.config.heartbeat
        now = st.clock()
        deaf = self.watch.tick()  # a stall just ended is counted before anyone is judged
        since = self.verdicts.check(now)  # most nodes silent: nobody is DOWN for it
        for node in st.nodes.values():
            if node.down or node.power != POWER_ON:  # power saving judges those (power.py)
                self.verdicts.forget(node.name)
                continue
            state = failures.liveness(node, now, hb, since, deaf - node.deaf_mark)
            if state is failures.Liveness.DEAD and self.verdicts.holding:
                # NOT_RESPONDING at most, its jobs untouched
                state = failures.Liveness.LATE if node.registered else failures.Liveness.OK
            if state is failures.Liveness.DEAD:
                log.warning(
                    "node not responding: DOWN",
                    node=node.name,
                    silent_s=round(now - (node.last_heartbeat or st.start_time), 1),
                )
                await self.node_down(node, "heartbeat_lost", cause="monitor:heartbeat")
            elif state is failures.Liveness.LATE and not node.late:
                liveness(st, node, "late", cause="monitor:heartbeat")
                log.warning("node heartbeat late", node=node.name)
                st.wake()
        # after the DOWNs: a suspect node that is not DOWN by now is alive
        async with Change(st, self.outbox) as ch:
            self.suspects.expire(ch)

    async def warn_maintenance(self) -> None:
        """Send a job's --signal before a maintenance reservation starts on its nodes."""
        st = self.state
        warnings = failures.maintenance_warnings(
            st.jobs.values(), st.reservations.views(), st.clock()
        )
        fresh = [
            (job, warn, resv)
            for job, warn, resv in warnings
            if (job.job_id, job.restart_count, resv) not in self._maint_warned
            # a checkpointing job is warned (and requeued) by the disruptions instead
            and self.disruptions.notice(job) is None
        ]
        if not fresh:
            return
        async with Change(st, self.outbox, wake=False) as ch:
            for job, warn, resv in fresh:
                self._maint_warned.add((job.job_id, job.restart_count, resv))
                log.info("signalling before maintenance", job_id=job.job_id, reservation=resv)
                req = pb.SignalJobRequest(
                    job_id=job.job_id,
                    signal=warn.signal,
                    batch_only=warn.batch_only,
                    run=job.restart_count,
                )
                for alloc in job.allocations:
                    node = st.nodes.get(alloc.node)
                    if node is not None and (alloc.node == job.batch_host or not warn.batch_only):
                        ch.signal(node, req)


def _real(clock: Clock) -> bool:
    return isinstance(clock, SystemClock)
