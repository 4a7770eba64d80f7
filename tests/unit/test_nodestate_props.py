"""ctld's node state machine (ctld/model/nodestate.py) as a Hypothesis state machine: random
events (each of its table, possible or not, with a cause, a reason, a user), jobs
placed and gone, checked at every step:

- no node flag without an event with a cause: a flag (drain, DOWN, an operator's
  DOWN, late, fencing, a power state, a pending power down) is raised only by an
  event the diagram lets raise it, recorded as the node's last change with its cause,
  and kept in its history while the history still reaches back to it; a reason is
  always the reason of a change with a cause;
- an impossible event raises InvalidTransition and changes nothing;
- the history: the node's recent changes in order, the last one last, each with its
  cause, at most ``nodes.HISTORY``;
- what the diagram draws holds: an operator's DOWN is a DOWN, a late node is
  registered and not DOWN, a node that is not on is not registered.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from corral.config import NodeConfig
from corral.errors import InvalidTransition
from ctld.model import nodestate as ns
from ctld.model.nodes import HISTORY, POWER_ON, NodeEvent, NodeRecord

# flag -> (how it reads on the node, the events that may raise it)
FLAGS: dict[str, tuple[Any, frozenset[str]]] = {
    "drain": (lambda n: n.drain, frozenset({"drained"})),
    "down": (
        lambda n: n.down,
        frozenset({"heartbeat_lost", "downed", "resume_failed", "suspend_failed"}),
    ),
    "admin_down": (lambda n: n.admin_down, frozenset({"downed"})),
    "late": (lambda n: n.late, frozenset({"late"})),
    "fencing": (lambda n: n.fencing, frozenset({"fencing"})),
    "registered": (lambda n: n.registered, frozenset({"registered"})),
    "powered": (
        lambda n: n.power != POWER_ON,
        frozenset({"powering_down", "powered_down", "powering_up", "resume_failed", "cloud"}),
    ),
    "power_down_pending": (lambda n: n.power_down_pending, frozenset({"power_down_asked"})),
}
REASON_SETTERS = frozenset(
    {"heartbeat_lost", "downed", "drained", "undrained", "resume_failed", "suspend_failed"}
)


def snapshot(node: NodeRecord) -> dict[str, Any]:
    """Every field the machine owns (what a failed event must leave as it was)."""
    out = {name: copy.deepcopy(getattr(node, name)) for name in ns.FIELDS if name != "history"}
    out["history"] = list(node.history)
    out["resources"] = node.resources.SerializeToString()
    return out


class NodeStateProps(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.node = NodeRecord("n1", NodeConfig(("n1",)), ["p"])
        self.now = 100.0
        self.applied: list[NodeEvent] = []  # every change made, in order
        self.raised_by: dict[str, NodeEvent] = {}  # flag -> the change that raised it

    @rule(
        event=st.sampled_from(sorted(ns.EVENTS)),
        cause=st.sampled_from(("rpc:UpdateNode op", "monitor:heartbeat", "node:n1 report")),
        reason=st.sampled_from(("", "fan", ns.IDLE_ON_SUSPEND)),
        instance=st.sampled_from(("a", "b")),
        took_over=st.booleans(),
    )
    def apply(self, event: str, cause: str, reason: str, instance: str, took_over: bool) -> None:
        self.now += 1.0
        node = self.node
        before = snapshot(node)
        flags = {name: bool(read(node)) for name, (read, _) in FLAGS.items()}
        registration = {"instance": instance, "took_over": took_over}
        extra = registration if event == "registered" else {}
        if not ns.may(node, event):
            try:
                ns.transition(node, event, cause=cause, now=self.now, reason=reason, **extra)
            except InvalidTransition:
                assert snapshot(node) == before, f"{event}: refused, yet it changed the node"
                return
            raise AssertionError(f"{event} applied where it may not")
        change = ns.transition(node, event, cause=cause, now=self.now, reason=reason, **extra)
        assert change == node.last == NodeEvent(event, cause, self.now)
        self.applied.append(change)
        for name, (read, setters) in FLAGS.items():
            if read(node) and not flags[name]:
                assert event in setters, f"{event} raised {name}: only {sorted(setters)} may"
                self.raised_by[name] = change
            elif not read(node):
                self.raised_by.pop(name, None)

    @rule(busy=st.booleans())
    def jobs_placed_or_gone(self, busy: bool) -> None:
        """The scheduler's side: jobs on it or none (powering down needs none)."""
        self.node.job_ids = {1} if busy else set()

    @invariant()
    def no_flag_without_an_event_with_a_cause(self) -> None:
        node = self.node
        for name, (read, _) in FLAGS.items():
            if not read(node):
                continue
            change = self.raised_by.get(name)
            assert change is not None and change.cause, f"{name} is set, by no change"
            if self.applied[-HISTORY:].count(change):  # still within reach of the history
                assert change in node.history, f"{change} fell out of a history that reaches it"

    @invariant()
    def a_reason_is_a_changes_reason(self) -> None:
        node = self.node
        if node.reason:
            change = node.reason_change
            assert change is not None and change.cause and change.event in REASON_SETTERS
            assert change in self.applied

    @invariant()
    def the_history_is_the_recent_changes_in_order(self) -> None:
        history = list(self.node.history)
        assert history == self.applied[-HISTORY:]
        assert all(c.cause for c in history)
        assert not history or history[-1] == self.node.last

    @invariant()
    def what_the_diagram_draws(self) -> None:
        node = self.node
        assert not node.admin_down or node.down, "an operator's DOWN that is not DOWN"
        assert not node.late or (node.registered and not node.down), "late, yet not up"
        assert node.power == POWER_ON or not node.registered, "registered, yet not on"


NodeStateProps.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_node_state_properties = NodeStateProps.TestCase
