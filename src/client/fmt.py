"""Slurm's output formats, shared by the query commands (squeue, sinfo, sacct, scontrol).

squeue and sinfo take ``-o`` strings: ``%[.][width]X`` specifiers with literal text
between them. ``.`` right-justifies; a width pads, and cuts as Slurm's commands cut
(a left-justified field is always cut to its width, a right-justified one only where
that column cuts); no width prints the value as it is. sacct takes comma lists of
``Field[%width]`` names with Slurm's default widths, or ``|``-separated parsable
lines (their table: ``client.acctfields``). Everything here is a pure function of its
arguments, so every command's output can be tested from JSON alone.
"""

from __future__ import annotations

import pwd
import time

from client.common import JOB_STATE_BY_CODE, JOB_STATE_CODES, WIRE_JOB_STATE
from corral.errors import CorralError, InvalidOption
from corral.slurmfmt import format_duration

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any, TypeVar

    from client.views.node import Node
    from corral.wire import json_types as t

    Reply = TypeVar("Reply")

YEAR_S = 365 * 86400  # squeue prints longer durations as INVALID, as Slurm does

# ---------------------------------------------------------------- -o format strings


class Spec:
    """One ``%[.][width]X`` of a format string and the literal text after it."""

    __slots__ = ("letter", "right", "suffix", "width")

    def __init__(self, letter: str, width: int = 0, right: bool = False, suffix: str = "") -> None:
        self.letter = letter
        self.width = width
        self.right = right
        self.suffix = suffix

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Spec):
            return NotImplemented
        return (self.letter, self.width, self.right, self.suffix) == (
            other.letter,
            other.width,
            other.right,
            other.suffix,
        )

    def __hash__(self) -> int:
        return hash((self.letter, self.width, self.right, self.suffix))

    def __repr__(self) -> str:
        return f"Spec({self.letter!r}, {self.width}, {self.right}, {self.suffix!r})"


class Column:
    """How a command prints one letter: its header and the value of an item.

    ``cut``: a right-justified value longer than its width is cut to the width (Slurm
    leaves some columns whole: job ids, durations, node lists)."""

    __slots__ = ("cut", "header", "header_cut", "value")

    def __init__(
        self,
        header: str,
        value: Callable[[Any], str],
        *,
        cut: bool = True,
        header_cut: bool = True,
    ) -> None:
        self.header = header
        self.value = value
        self.cut = cut
        self.header_cut = header_cut


def parse_format(text: str) -> tuple[str, list[Spec]]:
    """A ``-o`` string as (text before the first %, specs).

    As in Slurm, ``%`` splits the string and empty pieces are skipped, so ``%%`` is no
    escape; an unknown letter is the caller's to refuse (see ``check_format``)."""
    prefix, *pieces = text.split("%")
    specs: list[Spec] = []
    for piece in pieces:
        if not piece:
            continue
        i = 0
        right = piece.startswith(".")
        if right:
            i = 1
        start = i
        while i < len(piece) and piece[i].isdigit():
            i += 1
        width = int(piece[start:i]) if i > start else 0
        if i >= len(piece):
            raise InvalidOption(f"Invalid format specification: %{piece}")
        specs.append(Spec(piece[i], width, right, piece[i + 1 :]))
    return prefix, specs


def all_letters(letters: Iterable[str], upper_suffix: str = "") -> str:
    """``%all``: every field, a-z then A-Z, separated by ``|`` (sinfo adds a space
    after the upper-case ones, as Slurm does)."""
    known = set(letters)
    lower = [f"%{c}" for c in "abcdefghijklmnopqrstuvwxyz" if c in known]
    upper = [f"%{c}{upper_suffix}" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c in known]
    return "|".join(lower + upper)


def check_format(specs: Iterable[Spec], columns: Mapping[str, Column], what: str) -> None:
    for spec in specs:
        if spec.letter not in columns:
            raise InvalidOption(f"Invalid {what} format specification: {spec.letter}")


def justify(value: str, width: int, right: bool, cut: bool = True) -> str:
    """Pad (and cut) ``value`` to ``width`` as Slurm's squeue/sinfo print a field."""
    if width <= 0:
        return value
    if right:
        padded = value.rjust(width)
        return padded[:width] if cut else padded
    return value[:width].ljust(width)  # a left-justified field is always cut


