"""``scontrol reconfigure``: ctld and every node read their config file again and apply
what changed without a restart (docs/admin-guide.md#reconfigure).

Slurm prints nothing when all went well; corral prints what changed, by key, one line
per daemon (nodes with the same answer on one line, as a hostlist), and what needs a
restart. A refused file (ctld's) is ``slurm_reconfigure error: <why>`` and exit 1, and
nothing changed; a node that refused its own file, or did not answer, is named with
why, and the exit status is 1 too.
"""

from __future__ import annotations

import sys

from client.common import client
from client.fmt import Reported, call
from corral import hostlist

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.wire import json_types as t


def reconfigure(words: Sequence[str]) -> int:
    if words:
        raise Reported("too many arguments for keyword:reconfigure")
    reply = call(lambda: client().reconfigure({}), "slurm_reconfigure error")
    sys.stdout.write(reconfigure_lines(reply))
    return 1 if any(n.get("error") for n in reply.get("nodes", [])) else 0


def reconfigure_lines(reply: t.ReconfigureResponse) -> str:
    """The reply in words: ctld's line, the jobs it ended, then the nodes' (grouped)."""
    out = _daemon_lines("ctld", reply.get("ctld", {}))
    ended = reply.get("endedJobIds", [])
    if ended:
        out.append(
            f"ctld: ended pending job(s) {','.join(ended)}: none of their partitions is left "
            "(NODE_FAIL)"
        )
    groups: dict[tuple[tuple[str, ...], tuple[str, ...], str], list[str]] = {}
    for node in reply.get("nodes", []):
        key = (
            tuple(node.get("applied", [])),
            tuple(node.get("restart", [])),
            node.get("error", ""),
        )
        groups.setdefault(key, []).extend(hostlist.expand(node.get("daemon", "")))
    for (applied, restart, error), names in groups.items():
        answer: t.Reconfigured = {
            "applied": list(applied),
            "restart": list(restart),
            "error": error,
        }
        out += _daemon_lines(hostlist.compress(names), answer)
    return "".join(f"{line}\n" for line in out)


def _daemon_lines(name: str, answer: t.Reconfigured) -> list[str]:
    out = []
    if answer.get("error"):
        out.append(f"{name}: error: {answer.get('error')}")
    if answer.get("applied"):
        out.append(f"{name}: applied: {', '.join(answer.get('applied', []))}")
    if answer.get("restart"):
        out.append(f"{name}: needs a restart: {', '.join(answer.get('restart', []))}")
    return out
