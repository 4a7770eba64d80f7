"""Slurm's syntax of --signal, --dependency and --array: the one parser of each.

sbatch calls them for early errors, ctld once at submit (``ctld/model/validate.py``), whose
result is stored in the job's typed fields (``corral/jobspec.py``); nothing after
submit parses these strings again. Each returns a frozen value (``Frozen`` below, not
a dataclass: sbatch imports this module, and ``dataclasses`` with ``inspect`` costs a
submission ~6-30 ms of start-up). Parsed by hand, not with ``re`` (which sbatch would
pay for at every start-up); a ``\\d`` of the old patterns is ``str.isdecimal``, the
same Unicode class.
"""

from __future__ import annotations

import itertools

from corral import signals
from corral.errors import InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    class ArrayLike(Protocol):
        """A typed --array: ``ArraySpec``, or the ``ArrayTasks`` a job stores."""

        @property
        def count(self) -> int: ...
        @property
        def first(self) -> int: ...
        @property
        def last(self) -> int: ...
        @property
        def step(self) -> int: ...


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


class Frozen:
    """An immutable value: fields are the ``__slots__``, set once by ``__init__``;
    equal, hashed and shown by them (what ``@dataclass(frozen=True)`` would give)."""

    __slots__: tuple[str, ...] = ()

    def _set(self, **fields: object) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name}")

    def _key(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({fields})"


# ---------------------------------------------------------------- --dependency


class JobRef(Frozen):
    """One job a condition names: ``123`` (job or whole array), ``123_4`` (one task),
    ``+5``: ``after`` only once it started 5 minutes ago."""

    __slots__ = ("delay_min", "job_id", "task_id")
    job_id: int
    task_id: int | None
    delay_min: int

    def __init__(self, job_id: int, task_id: int | None = None, delay_min: int = 0) -> None:
        self._set(job_id=job_id, task_id=task_id, delay_min=delay_min)


class Dependency(Frozen):
    """One condition: its kind and the jobs it names (``job_ids`` as written:
    "123", "123_4" or "123+5"; ``refs`` the same parsed)."""

    __slots__ = ("job_ids", "kind", "refs")
    kind: str
    job_ids: tuple[str, ...]
    refs: tuple[JobRef, ...]

    def __init__(self, kind: str, job_ids: tuple[str, ...]) -> None:
        self._set(kind=kind, job_ids=job_ids, refs=tuple(_job_ref(t) for t in job_ids))


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


def _job_ref(text: str) -> JobRef:
    head, _, delay = text.partition("+")
    job, underscore, task = head.partition("_")
    return JobRef(int(job), int(task) if underscore else None, int(delay or 0))


# ---------------------------------------------------------------- --array


class ArraySpec(Frozen):
    """The task ids of --array and its %N throttle (``max_running``; ``throttled``:
    a ``%`` was given, even ``%0``)."""

    __slots__ = ("max_running", "task_ids", "throttled")
    task_ids: tuple[int, ...]
    max_running: int
    throttled: bool

    def __init__(
        self, task_ids: tuple[int, ...], max_running: int, throttled: bool | None = None
    ) -> None:
        if throttled is None:
            throttled = max_running > 0
        self._set(task_ids=task_ids, max_running=max_running, throttled=throttled)

    @property
    def count(self) -> int:
        return len(self.task_ids)

    @property
    def first(self) -> int:
        return self.task_ids[0]

    @property
    def last(self) -> int:
        return self.task_ids[-1]

    @property
    def step(self) -> int:
        """The one gap between consecutive ids, else 1 (SLURM_ARRAY_TASK_STEP)."""
        ids = self.task_ids
        if len(ids) < 2:
            return 1
        gap = ids[1] - ids[0]
        return gap if all(b - a == gap for a, b in itertools.pairwise(ids)) else 1


def parse_array(text: str) -> ArraySpec:
    """Parse ``0-15``, ``1,3,5``, ``0-15:4``, each with an optional ``%N`` throttle."""
    s = text.strip()
    body, percent, throttle = s.partition("%")
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
    return ArraySpec(tuple(sorted(ids)), int(throttle) if throttle else 0, bool(percent))


def array_environment(array: ArrayLike, array_job_id: int, task_id: int) -> dict[str, str]:
    """The SLURM_ARRAY_* variables of one task of a typed --array."""
    return {
        "SLURM_ARRAY_JOB_ID": str(array_job_id),
        "SLURM_ARRAY_TASK_ID": str(task_id),
        "SLURM_ARRAY_TASK_COUNT": str(array.count),
        "SLURM_ARRAY_TASK_MIN": str(array.first),
        "SLURM_ARRAY_TASK_MAX": str(array.last),
        "SLURM_ARRAY_TASK_STEP": str(array.step or 1),
    }


# ---------------------------------------------------------------- --signal


class WarnSignal(Frozen):
    """--signal=[{R|B}:]SIG[@secs]: send ``signal`` ``seconds`` before the time limit
    (``batch_only``, B: only the batch shell, not its children or steps)."""

    __slots__ = ("batch_only", "seconds", "signal")
    signal: int
    seconds: int
    batch_only: bool

    def __init__(self, signal: int, seconds: int = 60, batch_only: bool = False) -> None:
        self._set(signal=signal, seconds=seconds, batch_only=batch_only)  # 60: Slurm's lead


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
