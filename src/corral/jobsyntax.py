"""Syntax of --dependency and --array, shared by sbatch (early errors) and ctld (truth).

The scheduler issue enforces them; here they are parsed, checked and normalized.
Parsed by hand, not with ``re`` (which sbatch would pay for at every start-up); a
``\\d`` of the old patterns is ``str.isdecimal``, the same Unicode class.
"""

from __future__ import annotations

import itertools

from corral import signals
from corral.errors import InvalidOption

DEPENDENCY_TYPES = (
    "after",
    "afterany",
    "afterok",
    "afternotok",
    "aftercorr",
    "afterburstbuffer",
    "singleton",
)
MAX_ARRAY_TASKS = 1_000_001  # Slurm's default MaxArraySize is 1001; a hard sanity cap here


class Dependency:
    """One condition; ``job_ids`` are "123", "123_4" or "123+5" (after, with a delay)."""

    __slots__ = ("job_ids", "kind")

    def __init__(self, kind: str, job_ids: tuple[str, ...]) -> None:
        self.kind = kind
        self.job_ids = job_ids


def parse_dependency(text: str) -> tuple[tuple[Dependency, ...], bool]:
    """Parse ``afterok:1:2,afterany:3`` (all must hold) or ``a?b`` (any may hold).

    Returns the dependencies and whether they are joined with ``?`` (OR)."""
    s = text.strip()
    if not s:
        raise InvalidOption("Job dependency problem: empty --dependency")
    any_of = "?" in s
    if any_of and "," in s:
        raise InvalidOption("Job dependency problem: ',' and '?' cannot be mixed")
    deps: list[Dependency] = []
    for part in s.replace("?", ",").split(","):
        kind, _, rest = part.partition(":")
        kind = kind.strip().lower()
        if kind not in DEPENDENCY_TYPES:
            raise InvalidOption(f"Job dependency problem: unknown dependency type {kind!r}")
        if kind == "singleton":
            if rest:
                raise InvalidOption("Job dependency problem: singleton takes no job ids")
            deps.append(Dependency(kind, ()))
            continue
        ids = tuple(x for x in rest.split(":") if x)
        if not ids:
            raise InvalidOption(f"Job dependency problem: {kind} needs job ids")
        for job_id in ids:
            if not _is_job_ref(job_id):
                raise InvalidOption(f"Job dependency problem: {job_id!r} is not a job id")
        deps.append(Dependency(kind, ids))
    return tuple(deps), any_of


def _is_job_ref(text: str) -> bool:
    """``123``, ``123_4``, ``123+5``, ``123_4+5``."""
    head, plus, delay = text.partition("+")
    job, underscore, task = head.partition("_")
    return (
        job.isdecimal() and (not underscore or task.isdecimal()) and (not plus or delay.isdecimal())
    )


class ArraySpec:
    """The task ids of --array and its %N throttle (0: none)."""

    __slots__ = ("max_running", "task_ids")

    def __init__(self, task_ids: tuple[int, ...], max_running: int) -> None:
        self.task_ids = task_ids
        self.max_running = max_running

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArraySpec) and (self.task_ids, self.max_running) == (
            other.task_ids,
            other.max_running,
        )

    def __hash__(self) -> int:
        return hash((self.task_ids, self.max_running))


def parse_array(text: str) -> ArraySpec:
    """Parse ``0-15``, ``1,3,5``, ``0-15:4``, each with an optional ``%N`` throttle."""
    s = text.strip()
    body, _, throttle = s.partition("%")
    if throttle and not throttle.isdecimal():
        raise InvalidOption(f"Invalid job array specification: {text!r}")
    ids: set[int] = set()
    for item in body.split(","):
        first, dash, rest = item.strip().partition("-")  # N, N-M or N-M:S
        last, colon, stride = rest.partition(":")
        if not (
            first.isdecimal()
            and (not dash or last.isdecimal())
            and (not colon or stride.isdecimal())
        ):
            raise InvalidOption(f"Invalid job array specification: {text!r}")
        lo = int(first)
        hi = int(last) if dash else lo
        step = int(stride) if colon else 1
        if hi < lo or step < 1 or hi >= MAX_ARRAY_TASKS:
            raise InvalidOption(f"Invalid job array specification: {text!r}")
        ids.update(range(lo, hi + 1, step))
        if len(ids) > MAX_ARRAY_TASKS:
            raise InvalidOption(f"Invalid job array specification: {text!r} (too many tasks)")
    return ArraySpec(tuple(sorted(ids)), int(throttle) if throttle else 0)


def array_environment(array: str, array_job_id: int, task_id: int) -> dict[str, str]:
    """The SLURM_ARRAY_* variables of one task of ``--array=array``."""
    ids = parse_array(array).task_ids
    gaps = {b - a for a, b in itertools.pairwise(ids)}
    return {
        "SLURM_ARRAY_JOB_ID": str(array_job_id),
        "SLURM_ARRAY_TASK_ID": str(task_id),
        "SLURM_ARRAY_TASK_COUNT": str(len(ids)),
        "SLURM_ARRAY_TASK_MIN": str(ids[0]),
        "SLURM_ARRAY_TASK_MAX": str(ids[-1]),
        "SLURM_ARRAY_TASK_STEP": str(gaps.pop() if len(gaps) == 1 else 1),
    }


class WarnSignal:
    """--signal=[{R|B}:]SIG[@secs]: send ``signal`` ``seconds`` before the time limit.

    A plain class, not a dataclass: sbatch imports this module, and ``dataclasses``
    (with ``inspect``) would cost every submission ~6 ms of start-up.
    """

    __slots__ = ("batch_only", "seconds", "signal")

    def __init__(self, signal: int, seconds: int = 60, batch_only: bool = False) -> None:
        self.signal = signal
        self.seconds = seconds  # Slurm's default lead time
        self.batch_only = batch_only  # B: only the batch shell, not its children or steps

    def _key(self) -> tuple[int, int, bool]:
        return (self.signal, self.seconds, self.batch_only)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WarnSignal) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"WarnSignal{self._key()}"


def signal_number(text: str) -> int:
    """A signal by name (USR1, SIGUSR1) or number, as sbatch --signal and scancel -s take."""
    name = text.strip().upper()
    if name.isdecimal():
        number = int(name)
        if 0 < number < signals.NSIG:
            return number
        raise InvalidOption(f"Invalid signal number: {text}")
    found = signals.number("SIG" + name.removeprefix("SIG"))
    if found is None:
        raise InvalidOption(f"Invalid signal name: {text}")
    return found


def parse_warn_signal(text: str) -> WarnSignal:
    flags, colon, rest = text.partition(":")
    if not colon:
        flags, rest = "", text
    if any(f not in "RB" for f in flags.upper()) or (colon and not flags):
        raise InvalidOption(f"Invalid --signal specification: {text!r} (flags are R and B)")
    sig_text, at, secs_text = rest.partition("@")
    sig = signal_number(sig_text) if sig_text else 0
    if not sig:
        raise InvalidOption(f"Invalid --signal specification: {text!r} (no signal)")
    seconds = 60
    if at:
        if not secs_text.isdecimal() or int(secs_text) > 65535:
            raise InvalidOption(
                f"Invalid --signal specification: {text!r} (seconds must be 0 to 65535)"
            )
        seconds = int(secs_text)
    return WarnSignal(sig, seconds, "B" in flags.upper())
