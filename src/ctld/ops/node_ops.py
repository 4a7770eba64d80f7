"""The operations on a node, for every caller that changes one: drain it, declare it
DOWN (its jobs requeued or failed everywhere), drain it for the faults it reports, and
scontrol's DRAIN, RESUME, UNDRAIN and DOWN. The heartbeat monitor, job reports, power
saving and the API's UpdateNode call these; none of them calls another handler.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from corral.errors import InvalidNodeName, InvalidRequest, InvalidTransition
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.state import State, user_name
from ctld.model import failures
from ctld.model.authz import Policy
from ctld.model.nodes import NodeRecord
from ctld.ops.disruptions import Disruptions
from ctld.ops.endings import Endings

log = structlog.get_logger("ctld")


class NodeOps:
    def __init__(
        self,
        state: State,
        policy: Policy,
        endings: Endings,
        outbox: Outbox,
        disruptions: Disruptions,
    ) -> None:
        self.state = state
        self.policy = policy
        self.endings = endings
        self.outbox = outbox
        self.disruptions = disruptions  # drains and maintenance warn first

    def drain(
        self,
        ch: Change,
        node: NodeRecord,
        reason: str,
        when: float,
        *,
        cause: str,
        who: Identity | None = None,
    ) -> None:
        """Drain ``node`` (durably, with ``ch``); one already drained keeps its first
        reason, unless an operator (``who``) drains it again."""
        if node.drain and who is None:
            return
        uid = who.uid if who is not None else 0
        ch.node(node, "drained", cause=cause, now=when, reason=reason, user=user_name(uid), uid=uid)
        log.warning("node drained", node=node.name, reason=reason, by=node.reason_user)
        self.disruptions.drained(ch, node, reason, cause)
        self.state.wake()

    async def node_down(
        self,
        node: NodeRecord,
        event: str,
        *,
        cause: str,
        reason: str = failures.NOT_RESPONDING,
        who: Identity | None = None,
    ) -> None:
        """Declare ``node`` DOWN (``event``: its heartbeat lost, or an operator's DOWN with
        ``reason``): every job on it is stopped everywhere, requeued or failed."""
        st = self.state
        async with Change(st, self.outbox) as ch:
            user, uid = (who.user, who.uid) if who is not None else ("root", 0)
            ch.node(node, event, cause=cause, reason=reason, user=user, uid=uid)
            for job_id in sorted(node.job_ids):
                job = st.jobs.get(job_id)
                if job is None or not failures.on_node(job, node.name):
                    continue
                try:
                    self.endings.node_failed(
                        ch, job, node, f"node {node.name} DOWN: {reason}", cause
                    )
                except InvalidTransition as exc:
                    log.error("job on a DOWN node not settled", job_id=job_id, error=str(exc))
        st.wake()

    async def node_faults(self, node: NodeRecord, events: Iterable[pb.NodeHealthEvent]) -> None:
        """A node reports faults (GPU XID, ECC, lost GPU, epilog) or GPU health warnings:
        drain it; its checkpointing jobs are signalled and requeued (Disruptions.drained)."""
        # drain() wakes the scheduler
        async with Change(self.state, self.outbox, wake=False) as ch:
            for ev in events:
                log.error("node fault", node=node.name, reason=ev.reason, detail=ev.detail[:512])
                self.drain(
                    ch,
                    node,
                    ev.reason or "node fault",
                    ev.time or self.state.clock(),
                    # a warning (a degrading GPU) drains like a fault; the cause tells them apart
                    cause=f"node:{node.name} {'warning' if _is_warning(ev) else 'fault'}",
                )

    async def update_node(self, who: Identity, req: pb.UpdateNodeRequest) -> None:
        """scontrol update NodeName=... State=DRAIN|RESUME|UNDRAIN|DOWN Reason=...

        DRAIN lets running jobs finish and places nothing new; DOWN requeues (or fails)
        its jobs now; RESUME returns it: a DOWN node registers again first (and is
        fenced: what it still runs of jobs that moved is killed).
        """
        st = self.state
        self.policy.check_operator(who, "update node")
        state = req.state.upper()
        if state not in ("DRAIN", "RESUME", "UNDRAIN", "DOWN"):
            raise InvalidRequest(f"Invalid node state specified: {req.state}")
        if state == "DRAIN" and not req.reason.strip():
            raise InvalidRequest("You must specify a reason when DRAINING a node")
        if state == "DOWN" and not req.reason.strip():
            raise InvalidRequest("You must specify a reason when DOWNING a node")
        if not req.names:
            raise InvalidNodeName("No node name specified")
        nodes = [st.node(name) for name in req.names]
        now = st.clock()
        cause = f"rpc:UpdateNode {who.user}"
        ch = Change(st, self.outbox)
        for node in nodes:
            if state == "DOWN":
                await self.node_down(
                    node, "downed", cause=cause, reason=req.reason.strip(), who=who
                )
                continue
            if state == "RESUME" and node.down:
                ch.node(node, "resumed", cause=cause, now=now)
                log.info("node resumed from DOWN", node=node.name, by=who.user)
            if state == "DRAIN":
                self.drain(ch, node, req.reason.strip(), now, cause=cause, who=who)
            elif node.drain:
                ch.node(node, "undrained", cause=cause, now=now)
                log.info("node resumed", node=node.name, by=who.user)
        await ch.commit()
        st.wake()  # a resumed or drained node changes what can start


def _is_warning(ev: pb.NodeHealthEvent) -> bool:
    return ev.detail.startswith("warning:")  # noded's detail is "<kind>: <detail>"
