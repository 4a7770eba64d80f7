"""Power saving in the replays (``corral sim --suspend-time``): each of the trace's
processors is a node that can be powered down, as ctld/powersave/power.py does with real ones.

A node idle for ``suspend_time`` is powered down (off after ``suspend_timeout``). The
core plans on the nodes that are off as ctld's snapshot shows them: busy until a
power-up would end (``resume_timeout`` from now), and a booting node busy until it is
up, through running views of their own (negative ids); so forecasts count the boot and
backfill treats booting nodes as busy. A job whose forecast is bound by that boot (it
starts when the nodes that are off could be up) wakes as many nodes as it needs.
Figures: node-seconds powered down, and the nodes woken.

Simplifications, kept small on purpose: every power-up takes the whole
``resume_timeout`` (a real boot is often shorter: this is the worst case for the
wait), the rates are not limited, and nodes are interchangeable (a job takes the
nodes that went idle last, so the longest-idle ones are the ones powered down).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ctld.sched import Placement, Plan, RunningView

SLACK_S = 1.0  # a forecast this close to a power-up's end waits for it


@dataclass(frozen=True)
class PowerSettings:
    suspend_time_s: float
    resume_timeout_s: float = 300.0
    suspend_timeout_s: float = 60.0


@dataclass
class PowerPool:
    procs: int
    settings: PowerSettings
    idle: deque[float] = field(default_factory=deque)  # idle nodes that are on: since when
    off: int = 0
    booting: list[tuple[float, int]] = field(default_factory=list)  # (up at, nodes)
    suspending: list[tuple[float, int]] = field(default_factory=list)  # (off at, nodes)
    off_seconds: float = 0.0  # node-seconds powered down
    resumes: int = 0  # nodes woken
    suspends: int = 0
    _last: float | None = None

    def start(self, now: float) -> None:
        """Every node on and idle from ``now`` (the trace's first submit)."""
        self.idle = deque([now] * self.procs)
        self._last = now

    def _account(self, now: float) -> None:
        if self._last is not None and now > self._last:
            self.off_seconds += self.off * (now - self._last)
        self._last = now

    def next_event(self) -> float:
        times = [t for t, _ in self.booting] + [t for t, _ in self.suspending]
        if self.idle:
            times.append(self.idle[0] + self.settings.suspend_time_s)
        return min(times, default=float("inf"))

    def advance(self, now: float) -> None:
        """Boots and power-downs that are over by ``now``; idle nodes due to power down."""
        self._account(now)
        up = sum(n for t, n in self.booting if t <= now)
        self.booting = [(t, n) for t, n in self.booting if t > now]
        self.idle.extend([now] * up)  # up and idle from now
        self.off += sum(n for t, n in self.suspending if t <= now)
        self.suspending = [(t, n) for t, n in self.suspending if t > now]
        due = 0
        while self.idle and self.idle[0] + self.settings.suspend_time_s <= now:
            self.idle.popleft()
            due += 1
        if due:
            self.suspending.append((now + self.settings.suspend_timeout_s, due))
            self.suspends += due

    @property
    def free_on(self) -> int:
        return len(self.idle)

    def take(self, nodes: int) -> None:
        """A start takes the nodes that went idle last."""
        for _ in range(nodes):
            self.idle.pop()

    def release(self, nodes: int, now: float) -> None:
        self.idle.extend([now] * nodes)

    def views(self, now: float) -> tuple[RunningView, ...]:
        """The nodes not on, as the core sees them: busy until they could be up."""
        rt = self.settings.resume_timeout_s
        busy = [(t, n) for t, n in self.booting]
        busy += [(t + rt, n) for t, n in self.suspending]
        if self.off:
            busy.append((now + rt, self.off))
        return tuple(
            RunningView(-1 - i, end, (Placement("m", n, 0, ()),), start_time=now)
            for i, (end, n) in enumerate(busy)
        )

    def after_plan(self, plan: Plan, procs_of: dict[int, int], now: float) -> None:
        """Wake the nodes that the jobs bound by a power-up need (as after_plan does)."""
        if not self.off:
            return
        ready = now + self.settings.resume_timeout_s
        need = sum(
            procs_of.get(f.job_id, 0)
            for f in plan.forecasts.values()
            if abs(f.start - ready) <= SLACK_S
        )
        wake = min(self.off, need)
        if wake:
            self._account(now)
            self.off -= wake
            self.booting.append((ready, wake))
            self.resumes += wake
