"""Run-time predictions from each user's history (EASY++'s rule, Tsafrir et al.).

A job's prediction is the mean run time of the same user's last two finished jobs that
asked for the same time limit, else of the user's last two jobs of any limit, never more
than the job's own limit; with no history, the limit itself. A running job that outlives
its prediction gets it raised in growing steps (1 min, 5 min, 15 min, 30 min, 1 h, 2 h,
5 h, 10 h, 20 h, 50 h, 100 h past the start), never past its limit.

Predictions only ever *order and fit* work and *forecast* starts: a job is still killed
at its own limit, and nothing checked against an advance reservation uses them. Pure:
ctld feeds it finished jobs as they end; the simulator does the same on virtual time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

HISTORY = 2  # EASY++: the mean of the user's last two run times
# where a prediction a running job outlived goes next: Tsafrir's incremental correction
STEPS_S = (60, 300, 900, 1800, 3600, 7200, 18000, 36000, 72000, 180000, 360000)


@dataclass
class RunTimePredictor:
    """Finished run times per user (and per user and limit); predictions from them."""

    history: int = HISTORY
    by_user: dict[str, deque[float]] = field(default_factory=dict)
    by_user_limit: dict[tuple[str, int], deque[float]] = field(default_factory=dict)

    def observe(self, user: str, elapsed: float, limit_s: int) -> None:
        """A job of ``user`` with limit ``limit_s`` (-1: none) ran for ``elapsed`` s."""
        if elapsed < 0:
            return
        runs = self.by_user.get(user)
        if runs is None:
            runs = self.by_user[user] = deque(maxlen=self.history)
        runs.append(float(elapsed))
        key = (user, limit_s)
        same = self.by_user_limit.get(key)
        if same is None:
            same = self.by_user_limit[key] = deque(maxlen=self.history)
        same.append(float(elapsed))

    def predict(self, user: str, limit_s: int) -> int:
        """Predicted run time in seconds (at least 1; at most the limit when it has one).

        0 means "no prediction": use the limit (no history and no limit).
        """
        runs = self.by_user_limit.get((user, limit_s)) or self.by_user.get(user)
        if not runs:
            return max(limit_s, 0)
        guess = max(1, round(sum(runs) / len(runs)))
        return min(guess, limit_s) if limit_s > 0 else guess


def expected_end(start: float, predicted_s: float, limit_end: float, now: float) -> float:
    """When a job that started at ``start`` is expected to end, seen at ``now``.

    Its prediction while it has not outlived it; once it has, the next step of the
    correction; never past ``limit_end`` (where it is killed).
    """
    if predicted_s <= 0:
        return limit_end
    end = start + predicted_s
    if end > now:
        return min(end, limit_end)
    elapsed = now - start
    for step in STEPS_S:
        if step > elapsed:
            return min(start + step, limit_end)
    # beyond the last step: double what it has run so far
    return min(start + 2 * elapsed, limit_end)
