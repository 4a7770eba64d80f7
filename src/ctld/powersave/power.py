"""Power saving (Slurm's SuspendProgram/ResumeProgram): the loop that powers idle nodes
down and the nodes jobs need up, at the configured rates, and judges the timeouts; and
``scontrol power up|down`` / ``State=POWER_*``. Every change goes through the node state
machine (``ctld/model/nodestate.py``) with its cause; what is due comes from ``power_plan``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine, Iterable
from typing import Any

import structlog

from corral import hostlist
from corral.errors import InvalidNodeName, InvalidRequest
from corral.identity import Identity
from ctld.core.commit import Change
from ctld.core.state import State
from ctld.model import power_plan
from ctld.model.authz import Policy
from ctld.model.nodes import POWER_ON, POWERED_DOWN, POWERING_DOWN, POWERING_UP, NodeRecord
from ctld.model.nodestate import IDLE_ON_SUSPEND, may
from ctld.ops.node_ops import NodeOps
from ctld.powersave.power_programs import run_program
from ctld.sched import Plan

log = structlog.get_logger("ctld")

TICK_S = 1.0
RESUME_TIMEOUT_REASON = "ResumeTimeout reached"  # Slurm's own words (sinfo -R)
POWER_STATES = ("POWER_UP", "POWER_DOWN", "POWER_DOWN_ASAP", "POWER_DOWN_FORCE")


class _Rate:
    """At most ``per_minute`` in any minute (0: no limit)."""

    def __init__(self) -> None:
        self.times: deque[float] = deque()

    def room(self, per_minute: int, now: float) -> int:
        while self.times and self.times[0] <= now - 60.0:
            self.times.popleft()
        return 1 << 30 if per_minute == 0 else max(0, per_minute - len(self.times))

    def took(self, count: int, now: float) -> None:
        self.times.extend([now] * count)


class PowerManager:
    def __init__(self, state: State, policy: Policy, reports: NodeOps) -> None:
        self.state = state
        self.policy = policy
        self.reports = reports
        self.idle_since: dict[str, float] = {}
        self.wanted: dict[str, str] = {}  # nodes to power up (in order) -> the cause
        self.forced: set[str] = set()  # POWER_DOWN_FORCE: powered down once their jobs left
        self._resumes, self._suspends = _Rate(), _Rate()
        self._tasks: set[asyncio.Task[None]] = set()
        self.resumes = self.suspends = self.resume_failures = 0  # the metrics' counters

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        while True:
            await self.tick()
            await self.state.clock.sleep(TICK_S)

    async def tick(self) -> None:
        st = self.state
        cfg = st.config.power
        now = st.clock()
        for node in st.nodes.values():
            if node.job_ids or not power_plan.may_suspend(node):
                self.idle_since.pop(node.name, None)
            else:
                self.idle_since.setdefault(node.name, now)
        done = [
            n
            for n in st.nodes.values()
            if n.power == POWERING_DOWN and now >= n.power_since + cfg.suspend_timeout_s
        ]
        late = [
            n
            for n in st.nodes.values()
            if n.power == POWERING_UP and now >= n.power_since + cfg.resume_timeout_s
        ]
        if done or late:
            async with Change(st) as ch:
                for n in done:
                    reason = IDLE_ON_SUSPEND if cfg.idle_on_node_suspend else ""
                    ch.node(n, "powered_down", cause="power:suspend_timeout", reason=reason)
                for n in late:
                    why = RESUME_TIMEOUT_REASON
                    ch.node(n, "resume_failed", cause="power:resume_timeout", reason=why)
            for n in late:
                log.warning("node missed resume_timeout: DOWN", node=n.name)
            self._resume_failed([n.name for n in late])
        await self._suspend_due(now)
        await self._resume_wanted(now)

    async def _suspend_due(self, now: float) -> None:
        st = self.state
        forced = [
            st.nodes[n]
            for n in sorted(self.forced)
            if n in st.nodes and st.nodes[n].power == POWER_ON and not st.nodes[n].job_ids
        ]
        due = power_plan.due(st.nodes.values(), self.idle_since, st.config, now)
        room = self._suspends.room(st.config.power.suspend_rate, now)
        names = {n.name for n in forced}
        nodes = forced + [n for n in due if n.name not in names][:room]
        if nodes:
            self._suspends.took(len(nodes) - len(forced), now)
            self.forced.difference_update(n.name for n in forced)
            await self.power_down(nodes, cause="power:suspend_time")

    async def _resume_wanted(self, now: float) -> None:
        st = self.state
        for name in list(self.wanted):
            node = st.nodes.get(name)
            if node is None or node.power != POWERED_DOWN or node.down:
                del self.wanted[name]
        room = self._resumes.room(st.config.power.resume_rate, now)
        names = list(self.wanted)[:room]
        if names:
            self._resumes.took(len(names), now)
            causes = {self.wanted.pop(n) for n in names}
            await self.power_up([st.nodes[n] for n in names], cause=sorted(causes)[0])

    # ------------------------------------------------------------ the scheduler's side

    def after_plan(self, plan: Plan) -> set[int]:
        """The plan's jobs that wait for a power-up (their reason says so): the nodes they
        need that are off are asked for (powered up by the loop at resume_rate)."""
        st = self.state
        if not st.config.power.resume_program or not plan.forecasts:
            return set()  # no power saving: nothing is ever off
        waiting = power_plan.waiting_for_power(plan, st.nodes, st.config, st.clock())
        for job_id, names in waiting.items():
            for name in names:
                if st.nodes[name].power == POWERED_DOWN and name not in self.wanted:
                    self.wanted[name] = f"sched:job={job_id}"
                    self._spawn(self._tick_soon())
        return set(waiting)

    async def _tick_soon(self) -> None:
        await self._resume_wanted(self.state.clock())

    # ------------------------------------------------------------ powering down and up

    async def power_down(self, nodes: list[NodeRecord], *, cause: str) -> None:
        nodes = [n for n in nodes if self._may("powering_down", n)]
        if not nodes:
            return
        async with Change(self.state) as ch:
            for n in nodes:
                ch.node(n, "powering_down", cause=cause)
        self.suspends += len(nodes)
        names = [n.name for n in nodes]
        log.info("powering nodes down", nodes=hostlist.compress(names), cause=cause)
        cfg = self.state.config.power
        if cfg.suspend_program:
            self._spawn(self._program("suspend", cfg.suspend_program, names))

    async def power_up(self, nodes: list[NodeRecord], *, cause: str) -> None:
        nodes = [n for n in nodes if self._may("powering_up", n)]
        if not nodes:
            return
        async with Change(self.state) as ch:
            for n in nodes:
                ch.node(n, "powering_up", cause=cause)
        self.resumes += len(nodes)
        names = [n.name for n in nodes]
        log.info("powering nodes up", nodes=hostlist.compress(names), cause=cause)
        cfg = self.state.config.power
        if cfg.resume_program:
            self._spawn(self._program("resume", cfg.resume_program, names))

    @staticmethod
    def _may(event: str, node: NodeRecord) -> bool:
        return may(node, event)

    async def _program(self, kind: str, program: str, names: list[str]) -> None:
        cfg = self.state.config.power
        timeout = cfg.resume_timeout_s if kind == "resume" else cfg.suspend_timeout_s
        result = await run_program(kind, program, names, user=cfg.program_user, timeout_s=timeout)
        if result.ok:
            return
        st = self.state
        reason = f"{kind.capitalize()}Program failed: {result.detail}"
        if kind == "resume":
            failed = [st.nodes[n] for n in names if st.nodes[n].power == POWERING_UP]
            if failed:
                async with Change(st) as ch:
                    for n in failed:
                        ch.node(n, "resume_failed", cause="power:resume_program", reason=reason)
                self._resume_failed([n.name for n in failed])
        elif kind == "suspend":
            failed = [
                st.nodes[n] for n in names if st.nodes[n].power in (POWERING_DOWN, POWERED_DOWN)
            ]
            if failed:
                async with Change(st) as ch:
                    for n in failed:
                        ch.node(n, "suspend_failed", cause="power:suspend_program", reason=reason)

    def _resume_failed(self, names: list[str]) -> None:
        if not names:
            return
        self.resume_failures += len(names)
        st = self.state
        st.wake()  # what waited for them is planned elsewhere
        program = st.config.power.resume_fail_program
        if program:
            self._spawn(self._program("resume_fail", program, names))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ scontrol

    async def update(self, who: Identity, names: Iterable[str], state: str) -> None:
        """scontrol update NodeName=... State=POWER_UP|POWER_DOWN|POWER_DOWN_ASAP|
        POWER_DOWN_FORCE, and scontrol power up|down NODELIST (Slurm 22.05's meaning)."""
        st = self.state
        self.policy.check_operator(who, "update node")
        if state not in POWER_STATES:
            raise InvalidRequest(f"Invalid node state specified: {state}")
        if not st.config.power.resume_program:
            raise InvalidRequest("power saving is not configured ([power].resume_program)")
        nodes = [st.node(name) for name in names]
        if not nodes:
            raise InvalidNodeName("No node name specified")
        cause = f"rpc:UpdateNode {who.user} {state}"
        if state == "POWER_UP":
            await self._operator_up(nodes, cause)
            return
        busy: list[NodeRecord] = []
        async with Change(st) as ch:
            for n in nodes:
                if n.power_down_pending and state == "POWER_DOWN" and not n.job_ids:
                    continue
                if n.power == POWER_ON and n.job_ids and not n.power_down_pending:
                    ch.node(n, "power_down_asked", cause=cause)
                    busy.append(n)
                if state == "POWER_DOWN_ASAP" and n.job_ids:
                    self.reports.drain(ch, n, "POWER_DOWN_ASAP", st.clock(), cause=cause, who=who)
        if state == "POWER_DOWN_FORCE":
            for n in busy:  # their jobs requeued now, then powered down
                await self.reports.node_down(n, "downed", cause=cause, reason=state, who=who)
                async with Change(st) as ch:
                    ch.node(n, "resumed", cause=cause)
                self.forced.add(n.name)
        idle = [n for n in nodes if n.power == POWER_ON and not n.job_ids]
        await self.power_down(idle, cause=cause)
        st.wake()

    async def _operator_up(self, nodes: list[NodeRecord], cause: str) -> None:
        st = self.state
        for n in nodes:
            if n.power == POWERING_DOWN:
                raise InvalidRequest(f"node {n.name} is powering down: power it up after")
            if n.down and n.power == POWERED_DOWN:
                raise InvalidRequest(f"node {n.name} is DOWN: State=RESUME first")
        pending = [n for n in nodes if n.power_down_pending]
        if pending:
            async with Change(st) as ch:
                for n in pending:
                    ch.node(n, "power_down_cancelled", cause=cause)
        await self.power_up([n for n in nodes if n.power == POWERED_DOWN], cause=cause)
        st.wake()
