"""Which controller is up, and which is primary: ``scontrol ping`` and ``corral status``.

Each controller of the list (controller.hosts, or $CORRAL_CTLD_SOCKET/_HTTP) is asked
for GetClusterInfo on its own: the one that answers (or refuses us for any reason but
being a standby) is the primary; one that answers NotPrimary is a backup in standby
mode; one that cannot be reached is DOWN.

Slurm labels the controllers by their place in the list (the first is "primary");
corral labels them by what they are now, so after a failover the controller in charge
is the one called primary. With one controller both read the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.errors import ControllerUnavailable, CorralError, NotPrimary
from corral.rest import controller_targets, credential_headers, post, where

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PING_TIMEOUT_S = 5.0


@dataclass
class Pinged:
    name: str
    target: str  # where it was asked (its socket or host:port)
    up: bool
    primary: bool
    detail: str  # the cluster info of a primary, the standby's refusal, or why DOWN
    info: dict[str, Any]


def controller_names(count: int) -> list[str]:
    """The controllers' names from the config (as the lease calls them), if it reads."""
    try:
        from corral.config import load_config

        names = [c.name for c in load_config().controller.controllers]
    except CorralError:
        return []
    return names if len(names) == count else []


def ping_all() -> list[Pinged]:
    targets = controller_targets()
    names = controller_names(len(targets)) or [where(t) for t in targets]
    out = []
    for name, target in zip(names, targets, strict=True):
        headers = [] if isinstance(target, str) else credential_headers("GetClusterInfo")
        try:
            info = post(target, "GetClusterInfo", {}, headers, PING_TIMEOUT_S)
        except NotPrimary as exc:
            out.append(Pinged(name, where(target), True, False, str(exc), {}))
        except ControllerUnavailable as exc:
            out.append(Pinged(name, where(target), False, False, str(exc), {}))
        except CorralError as exc:  # it answered, as only a primary does, but not to us
            out.append(Pinged(name, where(target), True, True, str(exc), {}))
        else:
            out.append(Pinged(name, where(target), True, True, "", info))
    return out


def labels(pinged: list[Pinged]) -> list[str]:
    """primary, and backup (backup1, backup2, ... when there are several), as Slurm's
    ping; by role when a primary answered, else by place in the list."""
    primary = next((i for i, p in enumerate(pinged) if p.primary), 0)
    backups = [i for i in range(len(pinged)) if i != primary]
    out = ["" for _ in pinged]
    out[primary] = "primary"
    for k, i in enumerate(backups, 1):
        out[i] = "backup" if len(backups) == 1 else f"backup{k}"
    return out


def ping_lines(pinged: list[Pinged]) -> str:
    """``Slurmctld(primary) at HOST is UP``, one line per controller, as Slurm's."""
    return "".join(
        f"Slurmctld({label}) at {p.name} is {'UP' if p.up else 'DOWN'}\n"
        for label, p in zip(labels(pinged), pinged, strict=True)
    )
