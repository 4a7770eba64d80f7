"""Which versions of noded and of the commands this ctld works with (docs/upgrading.md).

The window: ctld ``M.m`` serves nodeds and commands of ``M.m`` and ``M.(m-1)``, so an
upgrade installs ctld first, then the nodes and the login nodes, one minor release at
a time. A version outside it is served with a warning in ctld's log: an older one may
lack what this ctld relies on, a newer one of the same major was installed before ctld
(the wire only gains fields within a major, but an older ctld refuses a request that
uses one it does not know). A newer major is refused: a major may change the wire
contract, and this ctld cannot tell what the message meant.

A noded says its version in ``RegisterNodeRequest.version``; a command from 1.1 on in
the ``x-corral-version`` header (HTTP) or metadata (gRPC), whichever way it calls
(corral/rest.py). A command that sends none is of 1.0 or older: it is served, unjudged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import structlog

from corral import __version__
from corral.errors import VersionMismatch
from corral.rest import VERSION_KEY

log = structlog.get_logger("ctld.control.versions")

Version = tuple[int, int, int]
_LEADING = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
MAX_WARNED = 64  # distinct command versions warned about once each (a bound on the log)

SAME, WINDOW, OLDER, NEWER, NEWER_MAJOR, UNKNOWN = (
    "same",
    "in the window",
    "older than the window",
    "newer than ctld",
    "a newer major version",
    "unknown",
)


def parse(text: str) -> Version | None:
    """``1.1.0`` (or ``1.2.0rc1``, ``1.1``): its major, minor and patch; None if no
    version can be read from it."""
    match = _LEADING.match(text[:64].strip())  # what a caller sends is any text
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def judge(peer: str, own: str = __version__) -> str:
    """Where version ``peer`` stands against this ctld's ``own``."""
    theirs, mine = parse(peer), parse(own)
    if theirs is None or mine is None:
        return UNKNOWN
    if theirs[:2] == mine[:2]:
        return SAME
    if theirs[0] > mine[0]:
        return NEWER_MAJOR
    if theirs[0] == mine[0] and theirs[1] > mine[1]:
        return NEWER
    if theirs[0] == mine[0] and theirs[1] == mine[1] - 1:
        return WINDOW
    return OLDER


def window(own: str = __version__) -> str:
    """The versions ctld ``own`` serves, in words ("1.0 and 1.1")."""
    mine = parse(own)
    if mine is None:
        return own
    major, minor, _ = mine
    return f"{major}.{minor - 1} and {major}.{minor}" if minor else f"{major}.{minor}"


def refusal(what: str, peer: str, own: str = __version__) -> str:
    return (
        f"{what} {peer} is of a newer major version than ctld {own}: this ctld serves "
        f"{window(own)} only. Upgrade ctld first (docs/upgrading.md)"
    )


def check_node(name: str, version: str, own: str = __version__) -> None:
    """A registering noded: refused if of a newer major, warned about if outside the
    window (its registration goes on)."""
    verdict = judge(version, own)
    if verdict == NEWER_MAJOR:
        log.error(
            "noded refused: newer major version", node=name, version=version, ctld_version=own
        )
        raise VersionMismatch(refusal(f"noded {name}", version, own))
    if verdict in (SAME, WINDOW):
        return
    log.warning(
        "noded version outside ctld's window",
        node=name,
        version=version or "(none)",
        verdict=verdict,
        ctld_version=own,
        window=window(own),
        hint=_hint(verdict),
    )


class CommandVersions:
    """The commands' versions, from each request's metadata: a newer major refused,
    a version outside the window warned about once."""

    def __init__(self, own: str = __version__) -> None:
        self.own = own
        # (major, minor) warned about, None for any version that cannot be read: a
        # caller may send anything, so the log holds at most MAX_WARNED such lines
        self.warned: set[tuple[int, int] | None] = set()

    def check(self, metadata: Mapping[str, str], method: str) -> None:
        version = metadata.get(VERSION_KEY, "")
        if not version:  # a command of 1.0 or older: it says nothing
            return
        version = version[:64]
        verdict = judge(version, self.own)
        if verdict == NEWER_MAJOR:
            raise VersionMismatch(refusal("this command", version, self.own))
        parsed = parse(version)
        key = parsed[:2] if parsed is not None else None
        if verdict in (SAME, WINDOW) or key in self.warned:
            return
        if len(self.warned) < MAX_WARNED:
            self.warned.add(key)
            log.warning(
                "a command's version is outside ctld's window",
                version=version,
                method=method,
                verdict=verdict,
                ctld_version=self.own,
                window=window(self.own),
                hint=_hint(verdict),
            )


def _hint(verdict: str) -> str:
    if verdict in (NEWER, NEWER_MAJOR):
        return "upgrade ctld first"
    if verdict == OLDER:
        return "upgrade it: this ctld may rely on what it lacks"
    return "it says no version it can read"