def render(prefix: str, specs: Sequence[Spec], columns: Mapping[str, Column], item: Any) -> str:
    """One output line (no newline): the header when ``item`` is None."""
    out = [prefix]
    for spec in specs:
        col = columns[spec.letter]
        if item is None:
            out.append(justify(col.header, spec.width, spec.right, col.header_cut))
        else:
            out.append(justify(col.value(item), spec.width, spec.right, col.cut))
        out.append(spec.suffix)
    return "".join(out)


def render_rows(
    prefix: str, specs: Sequence[Spec], columns: Mapping[str, Column], items: Sequence[Any]
) -> list[str]:
    """``render`` for many items of one format (squeue prints 100,000 rows): each column
    computed down the items, then every line made by one ``str.format`` template.
    ``{:>W.W}`` pads on the left and keeps the first W characters, as ``justify`` does;
    ``{:<W.W}`` cuts, then pads on the right."""
    parts = [_literal(prefix)]
    for spec in specs:
        col, width = columns[spec.letter], spec.width
        if width <= 0:
            parts.append("{}")
        elif spec.right:
            parts.append(f"{{:>{width}.{width}}}" if col.cut else f"{{:>{width}}}")
        else:
            parts.append(f"{{:<{width}.{width}}}")
        parts.append(_literal(spec.suffix))
    template = "".join(parts).format
    values = [list(map(columns[s.letter].value, items)) for s in specs]
    return list(map(template, *values)) if values else [template() for _ in items]


def _literal(text: str) -> str:
    """``text`` as it reads inside a ``str.format`` template."""
    return text.replace("{", "{{").replace("}", "}}")


def with_width(specs: Sequence[Spec], letter: str, width: int) -> list[Spec]:
    """The specs with every ``letter`` field set to ``width`` (sinfo sizes some to fit)."""
    return [Spec(s.letter, width, s.right, s.suffix) if s.letter == letter else s for s in specs]


# ---------------------------------------------------------------- values as Slurm prints them


def convert_mb(mb: int) -> str:
    """A MiB count with the largest unit that keeps it exact (half units allowed):
    ``0``, ``500M``, ``2G``, ``1.50G``, ``23081M`` - Slurm's memory figures."""
    if mb == 0:
        return "0"
    value = float(mb)
    units = "MGTP"
    unit = 0
    while value >= 1024 and int(value) % 512 == 0 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    if value == int(value):
        return f"{int(value)}{units[unit]}"
    return f"{value:.2f}{units[unit]}"


def squeue_secs(seconds: float) -> str:
    """squeue's TIME columns: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``; INVALID out of range."""
    if seconds < 0 or seconds > YEAR_S:
        return "INVALID"
    whole = int(seconds)
    text = _DURATIONS.get(whole)
    if text is None:
        text = format_duration(whole)
        if len(_DURATIONS) < 4096:
            _DURATIONS[whole] = text
    return text


# squeue_secs' texts by whole second: 100,000 pending rows all print ``0:00``, and many
# limits repeat (a dict: functools would be one more import for every command)
_DURATIONS: dict[int, str] = {}


def ctime(epoch: float) -> str:
    """The date line of ``-l`` views: ``Wed Dec 02 18:17:16 2026``."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(epoch))


def or_null(value: str) -> str:
    """Slurm prints an unset string as ``(null)``."""
    return value if value else "(null)"


def gpu_tres(count: int, gpu_type: str = "") -> str:
    """A GPU count as a TRES per node/job, as 22.05 prints it (squeue %b, scontrol
    TresPerNode): ``gres:gpu:2``, ``gres:gpu:h100:2``."""
    return f"gres:gpu:{gpu_type}:{count}" if gpu_type else f"gres:gpu:{count}"


def limit_minutes(seconds: int) -> int:
    """A time limit as Slurm shows it: whole minutes, rounded up (Slurm keeps minutes;
    corral enforces the seconds asked for, and shows the limit Slurm would)."""
    return -(-seconds // 60) * 60


def node_gres(node: Node) -> str:
    """A node's GRES as Slurm lists it: ``gpu:h100:8``, ``(null)`` without GPUs."""
    gpus = len(node.resources.gpus)
    if not gpus:
        return "(null)"
    kind = node.gpu_type
    gres = f"gpu:{kind}:{gpus}" if kind else f"gpu:{gpus}"
    if node.shards_per_gpu:
        gres += (
            f",shard:{node.shards_per_gpu * gpus}"  # Slurm's Name=shard Count= (the node's total)
        )
    return gres


