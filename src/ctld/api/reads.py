"""What the commands and the web page read, with the caller's authorization.

Each read is the selection an RPC answers with (GetJobs, QueryAccounting, GetNodes),
called by that RPC's handler (ctld/api/rpc.py) and by the web page's views (ctld/web)
alike, so the page cannot show what the commands would refuse. What no RPC serves (the
GPU samples noded sends, which GPUs a node has given out) is read here too, under the
rule of the data it belongs with: a node's, everyone's (as sinfo); a job's, those who
may see the job. tests/unit/test_web_reads.py keeps the web to these reads.

A job returned whole is ctld's own record where ``Policy.shown`` lets the caller see it
whole (its owner and operators): to read, never to change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable

from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster
from ctld.model.gpu_samples import Series

# a sample older than this many heartbeat intervals (and 30 s) says nothing about now
FRESH_BEATS = 3
FRESH_MIN_S = 30.0


class Reads:
    """The reads, of one cluster (ControllerApi's ``reads``)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    # ------------------------------------------------------------ jobs

    def visible_jobs(
        self, flt: pb.JobFilter, who: Identity, *, after: int = 0, limit: int = 0
    ) -> list[pb.Job]:
        """The live jobs matching ``flt`` that ``who`` may see, by id: past ``after``, at
        most ``limit`` (0: all). ctld's own records, to read and never change; a reply
        shows each through ``policy.shown`` (``shown_jobs``). GetJobs selects here."""
        may_see = self.cluster.policy.may_see
        return self.cluster.page_jobs(flt, after, limit, lambda job: may_see(who, job))

    def shown_jobs(
        self,
        flt: pb.JobFilter,
        who: Identity,
        *,
        after: int = 0,
        limit: int = 0,
        with_spec: bool = False,
    ) -> list[pb.Job]:
        """``visible_jobs`` as GetJobs shows them to ``who`` (``shown``)."""
        found = self.visible_jobs(flt, who, after=after, limit=limit)
        return [self.shown(who, job, with_spec=with_spec) for job in found]

    def shown(self, who: Identity, job: pb.Job, *, with_spec: bool = False) -> pb.Job:
        """One of ``visible_jobs`` as GetJobs shows it to ``who`` (``policy.shown``'s
        masks), with its script and environment put back where ``with_spec`` (which
        only its owner and operators then see)."""
        return self.cluster.policy.shown(who, self.cluster.whole(job) if with_spec else job)

    async def accounting_runs(self, req: pb.QueryAccountingRequest, who: Identity) -> list[pb.Job]:
        """The runs QueryAccounting answers (sacct; ``corral history``'s story with
        ``with_events`` and ``duplicates``), as ``who`` may see them, earlier runs of a
        requeued job before it: records to read, never to change (a pending job's is
        ctld's live one)."""
        cluster = self.cluster
        flt = req.filter
        jobs = await asyncio.to_thread(
            cluster.store.query_jobs,
            job_ids=list(flt.job_ids),
            users=list(flt.users),
            states=[int(s) for s in flt.states],
            names=list(flt.names),
            partitions=list(flt.partitions),
            accounts=list(flt.accounts),
            start_after=req.start_after,
            end_before=req.end_before,
            limit=req.limit,
            after_job_id=req.after_job_id,
            with_events=req.with_events,
        )
        earlier: dict[int, list[pb.Job]] = {}
        if req.duplicates and jobs:
            for run in await asyncio.to_thread(
                cluster.store.earlier_runs, [j.job_id for j in jobs]
            ):
                earlier.setdefault(run.job_id, []).append(run)
        policy = cluster.policy
        out: list[pb.Job] = []
        for job in jobs:
            if not policy.may_see_accounting(who, job.uid):
                continue
            live = cluster.jobs.get(job.job_id)
            if live is not None and live.state == job.state == pb.JOB_STATE_PENDING:
                # what a pass writes (the reason) lives in memory, stored only with a
                # change: a pending job's record is ctld's, so sacct says what squeue says
                job = live
            if req.with_events and not policy.may_see(who, job):
                continue  # a story is for those who may list the job (squeue -j)
            for run in (*earlier.get(job.job_id, ()), job):  # earlier runs, then this one
                out.append(policy.shown(who, run))
        return out

    def gpu_series(self, who: Identity, job: pb.Job) -> dict[tuple[str, int], Series]:
        """``job``'s GPUs over time ((node, GPU index) -> series; kept while the job is
        in memory), for those who may see the job (as the cluster view shows its GPUs
        now); none for anyone else."""
        if not self.cluster.policy.may_see(who, job):
            return {}
        return self.cluster.state.gpu_samples.of_job(job.job_id)

    # ------------------------------------------------------------ nodes

    def nodes(
        self,
        names: Iterable[str],
        only: Collection[str] | None = None,
        *,
        with_hidden: bool = False,
        with_history: bool = False,
    ) -> list[pb.Node]:
        """GetNodes' nodes (sinfo's, scontrol show node's): ``names``' hostlists, or all
        (the powered-down cloud nodes only ``with_hidden``); ``only``: just these
        top-level fields. Every user sees every node, as Slurm's commands show them."""
        return self.cluster.node_list(
            names, only, with_hidden=with_hidden, with_history=with_history
        )

    def known_nodes(self, names: Iterable[str], only: Collection[str]) -> list[pb.Node]:
        """``nodes`` of these names, leaving out any ctld no longer knows (a job's node
        may since have gone: a dynamic node deleted, one taken out of the config)."""
        known = [n for n in dict.fromkeys(names) if n in self.cluster.nodes]
        return self.nodes(known, only) if known else []

    def gpus_in_use(self, node: str) -> set[int]:
        """The indices of ``node``'s GPUs given out, whole or as shards (GetNodes says how
        many, ``alloc_gpus``; the cluster view marks which)."""
        record = self.cluster.nodes.get(node)
        return set(record.alloc_gpus) | set(record.alloc_shards) if record is not None else set()

    def gpus_now(self, node: str, now: float) -> dict[int, pb.GpuStatus]:
        """``node``'s GPUs by index as last sampled (utilization, memory in use, a
        fault), if the sample is recent enough to say something about ``now``."""
        beat = self.cluster.config.heartbeat.interval_s
        max_age = max(FRESH_BEATS * beat, FRESH_MIN_S)
        return self.cluster.state.gpu_samples.now(node, max_age, now)


__all__ = ["Reads"]
