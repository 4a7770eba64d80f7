"""The one commit step: every change to a job's state goes through a ``Change``.

A change is made in memory (``transition`` applies a jobstate event with its cause;
steps start and end here too) and then committed as one unit, always in this order:

0. the queue index follows the jobs (one that left PENDING leaves it) and a pending
   job's reason is settled (``pending.settle``: a hold shows at once);
1. persist: every job it touched (and any other row, e.g. a drain) in one store commit;
2. bump ``State.version`` (a plan made before the change is stale), and
   ``State.arrivals`` too for a submit or a start at submit, ``State.releases`` for a
   change that only ends jobs (what starts at submit may be decided after);
3. wake the scheduler, unless the change cannot let anything start (``wake=False``:
   a held submit, a step starting or ending);
4. send the signals the change asked for (nothing reaches a node before it is durable).

Use it as ``async with Change(state, outbox) as ch:``; leaving the block commits. A
block left by an exception still commits what it changed (memory already shows it),
then the exception goes on. ``tests/unit/test_commit_path.py`` reads ctld's code and
fails if a job's or step's state is set, a jobstate event applied, or the store
written anywhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from corral.wire import corral_pb2 as pb
from ctld import jobstate as js
from ctld.nodes import NodeRecord
from ctld.pending import settle
from ctld.state import State
from ctld.store import Op

if TYPE_CHECKING:
    from ctld.outbox import Outbox


class Change:
    def __init__(
        self,
        state: State,
        outbox: Outbox | None = None,
        *,
        wake: bool = True,
        arrival: bool = False,
    ) -> None:
        self.state = state
        self.outbox = outbox
        self.wake = wake
        # a submit, or a start at submit: counted apart (``State.arrivals``), since they
        # leave every job the last pass left waiting unable to start still
        self.arrival = arrival
        self._jobs: dict[int, pb.Job] = {}
        self._new: list[pb.Job] = []
        self._new_ids: set[int] = set()
        self._ops: list[Op] = []
        self._signals: list[tuple[NodeRecord, pb.SignalJobRequest]] = []
        self.committed = False

    # ------------------------------------------------------------ what changes

    def submit(self, job: pb.Job, *, cause: str, now: float) -> None:
        """A new job: it enters the job map and the queue once its row is durable."""
        js.transition(job, "submitted", cause=cause, now=now)
        self._new.append(job)
        self._new_ids.add(job.job_id)

    def transition(
        self,
        job: pb.Job,
        event: str,
        *,
        cause: str,
        now: float | None = None,
        to: int | None = None,
        detail: str = "",
    ) -> None:
        """Apply jobstate ``event`` to ``job`` (raises InvalidTransition, changing nothing,
        if it cannot apply); the job is persisted when the change commits."""
        when = self.state.clock() if now is None else now
        js.transition(job, event, cause=cause, now=when, to=to, detail=detail)
        if job.job_id not in self._new_ids:
            self._jobs[job.job_id] = job

    def end_run(self, job: pb.Job, state: int) -> pb.Job:
        """Keep the run now ending (a requeue) as it stands, in ``state``: the job's save
        writes it to job_runs, where sacct -D reads it. Returns that run."""
        run = pb.Job()
        run.CopyFrom(job)
        del run.events[:]
        run.state = state  # type: ignore[assignment]  # one of JobState's values
        run.end_time = run.end_time or self.state.clock()
        self.state.ended_runs.setdefault(job.job_id, []).append(run)
        return run

    def start_step(self, job: pb.Job, step: pb.Step) -> None:
        step.state = js.RUNNING
        job.steps.append(step)

    def end_step(self, step: pb.Step, final: int, when: float) -> None:
        """Set a step's final state (the job's own event, with its cause, goes with it)."""
        step.state = final  # type: ignore[assignment]  # one of JobState's values
        step.end_time = when

    def put(self, *ops: Op) -> None:
        """Rows other than jobs (node drains, reservations) that commit with this change."""
        self._ops.extend(ops)

    def signal(self, node: NodeRecord, request: pb.SignalJobRequest) -> None:
        """Send ``request`` to ``node`` once the change is durable."""
        self._signals.append((node, request))

    def signal_all(self, signals: Iterable[tuple[NodeRecord, pb.SignalJobRequest]]) -> None:
        self._signals.extend(signals)

    @property
    def empty(self) -> bool:
        return not (self._jobs or self._new or self._ops)

    # ------------------------------------------------------------ the commit

    async def commit(self) -> None:
        st = self.state
        self.committed = True
        now = st.clock()
        for job in (*self._new, *self._jobs.values()):
            if job.state == js.PENDING:
                settle(job, now)
            else:  # it left the queue
                st.pending.pop(job.job_id, None)
                st.requests.pop(job.job_id, None)
        for job in self._jobs.values():  # memory has changed already: count it now
            _count_active(st, job)
        # what each job went through in this change, for the observers (metrics, mail)
        told = [
            (job, job.events[st.saved_events.get(job.job_id, 0) :]) for job in self._jobs.values()
        ]
        told = [(job, list(job.events)) for job in self._new] + told
        ops = [st.save(job, new=True) for job in self._new]
        ops += [st.save(job) for job in self._jobs.values()]
        ops += self._ops
        if ops:
            await st.store.commit(*ops)
            st.observe(told)
            for job in self._new:
                st.add(job)
                st.enqueue(job)
                if job.state in js.ACTIVE:
                    st.count_active(job, +1)
            st.version += 1
            release = not self.arrival and self._releases_only()
            if self.arrival:
                st.arrivals += 1
            elif release:
                st.releases += 1
            # an end is first checked by a short pass (Scheduler.check_release): a full
            # one only if a waiting job may start on what it freed
            if self.wake and not (release and st.check_release is not None and st.check_release()):
                st.wake_event.set()
        signals, self._signals = self._signals, []
        if signals:
            assert self.outbox is not None, "a change that signals nodes needs the outbox"
            self.outbox.send(signals)

    def _releases_only(self) -> bool:
        """Whether this change leaves every job it touched out of the queue (a running
        job's end, a pending one's cancel, a step): it can free resources, but puts no
        job in the queue and changes no node or limit."""
        return (
            not self._new
            and not self._ops
            and bool(self._jobs)
            and all(j.state != js.PENDING for j in self._jobs.values())
        )

    async def __aenter__(self) -> Change:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.committed:
            await self.commit()


def _count_active(st: State, job: pb.Job) -> None:
    """Keep ``State.active_counts`` right for a job this change moved in or out of the
    active states (its first event since it was last saved says where it came from)."""
    start = st.saved_events.get(job.job_id, 0)
    if start >= len(job.events):
        return
    was = job.events[start].from_state in js.ACTIVE
    now = job.state in js.ACTIVE
    if was != now:
        st.count_active(job, 1 if now else -1)
