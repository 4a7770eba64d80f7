"""The one commit step: every change to a job, a step or a node goes through a ``Change``.

A change is made in memory, each part with its cause: a job's event (``transition``,
the fields it sets with it; ``update`` for fields alone, as an "updated" event that
names them), a step's start and end, a node's event (``node``: ``ctld/model/nodestate.py``);
then it is committed as one unit, always in this order:

0. the queue index follows the jobs (one that left PENDING leaves it) and a pending
   job's reason is settled (``pending.settle``: a hold shows at once);
1. persist: every job it touched, the drains and DOWNs its node events made (with their
   cause) and any other row in one store commit (the group commit merges it with
   others': one transaction of a few ``executemany`` statements);
2. bump ``State.versions.version`` (a plan made before the change is stale), and
   ``arrivals`` too for a submit or a start at submit, ``releases`` for a change that
   only ends jobs (what starts at submit may be decided after);
3. wake the scheduler, unless the change cannot let anything start (``wake=False``:
   a held submit, a step starting or ending);
4. send the signals the change asked for (nothing reaches a node before it is durable).

Use it as ``async with Change(state, outbox) as ch:``; leaving the block commits. A
block left by an exception still commits what it changed (memory already shows it),
then the exception goes on. A node's liveness (late, heard, fencing, fenced), which
writes no row, changes through ``liveness`` at once. ``tests/unit/test_commit_path.py``
reads ctld's code and fails if a job's field, a step's or a node's state is set, a
jobstate or nodestate event applied, or the store written anywhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from corral.checkpoints import checkpoint_name
from corral.wire import corral_pb2 as pb
from ctld.core.pending import settle
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.model import nodestate as ns
from ctld.model.nodes import POWER_ON, NodeRecord
from ctld.storage.store import NodeDrain, NodePower, Op, insert_job, update_job

if TYPE_CHECKING:
    from ctld.core.outbox import Outbox

# node events that write no row: applied at once (``liveness``), no Change needed
LIVENESS = frozenset({"late", "heard", "fencing", "fenced"})


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
        # a submit, or a start at submit: counted apart (``arrivals``), since they leave
        # every job the last pass left waiting unable to start still
        self.arrival = arrival
        self._jobs: dict[int, pb.Job] = {}
        self._new: list[pb.Job] = []
        self._new_ids: set[int] = set()
        self._ops: list[Op] = []
        self._signals: list[tuple[NodeRecord, pb.SignalJobRequest]] = []
        self._quiet: dict[int, pb.Job] = {}  # jobs saved without a new version
        self.committed = False

    # ------------------------------------------------------------ jobs

    def submit(self, job: pb.Job, *, cause: str, now: float, **fields: Any) -> None:
        """A new job (with ``fields`` set): it enters the job map and the queue once its
        row is durable."""
        js.target(job, "submitted", cause=cause)
        assign(job, fields)
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
        **fields: Any,
    ) -> None:
        """Apply jobstate ``event`` to ``job``, setting ``fields`` with it (raises
        InvalidTransition, changing nothing, if it cannot apply); the job is persisted
        when the change commits."""
        when = self.state.clock() if now is None else now
        js.target(job, event, cause=cause, to=to)  # before any field: never half a change
        assign(job, fields)
        js.transition(job, event, cause=cause, now=when, to=to, detail=detail)
        if job.job_id not in self._new_ids:
            self._jobs[job.job_id] = job

    def update(
        self, job: pb.Job, *, cause: str, detail: str = "", now: float | None = None, **fields: Any
    ) -> None:
        """Set ``fields`` of ``job`` (its spec's too: ``spec=``) as one "updated" event with
        ``cause``; ``detail`` says what changed, or else the fields' names do."""
        self.transition(
            job, "updated", cause=cause, now=now, detail=detail or fields_text(fields), **fields
        )

    def end_run(self, job: pb.Job, state: int, **fields: Any) -> pb.Job:
        """Keep the run now ending (a requeue) as it stands, in ``state``, with ``fields``
        (what the requeue sets: why it ended, which sacct -D shows): the job's save writes
        it to job_runs. Returns that run."""
        run = pb.Job()
        run.CopyFrom(job)
        del run.events[:]
        assign(run, fields)
        run.state = state  # type: ignore[assignment]  # one of JobState's values
        run.end_time = run.end_time or self.state.clock()
        self.state.index.ended_runs.setdefault(job.job_id, []).append(run)
        return run

    # ------------------------------------------------------------ steps

    def start_step(self, job: pb.Job, step: pb.Step, *, cause: str, detail: str) -> None:
        """A step starts in ``job`` (the job's "updated" event says so)."""
        step.state = js.RUNNING
        job.steps.append(step)
        self.update(
            job, cause=cause, now=step.start_time, detail=detail, next_step_id=step.step_id + 1
        )

    def end_step(
        self,
        job: pb.Job,
        step: pb.Step,
        final: int,
        when: float,
        *,
        exit_code: int,
        exit_signal: int,
        reason: str = "",
    ) -> None:
        """Set a step's end (the job's own event, with its cause, goes with it);
        ``reason``: why it could not start, as a node said."""
        step.state = final  # type: ignore[assignment]  # one of JobState's values
        step.end_time = when
        step.exit_code = max(0, min(exit_code, 255))
        step.exit_signal = max(0, min(exit_signal, 64))
        if reason:
            step.reason = reason
        if job.job_id not in self._new_ids:
            self._jobs[job.job_id] = job

    def step_part(self, job: pb.Job, step: pb.Step, *, exit_code: int, exit_signal: int) -> None:
        """A running step's part ended on one of its nodes: the exit so far is kept in the
        step (its end, with the job's event and cause, comes once every node said so)."""
        step.exit_code, step.exit_signal = exit_code, exit_signal
        self._quiet[job.job_id] = job  # persisted, but nothing a pass reads changed

    # ------------------------------------------------------------ nodes

    def node(
        self,
        node: NodeRecord,
        event: str,
        *,
        cause: str,
        now: float | None = None,
        detail: str = "",
        reason: str = "",
        user: str = "root",
        uid: int = 0,
        **registration: Any,
    ) -> None:
        """Apply nodestate ``event`` to ``node``; a drain, an operator's DOWN, a power
        state and their ends are persisted with this change (node_drains, node_downs,
        node_power), with their cause."""
        when = self.state.clock() if now is None else now
        was_admin_down = node.admin_down
        power_was = (node.power, node.power_since, node.power_down_pending)
        ns.transition(
            node,
            event,
            cause=cause,
            now=when,
            detail=detail,
            reason=reason,
            user=user,
            uid=uid,
            **registration,
        )
        row = NodeDrain(node.name, node.reason, when, uid, cause)
        if event == "drained":
            self._ops.append(Op(drains_put=[row]))
        elif event == "undrained":
            self._ops.append(Op(drains_delete=[node.name]))
        elif event == "downed":  # a ctld restart must not bring it back up by itself
            self._ops.append(Op(downs_put=[row]))
        elif event == "resumed" and was_admin_down:
            self._ops.append(Op(downs_delete=[node.name]))
        if (node.power, node.power_since, node.power_down_pending) != power_was:
            # a cloud node's row stays while it is on: a restarted ctld must not take the
            # config's "off" for it
            if node.power == POWER_ON and not node.power_down_pending and not node.config.cloud:
                self._ops.append(Op(power_delete=[node.name]))
            else:
                power = NodePower(
                    node.name,
                    node.power,
                    node.power_since,
                    node.power_down_pending,
                    node.powered_down_s,
                    cause,
                )
                self._ops.append(Op(power_put=[power]))

    # ------------------------------------------------------------ other rows, signals

    def put(self, *ops: Op) -> None:
        """Rows other than jobs and nodes (reservations, accounting) that commit with this
        change."""
        self._ops.extend(ops)

    def signal(self, node: NodeRecord, request: pb.SignalJobRequest) -> None:
        """Send ``request`` to ``node`` once the change is durable."""
        self._signals.append((node, request))

    def signal_all(self, signals: Iterable[tuple[NodeRecord, pb.SignalJobRequest]]) -> None:
        self._signals.extend(signals)

    @property
    def empty(self) -> bool:
        return not (self._jobs or self._new or self._ops or self._quiet)

    # ------------------------------------------------------------ the commit

    async def commit(self) -> None:
        st = self.state
        index, versions = st.index, st.versions
        self.committed = True
        now = st.clock()
        for job in (*self._new, *self._jobs.values()):
            if job.state == js.PENDING:
                settle(job, now)
            else:  # it left the queue
                index.dequeue(job.job_id)
        for job in self._jobs.values():  # memory has changed already: count it now
            _count_active(st, job)
            index.placed(job)
        # what each job went through in this change, for the observers (metrics, mail)
        told = [
            (job, job.events[st.index.saved_events.get(job.job_id, 0) :])
            for job in self._jobs.values()
        ]
        told = [(job, list(job.events)) for job in self._new] + told
        ops = [_save(st, job, new=True) for job in self._new]
        ops += [_save(st, job) for job in self._jobs.values()]
        ops += self._ops
        quiet = [_save(st, j) for i, j in self._quiet.items() if i not in self._jobs]
        if quiet and not ops:
            await st.store.commit(*quiet)
        if ops:
            await st.store.commit(*ops, *quiet)
            st.observe(told)
            for job in self._new:
                st.add(job)
                st.enqueue(job)
                if job.state in js.ACTIVE:
                    st.count_active(job, +1)
            versions.version += 1
            release = not self.arrival and self._releases_only()
            if self.arrival:
                versions.arrivals += 1
            elif release:
                versions.releases += 1
            # an end is first checked by a short pass (Scheduler.check_release): a full
            # one only if a waiting job may start on what it freed
            check = versions.check_release
            if self.wake and not (release and check is not None and check()):
                versions.wake_event.set()
        if st.config.controller.checkpoint_cleanup:
            self._signals += _checkpoint_removals(st, told)
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


def liveness(state: State, node: NodeRecord, event: str, *, cause: str) -> None:
    """A node's liveness event (``LIVENESS``: late, heard, fencing, fenced): it writes no
    row, so it applies at once, outside a Change (a heartbeat answers without awaiting)."""
    if event not in LIVENESS:
        raise ValueError(f"{event!r} is not a liveness event: use a Change")
    ns.transition(node, event, cause=cause, now=state.clock())


def assign(msg: Message, fields: Mapping[str, Any]) -> None:
    """Set ``fields`` of a proto message: a scalar as given, a repeated field's whole
    contents, a message field copied (None clears it)."""
    if not fields:
        return
    by_name = msg.DESCRIPTOR.fields_by_name
    for name, value in fields.items():
        field = by_name[name]
        if field.is_repeated:
            # copied first: ``value`` may hold the very items about to be removed
            items = [_copy(v) for v in value]
            held = getattr(msg, name)
            del held[:]
            held.extend(items)
        elif field.message_type is not None:
            if value is None:
                msg.ClearField(name)
            else:
                getattr(msg, name).CopyFrom(value)
        else:
            setattr(msg, name, value)


def _copy(value: object) -> object:
    if isinstance(value, Message):
        out = type(value)()
        out.CopyFrom(value)
        return out
    return value


def fields_text(fields: Mapping[str, object]) -> str:
    """What an "updated" event names when its caller gives no detail."""
    return " ".join(sorted(fields)) + " changed" if fields else ""


def _save(st: State, job: pb.Job, *, new: bool = False) -> Op:
    """The rows of ``job``'s change: its row, the events since it was last saved, the
    runs that ended since (a requeue's)."""
    index = st.index
    index.touch(job)
    start = index.saved_events.get(job.job_id, 0)
    if new:
        op = insert_job(job, index.held_spec.get(job.job_id))
    else:
        runs = index.ended_runs.pop(job.job_id, [])
        op = update_job(job, job.events[start:], runs, index.held_spec.get(job.job_id))
    index.saved_events[job.job_id] = len(job.events)
    return op


def _checkpoint_removals(
    st: State, told: list[tuple[pb.Job, list[pb.JobEvent]]]
) -> list[tuple[NodeRecord, pb.SignalJobRequest]]:
    """A batch job that ended for good in this change: its batch host removes its
    checkpoint directory (a requeue is not an end: the next run resumes from it)."""
    out = []
    for job, events in told:
        if (
            job.state not in js.FINISHED
            or job.spec.allocation_only
            or not any(e.to_state in js.FINISHED for e in events)
            or (node := st.nodes.get(job.batch_host or next(iter(job.previous_nodes), ""))) is None
        ):
            continue
        req = pb.SignalJobRequest(
            job_id=job.job_id,
            remove_checkpoint=True,
            array_job_id=job.array_job_id,
            uid=job.uid,
            checkpoint_name=checkpoint_name(job),
        )
        if job.HasField("array_task_id"):
            req.array_task_id = job.array_task_id
        out.append((node, req))
    return out


def _count_active(st: State, job: pb.Job) -> None:
    """Keep ``State.index.active_counts`` right for a job this change moved in or out of
    the active states (its first event since it was last saved says where it came from)."""
    start = st.index.saved_events.get(job.job_id, 0)
    if start >= len(job.events):
        return
    was = job.events[start].from_state in js.ACTIVE
    now = job.state in js.ACTIVE
    if was != now:
        st.count_active(job, 1 if now else -1)
