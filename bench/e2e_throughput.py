"""Phase 4, end-to-end throughput: N trivial jobs, submit until all COMPLETED.

All N jobs go in over gRPC as fast as possible (64 in flight, one channel), not held;
the clock runs from the first submit until GetJobs reports every one of them
finished. The default cluster is 2 nodes x 16 CPUs: up to 32 one-CPU jobs at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import (
    ANCHORS,
    SLURM,
    BenchCluster,
    PhaseResult,
    Table,
    bench_cluster,
    group_commit,
    log,
    ms,
    phase_main,
    rate,
    ratio_text,
    secs,
    submit_grpc,
)

CONCURRENCY = 64


async def drive(cluster: BenchCluster, n: int, timeout_s: float) -> dict[str, Any]:
    import grpc

    from bench.common import grpc_metadata
    from corral.wire import corral_pb2 as pb
    from corral.wire import corral_pb2_grpc as pbg

    md = grpc_metadata(cluster)
    t0 = time.perf_counter()
    submit = await submit_grpc(cluster, n, CONCURRENCY, hold=False, name="e2e")
    submitted_s = time.perf_counter() - t0
    ids = set(submit.job_ids)
    active = [pb.JOB_STATE_PENDING, pb.JOB_STATE_RUNNING, pb.JOB_STATE_COMPLETING]
    polls = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)
        req = pb.GetJobsRequest(filter=pb.JobFilter(states=active))
        while True:
            polls += 1
            reply = await stub.GetJobs(req, metadata=md)
            if not any(j.job_id in ids for j in reply.jobs):
                break
            if time.perf_counter() - t0 > timeout_s:
                raise TimeoutError(f"{len(reply.jobs)} jobs still active after {timeout_s}s")
            await asyncio.sleep(0.05)
        done_s = time.perf_counter() - t0
        final = await stub.GetJobs(
            pb.GetJobsRequest(filter=pb.JobFilter(job_ids=sorted(ids))), metadata=md
        )
    states: dict[str, int] = {}
    for job in final.jobs:
        name = pb.JobState.Name(job.state).removeprefix("JOB_STATE_")
        states[name] = states.get(name, 0) + 1
    starts = sorted(j.start_time for j in final.jobs if j.start_time)
    ends = sorted(j.end_time for j in final.jobs if j.end_time)
    return {
        "n": n,
        "submitted": len(ids),
        "submit_errors": submit.errors,
        "submit_s": submitted_s,
        "done_s": done_s,
        "states": states,
        "polls": polls,
        "first_start_to_last_end_s": (ends[-1] - starts[0]) if starts and ends else None,
    }


def run(quick: bool = False) -> PhaseResult:
    n = 200 if quick else 1000
    nodes, cpus = 2, 16
    result = PhaseResult(
        "e2e_throughput",
        {"jobs": n, "cluster": f"{nodes} nodes x {cpus} CPUs", "in_flight": CONCURRENCY},
    )
    with bench_cluster("e2e", nodes=nodes, cpus_per_node=cpus) as cluster:
        before = cluster.store_stats()
        log(f"e2e: {n} trivial jobs")
        data = asyncio.run(drive(cluster, n, timeout_s=600))
        data["group_commit"] = group_commit(before, cluster.store_stats())
        data["ctld_rss_mib"] = cluster.rss_mib()
    table = Table(
        f"End-to-end: {n} trivial jobs, submit until all finished",
        ["figure", "corral", "reference"],
    )
    table.add(
        "jobs/s (first submit -> all finished)",
        f"{rate(n, data['done_s']):.1f}",
        f"{SLURM}: {ANCHORS['e2e_1000']}",
    )
    table.add("wall time to all finished", secs(data["done_s"]), "n/a")
    table.add(
        "submit phase alone",
        f"{secs(data['submit_s'])} ({rate(n, data['submit_s']):.0f} jobs/s)",
        "n/a",
    )
    span = data["first_start_to_last_end_s"]
    table.add("first startTime -> last endTime (ctld clock)", secs(span), "n/a")
    table.add("final states", ", ".join(f"{k} {v}" for k, v in sorted(data["states"].items())), "")
    gc = data["group_commit"]
    table.add("store requests per commit", ratio_text(gc), "n/a")
    table.add("scheduler passes", gc.get("passes", "n/a"), "n/a")
    table.add(
        "time in snapshot / plan (sync, ctld loop)",
        f"{ms(gc.get('snapshot_s'))} / {ms(gc.get('plan_s'))}",
        "n/a",
    )
    table.add("ctld RSS at the end", f"{data['ctld_rss_mib']:.0f} MiB", "n/a")
    table.notes.append(
        f"submits over gRPC, {CONCURRENCY} in flight; completion polled with GetJobs every 50 ms"
    )
    result.data = data
    result.tables.append(table)
    return result


if __name__ == "__main__":
    phase_main(run)