# ---------------------------------------------------------------- options the commands share

#: Slurm job states corral never reaches; accepted in filters, they match nothing.
OTHER_JOB_STATES = {
    "BOOT_FAIL": "BF",
    "CONFIGURING": "CF",
    "DEADLINE": "DL",
    "REQUEUE_FED": "RF",
    "REQUEUE_HOLD": "RH",
    "RESIZING": "RS",
    "RESV_DEL_HOLD": "RD",
    "REVOKED": "RV",
    "SIGNALING": "SI",
    "SPECIAL_EXIT": "SE",
    "STAGE_OUT": "SO",
    "STOPPED": "ST",
}
_OTHER_BY_CODE = {v: k for k, v in OTHER_JOB_STATES.items()}
#: The states the wire contract has (JobState without the JOB_STATE_ prefix).
WIRE_JOB_STATES = frozenset(WIRE_JOB_STATE)


class Reported(Exception):
    """A failure worded as the Slurm command words it: printed as is, exit code 1."""

    @property
    def message(self) -> str:
        return str(self)


def call(
    rpc: Callable[[], Reply],
    what: str,
    keep: tuple[type[CorralError], ...] = (),
) -> Reply:
    """One controller call (``rpc``: a typed call of corral.api's client, e.g. ``lambda:
    api.get_jobs(request)``); a failure becomes ``what: message`` (``slurm_load_jobs
    error: ...``), which scripts grep for. Errors of the ``keep`` types pass unchanged."""
    try:
        return rpc()
    except keep:
        raise
    except CorralError as exc:
        raise Reported(f"{what}: {exc.message}") from None


def split_list(values: str | Iterable[str]) -> list[str]:
    """``a,b c`` (or several such strings) as ``[a, b, c]``."""
    items = [values] if isinstance(values, str) else list(values)
    return [x for v in items for x in v.replace(" ", ",").split(",") if x]


def parse_states(value: str) -> set[str] | None:
    """A ``-t``/``-s`` list of state names or codes as full names; None for ``all``."""
    out: set[str] = set()
    for item in split_list(value):
        upper = item.upper()
        if upper == "ALL":
            return None
        full = JOB_STATE_BY_CODE.get(upper) or _OTHER_BY_CODE.get(upper) or upper
        if full not in JOB_STATE_CODES and full not in OTHER_JOB_STATES:
            raise InvalidOption(f"Invalid job state specified: {item}")
        out.add(full)
    return out


def wire_states(states: Iterable[str]) -> list[t.JobState]:
    """The enum names to send for a state filter (states outside the contract dropped)."""
    return sorted(WIRE_JOB_STATE[s] for s in states if s in WIRE_JOB_STATE)


def parse_job_ids(value: str | Iterable[str]) -> list[str]:
    """``-j`` values: job ids (``5``, ``5.batch`` and ``5_1`` name job 5), as strings."""
    ids: list[str] = []
    for item in split_list(value):
        base = item.split("_")[0].split(".")[0].split("+")[0]
        if not base.isdigit() or int(base) == 0:
            raise InvalidOption(f"Invalid job id: {item}")
        ids.append(str(int(base)))
    return ids


def job_filter(value: str | Iterable[str]) -> t.JobFilter:
    """``-j``/scancel ids as a JobFilter: ``5`` (a job, or every task of array 5),
    ``5_3`` (task 3 of array 5), ``5.batch`` (job 5)."""
    ids: list[str] = []
    tasks: list[str] = []
    for item in split_list(value):
        base, _, task = item.split(".")[0].partition("_")
        if not base.isdigit() or int(base) == 0 or (task and not task.isdigit()):
            raise InvalidOption(f"Invalid job id: {item}")
        if task:
            tasks.append(f"{int(base)}_{int(task)}")
        else:
            ids.append(str(int(base)))
    flt: t.JobFilter = {}
    if ids:
        flt["jobIds"] = ids
    if tasks:
        flt["arrayTasks"] = tasks
    return flt


def parse_users(value: str) -> list[str]:
    """``-u`` values: user names, or uids turned into names where the system knows them."""
    return [user_name(int(x), x) if x.isdigit() else x for x in split_list(value)]


def user_name(uid: int, fallback: str = "") -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return fallback or str(uid)


def group_name(gid: int) -> str:
    import grp  # only the commands that print groups pay for it

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
