"""Prometheus metrics of ctld, read off its state when scraped (nothing on hot paths).

Served as ``GET /metrics`` on the HTTP gateway's port, and on ``controller.metrics_port``
too when that is set (a port a firewall can open to the monitoring host alone).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.wire import corral_pb2 as pb
from ctld import jobstate as js

if TYPE_CHECKING:
    from ctld.cluster import Cluster

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ClusterCollector(Collector):
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def collect(self) -> Iterator[Metric]:
        c = self.cluster
        by_state: Counter[str] = Counter()
        by_reason: Counter[str] = Counter()
        for job in c.jobs.values():
            by_state[js.state_name(job.state)] += 1
            if job.state == js.PENDING:
                by_reason[job.reason or "None"] += 1
        jobs = GaugeMetricFamily("corral_jobs", "Jobs ctld holds, by state", labels=["state"])
        for state in ("PENDING", "RUNNING", "COMPLETING"):
            by_state.setdefault(state, 0)
        for state, n in sorted(by_state.items()):
            jobs.add_metric([state], n)
        yield jobs
        pending = GaugeMetricFamily(
            "corral_jobs_pending", "Pending jobs, by pending reason", labels=["reason"]
        )
        for reason, n in sorted(by_reason.items()):
            pending.add_metric([reason], n)
        yield pending
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
        nodes = GaugeMetricFamily("corral_nodes", "Nodes, by state", labels=["state"])
        node_states: Counter[str] = Counter(
            pb.NodeState.Name(n.state).removeprefix("NODE_STATE_")  # type: ignore[arg-type]
            for n in c.nodes.values()
        )
        for state, n in sorted(node_states.items()):
            nodes.add_metric([state], n)
        yield nodes
        gpus = GaugeMetricFamily(
            "corral_gpus", "GPUs per partition, allocated or idle", labels=["partition", "use"]
        )
        for part in c.config.partitions:
            members = [c.nodes[name] for name in part.nodes if name in c.nodes]
            total = sum(len(n.resources.gpus) for n in members)
            used = sum(len(n.alloc_gpus) for n in members)
            gpus.add_metric([part.name, "allocated"], used)
            gpus.add_metric([part.name, "idle"], total - used)
        yield gpus
        yield GaugeMetricFamily(
            "corral_store_commits", "Store transactions made durable", value=c.store.commits
        )
        yield GaugeMetricFamily(
            "corral_store_up",
            "1 while the store takes changes; 0 while its database is away or full",
            value=1 if c.store.available else 0,
        )
        yield GaugeMetricFamily(
            "corral_store_outages",
            "Times the store went down since ctld started",
            value=c.store.outages,
        )


def add_metrics_route(app: web.Application, registry: CollectorRegistry) -> None:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE})

    app.router.add_get("/metrics", metrics)
