"""A node's state with the advance reservation it is in, as Slurm 22.05 words it: one
rule for sinfo, scontrol show node, ``corral why NODE`` and ctld's web page.

Checked against the real Slurm on this machine (../shared/anchors/slurm):

- sinfo: an idle node in an active reservation is ``maint`` with the MAINT flag, else
  ``resv`` (long form ``reserved``); a hot spare of corral's is ``spare``; a node in a
  MAINT reservation that is not idle (busy, drained, down) keeps its state with a ``$``
  (``mix$``, ``drng$``, ``drain$``), which takes the place of the not-responding ``*``
  and of the power suffixes;
- scontrol's State=: the state, then ``+DRAIN``, then ``+MAINTENANCE+RESERVED`` (MAINT)
  or ``+RESERVED`` (``IDLE+MAINTENANCE+RESERVED``, ``MIXED+DRAIN+MAINTENANCE+RESERVED``).

Pure and light: the commands import it at start-up.
"""

from __future__ import annotations

MAINT_SUFFIX = "$"


def reserved_state(
    state: str, reservation: str, maint: bool, spare: bool
) -> tuple[str, str] | None:
    """sinfo's (short, long) state for an idle node held back from the queue: in an
    active reservation (``maint``, ``resv``) or a hot spare; None for any other."""
    if state != "IDLE" or not (reservation or spare):
        return None
    if reservation:
        return ("maint", "maint") if maint else ("resv", "reserved")
    return "spare", "spare"


def maint_marked(state: str, reservation: str, maint: bool) -> bool:
    """Whether sinfo marks the state with ``$``: in a MAINT reservation, and not idle
    (an idle one is ``maint`` itself)."""
    return bool(reservation) and maint and state != "IDLE"


def state_flags(reservation: str, maint: bool) -> str:
    """scontrol's flags for the reservation a node is in (after +DRAIN)."""
    if not reservation:
        return ""
    return "+MAINTENANCE+RESERVED" if maint else "+RESERVED"


def summary_state(state: str, reservation: str, maint: bool, spare: bool = False) -> str:
    """The state a node is counted under where one word is shown for it (the web page's
    counts and filter): sinfo's word for an idle reserved node or a spare, upper case
    (MAINT, RESERVED, SPARE); else the state itself."""
    held = reserved_state(state, reservation, maint, spare)
    return held[1].upper() if held else state
