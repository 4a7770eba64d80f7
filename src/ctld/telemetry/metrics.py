"""Prometheus metrics of ctld, read off its state when scraped (nothing on hot paths).

Served as ``GET /metrics`` on the HTTP gateway's port, and on ``controller.metrics_port``
too when that is set (a port a firewall can open to the monitoring host alone), to a
scrape with the bearer token of ``controller.metrics_token_file`` only; the series by
user and account only without ``private_data`` jobs or accounting (metrics_access.py).

Names follow Prometheus's conventions: base units in the name (``_seconds``,
``_bytes``, ``_ratio``), ``_total`` on counters, which only go up (from ctld's start:
a restart is a counter reset). Labels stay bounded: per node, GPU, partition, user and
account, never per job (docs/admin-guide.md, "Metrics"). What counts over time lives in
``metrics_ledger.py``; the rest is read off the state here.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ctld.codec import fieldmask
from ctld.model import jobstate as js
from ctld.storage.storelock import sqlite_file
from ctld.telemetry.metrics_access import CHALLENGE, HIDES_USERS, MetricsAccess
from ctld.telemetry.metrics_ledger import Histogram
from ctld.telemetry.metrics_power import power_families
from ctld.telemetry.metrics_text import PerNodeText, exposition, node_state

if TYPE_CHECKING:
    from ctld.api.unproven import Guard
    from ctld.control.cluster import Cluster
    from ctld.model.nodes import NodeRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_ACTIVE = ("PENDING", "RUNNING", "COMPLETING")


def _node_state(node: NodeRecord) -> str:
    return node_state(node)


class ClusterCollector(Collector):
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.text = PerNodeText()

    def collect(self) -> Iterator[Metric]:
        yield from self._jobs()
        yield from self._scheduler()
        yield from self._nodes()
        yield from self._gpus()
        if not HIDES_USERS & self.cluster.policy.private_data:  # as squeue and sacct would
            yield from self._users()
        yield from self._store()
        yield from self._mail()
        yield from self._queries()
        yield from power_families(self.cluster)

    # ------------------------------------------------------------ jobs

    def _jobs(self) -> Iterator[Metric]:
        c = self.cluster
        by_state: Counter[str] = Counter(dict.fromkeys(_ACTIVE, 0))
        by_reason: Counter[str] = Counter()
        for job_id in c.state.index.active_ids:
            job = c.jobs.get(job_id)
            if job is None or job.state not in js.ACTIVE:
                continue
            by_state[js.state_name(job.state)] += 1
            if job.state == js.PENDING:
                by_reason[job.reason or "None"] += 1
        jobs = GaugeMetricFamily(
            "corral_jobs", "Jobs pending, running or completing now, by state", labels=["state"]
        )
        for state, n in sorted(by_state.items()):
            jobs.add_metric([state], n)
        yield jobs
        pending = GaugeMetricFamily(
            "corral_jobs_pending", "Pending jobs, by pending reason", labels=["reason"]
        )
        for reason, n in sorted(by_reason.items()):
            pending.add_metric([reason], n)
        yield pending
        led = c.metrics
        submitted = CounterMetricFamily(
            "corral_jobs_submitted", "Jobs submitted, by partition", labels=["partition"]
        )
        for part, n in sorted(led.submitted.items()):
            submitted.add_metric([part], n)
        yield submitted
        ended = CounterMetricFamily(
            "corral_jobs_ended",
            "Jobs that ended, by partition and final state (every end, not only recent ones)",
            labels=["partition", "state"],
        )
        for (part, state), n in sorted(led.ended.items()):
            ended.add_metric([part, state], n)
        yield ended
        yield _histogram(
            "corral_job_wait_seconds", "Time from submit to start, by partition", led.waits
        )
        yield _histogram(
            "corral_job_run_seconds", "Run time of each run that ended, by partition", led.runs
        )

    def _scheduler(self) -> Iterator[Metric]:
        c = self.cluster
        yield GaugeMetricFamily(
            "corral_sched_pass_seconds", "Duration of the last scheduling pass", value=c.last_pass_s
        )
        yield GaugeMetricFamily(
            "corral_sched_jobs_considered",
            "Pending jobs the last scheduling pass considered",
            value=c.last_considered,
        )
        yield CounterMetricFamily(
            "corral_sched_passes", "Scheduling passes since ctld started", value=c.passes
        )
        yield CounterMetricFamily(
            "corral_job_starts", "Jobs started since ctld started", value=c.starts_total
        )
        yield CounterMetricFamily(
            "corral_job_starts_at_submit",
            "Jobs started when submitted, without waiting for a pass (start_on_submit)",
            value=c.scheduler.quick_starts_total,
        )

    # ------------------------------------------------------------ nodes and GPUs

    def _nodes(self) -> Iterator[Metric]:
        c = self.cluster
        nodes = GaugeMetricFamily("corral_nodes", "Nodes, by state", labels=["state"])
        counts: Counter[str] = Counter(_node_state(n) for n in c.nodes.values())
        for state, n in sorted(counts.items()):
            nodes.add_metric([state], n)
        yield nodes
        part_gpus = GaugeMetricFamily(
            "corral_gpus", "GPUs per partition, allocated or idle", labels=["partition", "use"]
        )
        for part in c.config.partitions:
            members = [c.nodes[name] for name in part.nodes if name in c.nodes]
            total = sum(len(n.resources.gpus) for n in members)
            used = sum(n.gpus_in_use() for n in members)
            part_gpus.add_metric([part.name, "allocated"], used)
            part_gpus.add_metric([part.name, "idle"], total - used)
        yield part_gpus
        # per node and per GPU: thousands of series at 1,000 nodes, written as text
        # directly (prometheus_client's exposition costs ~10x more per sample)
        yield from self.text.node_families(c)

    def _gpus(self) -> Iterator[Metric]:
        yield from self.text.gpu_families(self.cluster)

    # ------------------------------------------------------------ users and accounts

    def _users(self) -> Iterator[Metric]:
        c = self.cluster
        labels = ["user", "account"]
        jobs: Counter[tuple[str, str, str]] = Counter()
        gpus: Counter[tuple[str, str]] = Counter()
        running = []
        for job_id in c.state.index.active_ids:
            job = c.jobs.get(job_id)
            if job is None or job.state not in js.ACTIVE:
                continue
            word = "PENDING" if job.state == js.PENDING else "RUNNING"
            jobs[(job.user, job.account, word)] += 1
            if job.state in js.ON_NODE:
                running.append(job)
                gpus[(job.user, job.account)] += job.num_gpus
        c.metrics.accrue(running, c.clock())
        user_jobs = GaugeMetricFamily(
            "corral_user_jobs",
            "Pending and running jobs, by user and account",
            labels=[*labels, "state"],
        )
        for key, n in sorted(jobs.items()):
            user_jobs.add_metric(list(key), n)
        yield user_jobs
        user_gpus = GaugeMetricFamily(
            "corral_user_gpus", "GPUs allocated to running jobs, by user and account", labels=labels
        )
        for pair, n in sorted(gpus.items()):
            user_gpus.add_metric(list(pair), n)
        yield user_gpus
        seconds = CounterMetricFamily(
            "corral_user_gpu_seconds",
            "GPU-seconds allocated (GPUs x run time), by user and account: /3600 is GPU-hours",
            labels=labels,
        )
        for pair, secs in sorted(c.metrics.gpu_seconds.items()):
            seconds.add_metric(list(pair), secs)
        yield seconds

    # ------------------------------------------------------------ the store, mail

    def _store(self) -> Iterator[Metric]:
        store = self.cluster.store
        yield CounterMetricFamily(
            "corral_store_commits", "Store transactions made durable", value=store.commits
        )
        yield GaugeMetricFamily(
            "corral_store_up",
            "1 while the store takes changes; 0 while its database is away or full",
            value=1 if store.available else 0,
        )
        yield CounterMetricFamily(
            "corral_store_outages",
            "Times the store went down since ctld started",
            value=store.outages,
        )
        free = GaugeMetricFamily(
            "corral_store_free_bytes",
            "Bytes free on the filesystem of a SQLite store (a full one stops every change)",
        )
        database = sqlite_file(store.engine.url)
        if database is not None:  # PostgreSQL's disk is its server's: watch it there
            with contextlib.suppress(OSError):
                fs = os.statvfs(os.path.dirname(database))
                free.add_metric([], fs.f_bavail * fs.f_frsize)
        yield free

    def _mail(self) -> Iterator[Metric]:
        m = self.cluster.mailer
        mails = CounterMetricFamily(
            "corral_mails",
            "Job mails, by outcome (sent; failed: every try failed or refused for good; "
            "dropped: queue full; invalid: recipient no mail address, never passed on)",
            labels=["outcome"],
        )
        for outcome, n in (
            ("sent", m.sent),
            ("failed", m.failed),
            ("dropped", m.dropped),
            ("invalid", m.invalid),
        ):
            mails.add_metric([outcome], n)
        yield mails
        yield CounterMetricFamily(
            "corral_mail_attempts_failed",
            "Tries to send a job mail that failed, the ones tried again included",
            value=m.attempts_failed,
        )
        yield GaugeMetricFamily(
            "corral_mail_queue",
            "Mails taken and not yet sent or given up (waiting for a try or a retry)",
            value=m.queued,
        )

    def _queries(self) -> Iterator[Metric]:
        masked = CounterMetricFamily(
            "corral_masked_queries",
            "GetJobs, QueryAccounting and GetNodes calls that sent a field mask, by method",
            labels=["method"],
        )
        for method in sorted(fieldmask.MASKED):
            masked.add_metric([method], fieldmask.MASKED_CALLS[method])
        yield masked


def _histogram(name: str, doc: str, by_part: dict[str, Histogram]) -> Metric:
    family = HistogramMetricFamily(name, doc, labels=["partition"])
    for part, h in sorted(by_part.items()):
        family.add_metric([part], h.cumulative(), sum_value=h.total)
    return family


def add_metrics_route(
    app: web.Application,
    registry: CollectorRegistry,
    access: MetricsAccess,
    guard: Guard | None = None,
) -> None:
    async def metrics(request: web.Request) -> web.Response:
        if not access.allows(request.headers.get("Authorization", "")):
            return web.Response(
                status=401, text=access.refusal, headers={"WWW-Authenticate": CHALLENGE}
            )
        if guard is not None:  # Prometheus keeps its connection between scrapes
            guard.proven(request.transport)
        return web.Response(body=exposition(registry), headers={"Content-Type": CONTENT_TYPE})

    app.router.add_get("/metrics", metrics)
