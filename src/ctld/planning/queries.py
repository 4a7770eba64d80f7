"""What clients read: job selections, nodes, partitions, reservations, shares, ``why``;
the nodes a new reservation may take; sbatch --test-only's estimate.

Nothing here changes a job, a node or the store (a snapshot built for ``why`` or
--test-only fills the snapshot's memos, as a pass's does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable

from corral import hostlist
from corral.errors import InvalidRequest
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.model import power_energy
from ctld.model.nodes import POWERED_DOWN, NodeRecord
from ctld.ops.spares import spare_nodes
from ctld.planning.explain import explain as explain_job
from ctld.planning.explain import history_ratios
from ctld.planning.snapshot import SnapshotBuilder
from ctld.sched import INFINITY, Snapshot, schedule


def _hidden_cloud(node: NodeRecord) -> bool:
    """A cloud node that is powered down: not there, as far as a listing goes."""
    return node.config.cloud and node.power == POWERED_DOWN


class Queries:
    def __init__(self, state: State, snapshot: Callable[[], Snapshot]) -> None:
        self.state = state
        self.snapshot = snapshot

    def explain(self, who: Identity, job_id: int) -> pb.ExplainJobResponse:
        """corral why: the job, its rank, what holds it up and what would help."""
        st = self.state
        job = st.job(job_id)
        resp = pb.ExplainJobResponse(now=st.clock())
        resp.job.CopyFrom(job)
        # only the last requeue's event: why its last run ended (a node, a stalled rank)
        last = [e for e in job.events if e.event == "requeued"][-1:]
        del resp.job.events[:]
        resp.job.events.extend(last)
        resp.job.spec.ClearField("script")
        resp.job.spec.ClearField("environment")
        if job.state != js.PENDING:
            return resp
        allowed = [
            p.name
            for p in st.config.partitions
            if p.state == "UP" and (not p.allow_accounts or job.account in p.allow_accounts)
        ]
        snap = self.snapshot()
        # jobs ctld holds back are in a snapshot only to carry their reason: not in the queue
        snap = dataclasses.replace(
            snap, pending=tuple(r for r in snap.pending if not r.blocked_reason)
        )
        found = explain_job(
            snap,
            job_id,
            history_ratios(list(st.runs.recent)),
            lambda other: st.jobs[other].start_time if other in st.jobs else 0.0,
            allowed,
        )
        if found is None:
            return resp
        resp.rank, resp.ahead = found.rank, found.ahead
        resp.predicted = found.predicted
        if found.starts_now:
            resp.forecast_start = resp.likely_start = resp.earliest_start = resp.now
        elif found.forecast is not None and found.forecast.start != INFINITY:
            resp.forecast_start = found.forecast.start
            resp.likely_start = found.likely_start
            resp.earliest_start = found.earliest_start
        resp.history_ratio, resp.history_jobs = found.history_ratio, found.history_jobs
        for b in found.blockers:
            other = st.jobs.get(b.job_id)
            resp.blockers.add(
                job_id=b.job_id,
                user=other.user if other else "",
                nodes=hostlist.compress(list(b.nodes)),
                expected_end=b.expected_end if b.expected_end != INFINITY else 0,
                likely_end=b.likely_end if b.likely_end != INFINITY else 0,
            )
        for a in found.alternatives:
            resp.alternatives.add(change=a.change, start=a.start, now=a.now)
        for r in found.reservations:
            resp.reservations.add(
                name=r.name,
                start_time=r.start,
                end_time=r.end if r.end != INFINITY else 0,
                nodes=hostlist.compress(list(r.nodes)),
                flags=r.flags,
            )
        return resp

    def priority_weights(self) -> dict[str, int]:
        w = self.state.acct.priorities.weights
        return {
            "AGE": w.age,
            "FAIRSHARE": w.fairshare,
            "JOBSIZE": w.job_size,
            "PARTITION": w.partition,
            "QOS": w.qos,
        }

    def share_rows(self, accounts: Iterable[str], users: Iterable[str]) -> list[pb.ShareRow]:
        """sshare's rows, with usage as of now (running jobs counted so far)."""
        st = self.state
        now = st.clock()
        st.acct.priorities.refresh(now, st.on_node())
        want_accounts, want_users = set(accounts), set(users)
        out = []
        for row in st.acct.priorities.rows:
            if want_accounts and row.account not in want_accounts:
                continue
            if want_users and row.user and row.user not in want_users:
                continue
            out.append(
                pb.ShareRow(
                    account=row.account,
                    user=row.user,
                    depth=row.depth,
                    raw_shares=row.raw_shares,
                    norm_shares=row.norm_shares,
                    raw_usage=row.raw_usage,
                    norm_usage=row.norm_usage,
                    effective_usage=row.effective_usage,
                    fairshare=row.fairshare,
                )
            )
        return out

    def node_list(
        self,
        names: Iterable[str],
        only: Collection[str] | None = None,
        *,
        with_hidden: bool = False,
        with_history: bool = False,
    ) -> list[pb.Node]:
        """GetNodes' nodes (of ``names``' hostlists, or all but the powered-down cloud
        nodes unless ``with_hidden``); ``only``: just these top-level fields (a field
        mask's), the rest neither made nor computed; each node's recent changes only
        ``with_history`` (as GetJobs' events only ``with_events``)."""
        st = self.state
        wanted = list(names)
        if wanted:
            records = [st.node(n) for expr in wanted for n in hostlist.expand(expr)]
        elif with_hidden or "cloud" in st.config.controller.private_data:
            records = list(st.nodes.values())
        else:  # Slurm's listings leave powered-down cloud nodes out (PrivateData=cloud)
            records = [n for n in st.nodes.values() if not _hidden_cloud(n)]
        out = [r.to_wire(only) for r in records]

        def asked(*fields: str) -> bool:
            return only is None or any(f in only for f in fields)

        now = st.clock()
        if asked("powered_down_s", "energy_saved_j"):
            for i, record in enumerate(records):  # what it saved (ctld/model/power_energy.py)
                wire = out[i]  # the new message made from it
                figures = power_energy.node_figures(record, st.config.power, now)
                wire.powered_down_s, wire.energy_saved_j = figures
        active: dict[str, pb.Reservation] = {}
        if asked("reservation", "maint"):
            for resv in st.reservations.by_name.values():
                if resv.start_time <= now < resv.end_time:
                    for name in hostlist.expand(resv.nodes):
                        active.setdefault(name, resv)
        spares = spare_nodes(st) if asked("spare") else set()
        for i, record in enumerate(records):
            wire = out[i]
            holder = active.get(record.name)
            if holder is not None:
                wire.reservation, wire.maint = holder.name, "MAINT" in holder.flags
            if record.name in spares:
                wire.spare = True
        if with_history and (only is None or "history" in only):
            for i, record in enumerate(records):
                out[i].history.extend(change.to_wire() for change in record.history)
        return out

    def partition_list(self, names: Iterable[str]) -> list[pb.Partition]:
        st = self.state
        wanted = set(names)
        out = []
        default = st.config.default_partition
        for p in st.config.partitions:
            if wanted and p.name not in wanted:
                continue
            members = [st.nodes[n] for n in p.nodes]
            out.append(
                pb.Partition(
                    name=p.name,
                    nodes=hostlist.compress(list(p.nodes)),
                    is_default=default is not None and default.name == p.name,
                    state=p.state,
                    max_time_s=p.max_time_s,
                    default_time_s=p.default_time_s,
                    max_nodes=p.max_nodes,
                    total_nodes=len(members),
                    total_cpus=sum(n.resources.cpus for n in members),
                    total_gpus=sum(len(n.resources.gpus) for n in members),
                    priority_tier=p.priority_tier,
                    allow_accounts=p.allow_accounts,
                )
            )
        if wanted and not out:
            raise InvalidRequest(f"Partition {sorted(wanted)[0]} not found")
        return out

    def reservation_list(self, names: Iterable[str]) -> list[pb.Reservation]:
        wanted = set(names)
        found = [
            r
            for n, r in sorted(self.state.reservations.by_name.items())
            if not wanted or n in wanted
        ]
        if wanted and not found:
            raise InvalidRequest(f"Reservation {sorted(wanted)[0]} not found")
        return found

    def free_nodes(self, count: int, partition: str, reserved: set[str]) -> list[str]:
        """``count`` nodes a new reservation may take in ``partition`` (idle ones first)."""
        st = self.state
        config = st.config
        part = next((p for p in config.partitions if p.name == partition), None)
        if partition and part is None:
            raise InvalidRequest(f"Invalid partition name specified: {partition}")
        part = part or config.default_partition
        names = list(part.nodes) if part else list(st.nodes)
        usable = [n for n in names if st.nodes[n].schedulable and n not in reserved]
        usable.sort(key=lambda n: (bool(st.nodes[n].job_ids), n))  # idle ones first
        if len(usable) < count:
            raise InvalidRequest(f"Requested node configuration is not available: {count} nodes")
        return usable[:count]

    def test_only(self, job: pb.Job, snapshots: SnapshotBuilder) -> pb.TestOnlyEstimate:
        """sbatch --test-only: one scheduler pass over the queue as it is plus ``job``,
        whose plan is read and dropped (nothing is stored, started or queued)."""
        snap = snapshots.build()
        req = snapshots.request_for(job)
        pending = sorted([*snap.pending, req], key=lambda r: (-r.priority, r.submit_time, r.job_id))
        plan = schedule(dataclasses.replace(snap, pending=tuple(pending)))
        est = pb.TestOnlyEstimate(partition=job.partition, reason=plan.reasons.get(job.job_id, ""))
        start = next((s for s in plan.starts if s.job_id == job.job_id), None)
        if start is not None:
            est.start, est.partition = snap.now, start.partition
            est.nodes = hostlist.compress([p.node for p in start.placements])
            est.cpus = sum(p.cpus for p in start.placements)
        elif (fc := plan.forecasts.get(job.job_id)) is not None:
            est.start, est.partition, est.nodes = (
                fc.start,
                fc.partition,
                hostlist.compress(list(fc.nodes)),
            )
            est.cpus = job.num_cpus
        return est
