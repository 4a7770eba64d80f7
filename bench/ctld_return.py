"""ctld stopped or killed, away for a while, started again, with simulated nodes
running jobs (issue 35): its load-to-ready time, ready to every node registered again
with its jobs, ctld's CPU in between, requeues and jobs lost.

One simulator process plays every node (corral.localcluster.simnodes: 64 CPUs, 8 fake
GPUs each); every node is filled with running jobs (``--jobs-per-node``, 8 GPUs
shared out). For each variant (SIGTERM: ``systemctl stop``; SIGKILL: a crash) ctld goes
away for ``--away`` seconds (3 heartbeat timeouts by default) while the nodes keep
their jobs (the simulator's own count, read at the end of the outage), then starts
again. Measured: start to ready (its ready file: the store loaded, listening), ready to
every node registered (no node UNKNOWN, none DOWN), ctld's CPU seconds in between;
then every job is checked (RUNNING, restart count 0) at once and again a heartbeat
timeout later (a late verdict would show there).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from bench.common import BenchCluster, Table, bench_cluster, log
from bench.noded_takeover import log_events
from bench.scale import _spec, _submit
from corral.testing import wait_for

CPUS, GPUS = 64, 8
UP = ("NODE_STATE_IDLE", "NODE_STATE_MIXED", "NODE_STATE_ALLOCATED")


@dataclass
class Outage:
    variant: str
    away_s: float
    kept_by_nodes: int = 0  # jobs the simulated nodes still ran at the end of the outage
    load_s: float = 0.0
    reattach_s: float = 0.0
    cpu_s: float = 0.0  # ctld's, ready -> every node registered
    load_cpu_s: float = 0.0  # ctld's, its start to ready
    registrations: int = 0
    polls: int = 0  # GetNodes calls of the bench's between ready and every node back
    registered_at: list[float] = field(default_factory=list)  # s from ready, ctld's log
    before: dict[str, int] = field(default_factory=dict)
    checks: dict[str, int] = field(default_factory=dict)
    later: dict[str, int] = field(default_factory=dict)
    causes: dict[str, int] = field(default_factory=dict)  # requeues (any), by cause


def _cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _node_states(c: BenchCluster) -> list[str]:
    nodes = c.client().call("GetNodes", {"fields": ["state"]}).get("nodes", [])
    return [str(n.get("state", "")) for n in nodes]


def _job_checks(c: BenchCluster, ids: set[str]) -> dict[str, int]:
    reply = c.client().call("GetJobs", {"fields": ["job_id", "state", "restart_count"]})
    jobs = {str(j.get("jobId")): j for j in reply.get("jobs", []) if str(j.get("jobId")) in ids}
    states = _node_states(c)
    return {
        "running": sum(j.get("state") == "JOB_STATE_RUNNING" for j in jobs.values()),
        "requeued": sum(int(j.get("restartCount", 0)) > 0 for j in jobs.values()),
        "lost": len(ids) - sum(j.get("state") == "JOB_STATE_RUNNING" for j in jobs.values()),
        "nodes down": sum(s == "NODE_STATE_DOWN" for s in states),
    }


def requeue_causes(c: BenchCluster, ids: set[str], limit: int = 50) -> dict[str, int]:
    """Why jobs were requeued (their "requeued" events' causes), over at most ``limit``
    of them: a requeue here is a finding, and this says whose."""
    reply = c.client().call("GetJobs", {"fields": ["job_id", "restart_count"]})
    again = [str(j["jobId"]) for j in reply.get("jobs", []) if j.get("restartCount")]
    again = [i for i in again if i in ids][:limit]
    causes: dict[str, int] = {}
    if again:
        told = c.client().call("GetJobs", {"filter": {"jobIds": again}, "withEvents": True})
        for job in told.get("jobs", []):
            for e in job.get("events", []):
                if e.get("event") == "requeued":
                    cause = " ".join(str(e.get("cause", "")).split()[:2])
                    causes[cause] = causes.get(cause, 0) + 1
    return causes


def outage(c: BenchCluster, variant: str, away_s: float, settle_s: float, ids: set[str]) -> Outage:
    out = Outage(variant, away_s)
    out.before = _job_checks(c, ids)
    stats = c.sim("stats")["stats"]
    out.before["kept by nodes"] = int(stats["running"])
    before = int(stats["registrations"])
    if variant == "SIGTERM":
        c.stop_process("ctld")
    else:
        c.kill_process("ctld")
    time.sleep(away_s)  # the outage itself
    out.kept_by_nodes = int(c.sim("stats")["stats"]["running"])
    ctld_log = c.state_dir / "log" / "ctld.log"
    offset = ctld_log.stat().st_size
    t0 = time.monotonic()
    c.start_ctld(timeout=600)
    ready, ready_wall = time.monotonic(), time.time()
    pid = c.ctld_pid
    cpu0 = out.load_cpu_s = _cpu(pid)
    nodes = c.nodes

    def reattached() -> bool:
        states = _node_states(c)
        return len(states) == nodes and all(s in UP for s in states)

    # polled slowly: each answer costs ctld ~20 ms at 1,000 nodes (poll_cost), and the
    # times come from its log, not from the poll
    wait_for(reattached, 600, "every node registered again", interval=0.5)
    done = time.monotonic()
    out.cpu_s = _cpu(pid) - cpu0
    out.polls = round((done - ready) / 0.5) + 1
    out.load_s = ready - t0
    registered = [t - ready_wall for t, e in log_events(ctld_log, offset) if e == "node registered"]
    out.registered_at = sorted(registered)
    out.reattach_s = out.registered_at[-1] if out.registered_at else done - ready
    out.registrations = int(c.sim("stats")["stats"]["registrations"]) - before
    out.checks = _job_checks(c, ids)
    time.sleep(settle_s)  # a heartbeat timeout on: a late verdict would show now
    out.later = _job_checks(c, ids)
    out.causes = requeue_causes(c, ids)
    return out


def measure(
    nodes: int,
    jobs_per_node: int,
    interval_s: float,
    timeout_s: float,
    away_s: float,
    variants: list[str],
) -> tuple[list[Outage], dict[str, Any]]:
    gpus = max(1, GPUS // jobs_per_node)
    with bench_cluster(
        f"ctld-return{nodes}",
        nodes=nodes,
        cpus_per_node=CPUS,
        gpus_per_node=GPUS,
        memory_mb_per_node=512 * 1024,
        simulated=True,
        heartbeat_interval_s=interval_s,
        heartbeat_timeout_s=timeout_s,
        start_timeout=600,
    ) as c:
        n_jobs = nodes * jobs_per_node
        log(f"ctld return: filling {nodes} nodes with {n_jobs} jobs of {gpus} GPUs")
        spec = _spec(c, runtime=36000, gpus=gpus, limit=86400, hold=False)
        ids = {str(i) for i in asyncio.run(_submit(c, spec, n_jobs))}
        wait_for(
            lambda: _job_checks(c, ids)["running"] == len(ids),
            600,
            "every job running",
            interval=0.5,
        )
        cpu0 = _cpu(c.ctld_pid)
        for _ in range(20):
            _node_states(c)
        poll_cost = (_cpu(c.ctld_pid) - cpu0) / 20
        out = []
        for variant in variants:
            log(f"ctld return: {variant}, away {away_s:g} s")
            o = outage(c, variant, away_s, timeout_s + interval_s, ids)
            log(
                f"ctld return: {variant}: ready {o.load_s:.1f} s, every node back "
                f"{o.reattach_s:.1f} s later; {o.checks}"
            )
            out.append(o)
    return out, {"jobs": n_jobs, "gpus_per_job": gpus, "poll_cost_s": poll_cost}


def _spread(at: list[float]) -> str:
    if not at:
        return "n/a"
    return f"{at[0]:.2f} / {at[len(at) // 2]:.2f} / {at[-1]:.2f} s"


def tables(
    outages: list[Outage], nodes: int, interval_s: float, timeout_s: float, info: dict[str, Any]
) -> list[Table]:
    t = Table(
        f"ctld away and back: {nodes:,} simulated nodes running {info['jobs']:,} jobs",
        [
            "ctld stopped by",
            "away",
            "jobs the nodes kept",
            "start to ready",
            "ready to nodes back with their jobs: first / half / all",
            "ctld CPU in between (the bench's polls)",
            "registrations",
            "requeued / lost / nodes DOWN",
            "a timeout later",
        ],
    )
    for o in outages:
        if o.before.get("requeued") or o.before.get("kept by nodes", 0) < info["jobs"]:
            t.notes.append(f"{o.variant}: before the outage already {o.before}")
        if o.causes:
            t.notes.append(f"{o.variant}: requeues by cause (jobs so far): {o.causes}")
        t.add(
            o.variant,
            f"{o.away_s:g} s",
            f"{o.kept_by_nodes:,} / {info['jobs']:,}",
            f"{o.load_s:.2f} s (CPU {o.load_cpu_s:.2f} s)",
            _spread(o.registered_at),
            f"{o.cpu_s:.2f} s ({o.polls * info['poll_cost_s']:.2f} s)",
            f"{o.registrations:,}",
            f"{o.checks['requeued'] - o.before['requeued']} / {o.checks['lost']} / "
            f"{o.checks['nodes down']}",
            f"{o.later['requeued'] - o.before['requeued']} / {o.later['lost']} / "
            f"{o.later['nodes down']}",
        )
    t.notes += [
        f"heartbeat interval {interval_s:g} s, timeout {timeout_s:g} s; while ctld is away "
        "each node retries its beat every 0.2 s doubling to 5 s and its channel reconnects "
        "every 0.2 s doubling to 2 s (as noded), so each is back within ~5 s of ctld's "
        "ready file plus its turn in the registration storm (64 RegisterNode in flight)",
        "start to ready: ctld's process start, the store loaded, listening (its ready "
        "file); CPU: ctld's CPU seconds at ready",
        'nodes back: ctld\'s log lines "node registered" (its clock), from its ready '
        "file; every node confirmed by GetNodes (states only, every 0.5 s: no node "
        "UNKNOWN or DOWN); registrations: RegisterNode calls the simulator made",
        f"ctld CPU from ready to every node confirmed back; in brackets what the "
        f"bench's own GetNodes cost it ({info['poll_cost_s'] * 1000:.0f} ms a call, "
        "measured before)",
        "requeued / lost / nodes DOWN: jobs whose restart count rose since before the "
        "outage / jobs not RUNNING / nodes DOWN, when every node was back and again a "
        "heartbeat timeout (plus an interval) later",
    ]
    return [t]
