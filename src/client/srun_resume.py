"""srun reopens a node's task stream that broke before every exit from it came.

A noded that restarts (crashed, stopped, upgraded) takes its steps over from their
supervisors and waits for their sruns: srun connects again and sends RESUME with the
step credential's proof, and the output still in the tasks' pipes and the exits it
has not had follow. It tries every ``RETRY_S`` until ctld declares the node DOWN (as
Slurm's srun hears of a node failure from slurmctld), ctld's window (twice the
heartbeat timeout) runs out, or the node refuses (its noded could not take the step
over): then the node is lost, as before (Slurm's "Node failure").
"""

from __future__ import annotations

import time

from client.taskstream import NodeStream
from corral import stepstream as ss
from corral.errors import CorralError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from corral.api import Controller
    from corral.wire import json_types as t

RETRY_S = 0.5
ASK_CTLD_S = 1.0  # between questions to ctld: is the node DOWN?
CONNECT_TIMEOUT_S = 2.0
DEFAULT_WINDOW_S = 60.0  # a ctld that gives none


class Reopening:
    def __init__(self, raw: t.StepNode, ranks: list[int], deadline: float) -> None:
        self.raw, self.ranks, self.deadline = raw, ranks, deadline
        self.next_try = 0.0
        self.next_ask = 0.0
        self.why = "the connection to its noded was lost"


class Resumer:
    def __init__(
        self,
        credential: str,
        job_id: int,
        step_id: int,
        window_s: float | None,
        is_down: Callable[[str], bool],
    ) -> None:
        self.credential = credential
        self.is_down = is_down  # ctld's word on a node (False when ctld cannot say)
        self.job_id, self.step_id = job_id, step_id
        self.window_s = DEFAULT_WINDOW_S if window_s is None else window_s
        self.pending: dict[str, Reopening] = {}

    def broke(self, name: str, raw: t.StepNode, ranks: list[int]) -> bool:
        """Its stream broke: True if srun tries to reopen it (else it is lost now)."""
        if self.window_s <= 0 or not self.credential:
            return False
        self.pending[name] = Reopening(raw, ranks, time.monotonic() + self.window_s)
        return True

    def due_in(self) -> float | None:
        """Seconds until the next try (None: nothing to reopen)."""
        if not self.pending:
            return None
        now = time.monotonic()
        return max(0.0, min(r.next_try for r in self.pending.values()) - now)

    def attempt(self) -> tuple[list[NodeStream], list[tuple[str, list[int], str]]]:
        """Try each stream that is due: the reopened ones, and those given up on
        (name, ranks, why)."""
        now = time.monotonic()
        back: list[NodeStream] = []
        lost: list[tuple[str, list[int], str]] = []
        for name, reopening in list(self.pending.items()):
            if reopening.next_try > now:
                continue
            try:
                conn = self._reopen(name, reopening.raw)
            except _Refused as exc:  # its noded is back without the step
                del self.pending[name]
                lost.append((name, reopening.ranks, str(exc)))
                continue
            except (CorralError, OSError) as exc:
                reopening.why = f"the connection to its noded was lost ({exc})"
                now = time.monotonic()
                if now >= reopening.next_ask:  # ctld's verdict ends the wait at once
                    reopening.next_ask = now + ASK_CTLD_S
                    if self.is_down(name):
                        del self.pending[name]
                        lost.append((name, reopening.ranks, f"node {name} is DOWN"))
                        continue
                if time.monotonic() >= reopening.deadline:
                    del self.pending[name]
                    lost.append((name, reopening.ranks, reopening.why))
                else:
                    reopening.next_try = time.monotonic() + RETRY_S
                continue
            del self.pending[name]
            back.append(conn)
        return back, lost

    def _reopen(self, name: str, raw: t.StepNode) -> NodeStream:
        conn = NodeStream(raw, CONNECT_TIMEOUT_S)
        body: dict[str, Any] = {"jobId": self.job_id, "stepId": self.step_id, "node": name}
        try:
            conn.resume(self.credential, body)
            kind, payload = conn.await_started(CONNECT_TIMEOUT_S)
        except OSError:
            conn.close()
            raise
        if kind == ss.REFUSED:
            conn.close()
            raise _Refused(payload.decode(errors="replace"))
        if kind != ss.STARTED:
            conn.close()
            raise CorralError("no answer to RESUME")
        conn.started = True
        return conn


class _Refused(Exception):
    pass


def node_down(api: Controller, name: str) -> bool:
    """ctld says the node is DOWN (False when it cannot be asked)."""
    try:
        reply = api.get_nodes({"names": [name], "fields": ["state"]})
    except (CorralError, OSError):
        return False
    nodes = reply.get("nodes", [])
    return bool(nodes) and nodes[0].get("state") == "NODE_STATE_DOWN"
