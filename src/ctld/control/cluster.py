"""The controller, wired from its parts; the one object the API's handlers and reads,
the web page, the metrics and the server see.

Each part does one job (docs/architecture.md draws the map). The handlers, which never
call one another:

    intake        submit, cancel/signal, hold/release, update, top (client writes)
    step_ops      srun/salloc steps and allocations
    node_reports  registration and heartbeats; job_reports: what nodes say of jobs
    monitor       silence judged each interval (NOT_RESPONDING, DOWN, the hold)
    power         power saving's loop and scontrol power
    scheduling    the loop, applying a plan, launching (snapshot: its input)
    queries       reads: selections, nodes, partitions, reservations, shares, why,
                  sbatch --test-only's estimate
    reservation_ops  scontrol's reservations; accounting_ops: sacctmgr; mail

and the operations they call (ctld/ops), over the state and its one commit step:

    endings       how a job ends or is requeued, and a node's failure for its jobs
    node_ops      drain, DOWN, resume: the operations on a node (UpdateNode, faults)
    suspects      a node srun lost mid-step: the job's end waits for its verdict
    state         the job and node maps and their parts (indexes, versions, accounting)
    commit        the one commit step: every change to a job, a step or a node
    outbox        signals to nodes, sent after the change that asked for them commits

``Cluster`` wires the parts, injecting the callables one hands another, and routes each
call: mostly to one handler; a few choose (a cancel naming steps goes to step_ops, an
UpdateNode to POWER_* to power saving) or check first (a registration's version, a
dynamic node's admission). It commits nothing itself.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable, Collection, Coroutine, Iterable
from typing import Any

import structlog

from corral.clock import Clock
from corral.config import ClusterConfig
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.accounts.sacctmgr_ops import SacctmgrOps
from ctld.control import versions
from ctld.control.reconfig import Reconfigurer
from ctld.core.outbox import Dispatcher, Outbox
from ctld.core.selection import page, select
from ctld.core.state import State, user_name
from ctld.fleet.dynamic import admit
from ctld.fleet.job_reports import JobReports
from ctld.fleet.monitor import HeartbeatMonitor
from ctld.fleet.node_reports import NodeReports
from ctld.jobs.intake import Intake
from ctld.jobs.step_ops import StepOps
from ctld.mailing.mail import Mailer
from ctld.mailing.mail_events import MailEvents
from ctld.model.authz import Policy
from ctld.model.nodes import NodeRecord
from ctld.model.priorities import Priorities
from ctld.model.reservations import Reservations
from ctld.model.usage import UsageLedger
from ctld.ops.disruptions import Disruptions
from ctld.ops.endings import Endings
from ctld.ops.node_ops import NodeOps
from ctld.ops.step_ends import StepEnds
from ctld.ops.suspects import Suspects
from ctld.ops.time_limits import enforce_allocation_limits
from ctld.planning.preemption import Preempter
from ctld.planning.queries import Queries
from ctld.planning.reservation_ops import ReservationOps
from ctld.planning.scheduling import MIN_PASS_GAP_S, Scheduler
from ctld.planning.snapshot import SnapshotBuilder, settings_from
from ctld.powersave.power import PowerManager
from ctld.sched import Plan, Snapshot
from ctld.storage.store import Store
from ctld.telemetry.metrics_ledger import MetricsLedger

__all__ = ["MIN_PASS_GAP_S", "Clock", "Cluster", "Dispatcher"]

log = structlog.get_logger("ctld")


class Cluster:
    def __init__(
        self,
        config: ClusterConfig,
        store: Store,
        dispatcher: Dispatcher,
        *,
        clock: Clock,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.clock = clock
        ctl = config.controller
        # an end is first checked by the scheduler's short pass (made below: a closure)
        quick = config.scheduler.start_on_submit
        self.state = st = State(
            config,
            store,
            clock=self.clock,
            check_release=(lambda: self.scheduler.check_release()) if quick else None,
        )
        # AdminLevel from the accounting database counts besides the config's lists
        self.policy = Policy(
            ctl.operators,
            ctl.administrators,
            ctl.private_data,
            admin_level=lambda user: st.acct.accounting.admin_level(user),
        )
        self.outbox = Outbox(st, dispatcher)
        self.endings = Endings(st, self.outbox)
        step_ends = StepEnds(st)  # the steps' handlers and the nodes' reports end steps
        self.steps = StepOps(st, self.policy, self.endings, step_ends, self.outbox)
        self.suspects = Suspects(st, self.policy, self.endings, self.outbox, step_ends)
        # the operations on a node (drain, DOWN, resume), which the monitor, the job
        # reports, power saving and UpdateNode call; the reports and the monitor each
        # do one job and call no other handler
        disruptions = Disruptions(st, self.outbox)  # drains and maintenance warn first
        self.node_ops = NodeOps(st, self.policy, self.endings, self.outbox, disruptions)
        self.job_reports = JobReports(
            st, self.endings, self.outbox, step_ends, self.suspects, self.node_ops.drain
        )
        self.node_reports = NodeReports(
            st,
            self.endings,
            self.outbox,
            self.suspects,
            self.job_reports.apply_updates,
            self.node_ops,
        )
        self.monitor = HeartbeatMonitor(
            st,
            self.outbox,
            self.endings,
            self.suspects,
            disruptions,
            self.node_reports.verdicts,
            self.node_reports.watch,
            self.node_ops.node_down,
        )
        self.power = PowerManager(st, self.policy, self.node_ops)
        self.settings = settings_from(st)
        self.preempter = Preempter(st, self.outbox)
        self.snapshots = SnapshotBuilder(st, self.settings)
        self.scheduler = Scheduler(
            st,
            self.endings,
            dispatcher,
            lambda: self.snapshot(),
            self.preempter,
            quick=self.snapshots if config.scheduler.start_on_submit else None,
            empty_queue=self.snapshots.empty_queue,
            after_plan=self.power.after_plan,
        )
        self.intake = Intake(
            st,
            self.policy,
            self.endings,
            self.outbox,
            quick_ready=self.scheduler.quick_ready,
            start_on_submit=self.scheduler.start_on_submit,
        )
        self.queries = Queries(st, lambda: self.snapshot())
        self.reservation_ops = ReservationOps(st, self.policy, self.queries.free_nodes)
        self.accounting_ops = SacctmgrOps(st, self.policy)
        # observers of every durable change: the metrics' counters, and mail
        self.metrics = MetricsLedger(st.start_time)
        st.observers.append(self.metrics)
        self.mailer = Mailer(config.mail, self.clock)
        self.mail = MailEvents(st, self.mailer)
        if config.mail.enabled:
            st.observers.append(self.mail)
        # scontrol reconfigure and SIGHUP (ctld/control/reconfig.py); set when a config applies
        self.reconfigurer = Reconfigurer(self, config)
        self._applied = asyncio.Event()

    # ------------------------------------------------------------ state, as attributes

    @property
    def config(self) -> ClusterConfig:
        """The config as ctld uses it now (its QOS table is the accounting database's)."""
        return self.state.config

    @property
    def jobs(self) -> dict[int, pb.Job]:
        return self.state.jobs

    @property
    def nodes(self) -> dict[str, NodeRecord]:
        return self.state.nodes

    @property
    def version(self) -> int:
        return self.state.versions.version

    @version.setter
    def version(self, value: int) -> None:
        self.state.versions.version = value

    @property
    def next_job_id(self) -> int:
        return self.state.next_job_id

    @next_job_id.setter
    def next_job_id(self, value: int) -> None:
        self.state.next_job_id = value

    @property
    def revisions(self) -> dict[int, int]:
        return self.state.index.revisions

    @property
    def start_time(self) -> float:
        return self.state.start_time

    @property
    def ledger(self) -> UsageLedger:
        return self.state.acct.ledger

    @property
    def priorities(self) -> Priorities:
        return self.state.acct.priorities

    @property
    def reservations(self) -> Reservations:
        return self.state.reservations

    @property
    def history(self) -> collections.deque[tuple[float, float]]:
        return self.state.runs.recent

    @property
    def _tasks(self) -> set[asyncio.Task[None]]:
        return self.state.tasks

    @property
    def passes(self) -> int:
        return self.scheduler.passes

    @property
    def last_pass_s(self) -> float:
        return self.scheduler.last_pass_s

    @property
    def last_considered(self) -> int:
        return self.scheduler.last_considered

    @property
    def starts_total(self) -> int:
        return self.scheduler.starts_total

    # ------------------------------------------------------------ lifecycle

    def load(self) -> None:
        self.state.load()

    def wake(self) -> None:
        self.state.wake()

    def touch(self, job: pb.Job) -> None:
        self.state.touch(job)

    def whole(self, job: pb.Job) -> pb.Job:
        """``job`` with its script and environment (a finished job is kept without)."""
        return self.state.whole(job)

    def purge_finished(self) -> None:
        self.state.forget_finished()
        self.reservation_ops.expire()

    async def run_scheduler(self) -> None:
        await self.scheduler.run()

    async def run_mail(self) -> None:
        """The time-limit warnings and INVALID_DEPEND mails (while [mail] is on)."""
        await self._while(lambda: self.config.mail.enabled, self.mail.run)

    async def run_heartbeat_monitor(self) -> None:
        await self.monitor.run_monitor()

    async def run_power(self) -> None:
        """Power saving's loop (while [power] is set): suspends, resumes, timeouts."""
        await self._while(lambda: bool(self.config.power.resume_program), self.power.run)

    async def _while(
        self, enabled: Callable[[], bool], run: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        """``run`` while ``enabled()`` holds: started and stopped as reconfigures turn it
        on and off."""
        task: asyncio.Task[None] | None = None
        try:
            while True:
                if enabled() and task is None:
                    task = asyncio.create_task(run())
                elif not enabled() and task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    task = None
                await self._applied.wait()
        finally:
            if task is not None:
                task.cancel()

    def config_applied(self) -> None:
        """A reconfigure applied a config: the loops above look again."""
        done, self._applied = self._applied, asyncio.Event()
        done.set()

    async def reconfigure(self, who: Identity, *, source: str) -> pb.ReconfigureResponse:
        """scontrol reconfigure (``source`` "scontrol") and SIGHUP (ctld/control/reconfig.py)."""
        return await self.reconfigurer.reconfigure(who, source=source)

    async def run_purge(self, interval_s: float) -> None:
        """Forget old finished jobs and expired reservations every ``interval_s``."""
        while True:
            await self.clock.sleep(interval_s)
            self.purge_finished()

    # ------------------------------------------------------------ reservations

    async def create_reservation(self, who: Identity, spec: pb.Reservation) -> pb.Reservation:
        return await self.reservation_ops.create(who, spec)

    async def update_reservation(self, who: Identity, req: pb.UpdateReservationRequest) -> None:
        await self.reservation_ops.update(who, req)

    async def delete_reservation(self, who: Identity, name: str) -> None:
        await self.reservation_ops.delete(who, name)

    def reservation_list(self, names: Iterable[str]) -> list[pb.Reservation]:
        return self.queries.reservation_list(names)

    # ------------------------------------------------------------ accounting (sacctmgr)

    async def sacctmgr(self, who: Identity, req: pb.SacctmgrRequest) -> pb.SacctmgrResponse:
        return await self.accounting_ops.execute(who, req)

    # ------------------------------------------------------------ client operations

    async def submit(self, who: Identity, spec: pb.JobSpec) -> pb.Job:
        return await self.intake.submit(who, spec)

    def test_only(self, who: Identity, spec: pb.JobSpec) -> tuple[pb.Job, pb.TestOnlyEstimate]:
        """sbatch --test-only: the job ``spec`` would be, and a pass's estimate for it."""
        job = self.intake.trial_job(who, spec)
        return job, self.queries.test_only(job, self.snapshots)

    async def cancel(self, who: Identity, req: pb.CancelJobsRequest) -> list[pb.CancelOutcome]:
        if req.steps:
            return await self.steps.cancel_steps(who, req)
        return await self.intake.cancel(who, req)

    async def update_hold(self, who: Identity, req: pb.UpdateJobRequest) -> list[pb.CancelOutcome]:
        return await self.intake.update_hold(who, req)

    # ------------------------------------------------------------ node operations

    async def register_node(
        self, req: pb.RegisterNodeRequest, *, certified: bool = False
    ) -> NodeRecord:
        """``certified``: the call came with the node's certificate (a dynamic node may
        join only then: ctld/fleet/dynamic.py); one of a newer major version is refused."""
        versions.check_node(req.name, req.version)
        admit(self.state, req, certified=certified)
        return await self.node_reports.register_node(req)

    def heartbeat(self, req: pb.HeartbeatRequest) -> bool:
        return self.node_reports.heartbeat(req)

    async def check_heartbeats(self) -> None:
        await self.monitor.check_heartbeats()

    def jobs_kept_by(self, name: str) -> list[int]:
        return self.node_reports.jobs_kept_by(name)

    async def report_status(self, req: pb.ReportJobStatusRequest) -> None:
        await self.job_reports.report_status(req)

    async def node_faults(self, node: NodeRecord, events: Iterable[pb.NodeHealthEvent]) -> None:
        await self.node_ops.node_faults(node, events)

    async def update_node(self, who: Identity, req: pb.UpdateNodeRequest) -> None:
        if req.state.upper().startswith("POWER_"):
            await self.power.update(who, req.names, req.state.upper())
        else:
            await self.node_ops.update_node(who, req)

    @staticmethod
    def user_name(uid: int) -> str:
        return user_name(uid)

    # ------------------------------------------------------------ steps and allocations

    async def create_step(self, who: Identity, spec: pb.StepSpec) -> pb.Step:
        return await self.steps.create_step(who, spec)

    def step_for_node(self, job_id: int, step_id: int, node: str) -> tuple[pb.Job, pb.Step]:
        return self.steps.step_for_node(job_id, step_id, node)

    async def complete_step(self, who: Identity, req: pb.CompleteStepRequest) -> None:
        await self.steps.complete_step(who, req)

    async def cancel_steps(
        self, who: Identity, req: pb.CancelJobsRequest
    ) -> list[pb.CancelOutcome]:
        return await self.steps.cancel_steps(who, req)

    async def complete_job(self, who: Identity, req: pb.CompleteJobRequest) -> None:
        await self.steps.complete_job(who, req)

    async def step_node_lost(self, who: Identity, req: pb.StepNodeLostRequest) -> None:
        await self.suspects.node_lost(who, req)

    async def enforce_allocation_limits(self) -> None:
        await enforce_allocation_limits(self.state, self.outbox, self.endings)

    # ------------------------------------------------------------ scheduling

    def snapshot(self) -> Snapshot:
        return self.snapshots.build()

    async def schedule_pass(self) -> None:
        await self.scheduler.schedule_pass()

    async def apply_plan(self, plan: Plan, *, pass_no: int) -> bool:
        return await self.scheduler.apply_plan(plan, pass_no=pass_no)

    # ------------------------------------------------------------ queries

    def select(self, flt: pb.JobFilter, *, strict: bool = True) -> list[pb.Job]:
        return select(self.state, flt, strict=strict)

    def page_jobs(
        self, flt: pb.JobFilter, after: int, limit: int, visible: Callable[[pb.Job], bool]
    ) -> list[pb.Job]:
        return page(self.state, flt, after, limit, visible)

    def job(self, job_id: int) -> pb.Job:
        return self.state.job(job_id)

    def explain(self, who: Identity, job_id: int) -> pb.ExplainJobResponse:
        return self.queries.explain(who, job_id)

    def priority_weights(self) -> dict[str, int]:
        return self.queries.priority_weights()

    def share_rows(self, accounts: Iterable[str], users: Iterable[str]) -> list[pb.ShareRow]:
        return self.queries.share_rows(accounts, users)

    def node_list(
        self,
        names: Iterable[str],
        only: Collection[str] | None = None,
        *,
        with_hidden: bool = False,
        with_history: bool = False,
    ) -> list[pb.Node]:
        return self.queries.node_list(
            names, only, with_hidden=with_hidden, with_history=with_history
        )

    def partition_list(self, names: Iterable[str]) -> list[pb.Partition]:
        return self.queries.partition_list(names)
