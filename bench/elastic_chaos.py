"""Chaos on virtual time: a week of one long training job under node failures, with and
without elastic shrink and hot spares; its ETTR as ctld itself records it.

    .venv/bin/python -m bench.elastic_chaos --days 7 --seeds 3

ctld's real state machine (``make_cluster``: the store, the scheduler, the heartbeat
monitor, the requeue, the disruption warnings) runs on a ``ManualClock``; this script
plays the nodes: every live node heartbeats each tick, the batch host's heartbeat
carries the job's last checkpoint mark (one every ``--checkpoint-min`` minutes of a
run, as noded reports the checkpoint directory's last change), and a warned job
(growth) saves and exits ``--save-s`` later. Each node fails at ``--mtbf-node-h``
(exponential: one failure per that many node-hours), stays away ``--repair-h``
(exponential too), then registers again. A failed node goes silent: ctld finds it DOWN
at the heartbeat timeout and requeues the job; a relaunched run takes ``--load-s`` to
load its checkpoint before it does useful work again (the bench adds that to the
overhead ctld counts up to the launch).

Scenarios: ``plain`` (-N N --requeue on N nodes: it waits for the repair), ``elastic``
(-N MIN-N --elastic, growth on: it shrinks at once and grows back), ``spares`` (-N N
on N + S nodes, ``spare_nodes = S``), ``elastic+spares``. Figures: ETTR (ctld's
useful / wall time, corral/ettr.py), goodput (node-weighted: useful node-seconds over
N nodes x wall, since a shrunk job trains slower), interruptions, mean restart
overhead (failure to useful work again) and lost work per interruption.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import Any

from corral.config import parse_config
from corral.ettr import Interrupted, ettr
from corral.identity import Identity
from corral.testing.inprocess import ManualClock, RecordingDispatcher, make_cluster, registration
from corral.wire import corral_pb2 as pb

USER = Identity("alice", 1000, 1000)
RUNNING = pb.JOB_STATE_RUNNING


@dataclass
class Scenario:
    name: str
    elastic: bool
    spares: int


SCENARIOS = (
    Scenario("plain", False, 0),
    Scenario("elastic", True, 0),
    Scenario("spares", False, 2),
    Scenario("elastic+spares", True, 2),
)


@dataclass
class Outcome:
    ettr: float
    goodput: float
    interruptions: int
    overhead_s: list[float] = field(default_factory=list)
    lost_s: list[float] = field(default_factory=list)


def config(nodes: int, spares: int, grow: bool, tick_s: float, timeout_s: float) -> Any:
    return parse_config(
        {
            "controller": {"elastic_grow": grow, "disruption_lead_s": 120},
            "heartbeat": {"interval_s": tick_s, "timeout_s": timeout_s},
            "nodes": [{"names": f"n[01-{nodes + spares:02d}]", "cpus": 8}],
            "partitions": [
                {
                    "name": "p",
                    "nodes": f"n[01-{nodes + spares:02d}]",
                    "default": True,
                    "spare_nodes": spares,
                }
            ],
        }
    )


async def play(sc: Scenario, args: argparse.Namespace, seed: int, db: str) -> Outcome:
    rng = random.Random(seed)
    nodes = args.nodes
    clock, disp = ManualClock(), RecordingDispatcher()
    cfg = config(nodes, sc.spares, sc.elastic, args.tick_s, args.timeout_s)
    cluster = make_cluster(cfg, db, clock=clock, dispatcher=disp)
    names = list(cluster.nodes)
    for name in names:
        await cluster.register_node(registration(cluster, name))
    low = max(1, math.ceil(nodes * args.min_fraction)) if sc.elastic else nodes
    spec = pb.JobSpec(
        script="#!/bin/sh\ntrain\n",
        work_dir="/tmp",
        name="train",
        nodes_min=low,
        nodes_max=nodes if sc.elastic else 0,
        cpus_per_task=8,
        requeue=True,
        elastic=sc.elastic,
    )
    job = await cluster.submit(USER, spec)
    start = clock()
    horizon = start + args.days * 86400
    rate = 1.0 / (args.mtbf_node_h * 3600)
    fails_at = {n: start + rng.expovariate(rate) for n in names}
    back_at: dict[str, float] = {}
    saving_until = 0.0  # a warned job saves, then exits
    warned_seen = len(disp.signalled)
    useful_node_s = 0.0
    run_nodes, seen = 0, 0  # the current run's size; the interruptions counted so far
    while clock() < horizon:
        now = clock()
        for n in names:  # failures and repairs due
            if n not in back_at and now >= fails_at[n]:
                back_at[n] = now + rng.expovariate(1.0 / (args.repair_h * 3600))
            elif n in back_at and now >= back_at[n]:
                del back_at[n]
                fails_at[n] = now + rng.expovariate(rate)
                await cluster.register_node(registration(cluster, n))
        run_start = job.start_time
        if job.state == RUNNING:
            mark = run_start + math.floor((now - run_start) / (args.checkpoint_min * 60)) * (
                args.checkpoint_min * 60
            )
        for n in names:
            if n in back_at:
                continue
            beat = pb.HeartbeatRequest(name=n)
            if job.state == RUNNING and n == job.batch_host and mark > run_start:
                beat.usage.add(job_id=job.job_id, ntasks=1, checkpoint_time=mark)
            if cluster.heartbeat(beat):
                cluster.state.live.record(beat)
        await cluster.check_heartbeats()
        await cluster.node_ops.disruptions.check()
        for _, req in disp.signalled[warned_seen:]:  # growth's warning: save and exit
            if req.job_id == job.job_id and req.signal and not req.terminate:
                saving_until = saving_until or now + args.save_s
        warned_seen = len(disp.signalled)
        if saving_until and now >= saving_until and job.state == RUNNING:
            saving_until = 0.0
            upd = pb.JobStatusUpdate(
                job_id=job.job_id,
                kind=pb.JobStatusUpdate.KIND_EXITED,
                restart_count=job.restart_count,
                checkpoint_time=now,
            )
            await cluster.report_status(
                pb.ReportJobStatusRequest(node=job.batch_host, updates=[upd])
            )
        if job.state != RUNNING:
            saving_until = 0.0
            await cluster.schedule_pass()
        while cluster._tasks:
            await asyncio.gather(*list(cluster._tasks))
        for i in job.interruptions[seen:]:  # the work it lost was not useful after all
            useful_node_s -= i.lost_s * run_nodes
        seen = len(job.interruptions)
        if job.state == RUNNING:
            run_nodes = len(job.allocations)
            if now - job.start_time >= args.load_s:
                useful_node_s += args.tick_s * run_nodes
        clock.advance(args.tick_s)
    end = clock()
    items = list(job.interruptions)
    load = args.load_s * sum(1 for i in items if i.next_start)
    figures = ettr(
        job.first_start_time,
        0,
        [Interrupted(i.time, i.lost_s, i.next_start) for i in items],
        end,
    )
    useful = max(0.0, figures.useful_s - load)
    # from each failure (not ctld's detection: the node's last heartbeat) to useful work
    overheads = [
        (i.next_start - i.time) + args.load_s + (args.timeout_s if i.cause == "node_fail" else 0.0)
        for i in items
        if i.next_start
    ]
    cluster.store.close()
    return Outcome(
        ettr=useful / figures.wall_s,
        goodput=useful_node_s / (nodes * figures.wall_s),
        interruptions=len(items),
        overhead_s=overheads,
        lost_s=[i.lost_s for i in items],
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--days", type=float, default=7.0, help="virtual days per run")
    p.add_argument("--nodes", type=int, default=8, help="the job's nodes (its maximum)")
    p.add_argument("--min-fraction", type=float, default=0.75, help="elastic minimum / max")
    p.add_argument("--mtbf-node-h", type=float, default=4.0, help="node-hours per failure")
    p.add_argument("--repair-h", type=float, default=2.0, help="mean time to repair, hours")
    p.add_argument("--checkpoint-min", type=float, default=10.0, help="minutes per checkpoint")
    p.add_argument("--load-s", type=float, default=30.0, help="checkpoint load at a restart")
    p.add_argument("--save-s", type=float, default=15.0, help="a warned job's save")
    p.add_argument("--timeout-s", type=float, default=60.0, help="heartbeat timeout")
    p.add_argument("--tick-s", type=float, default=15.0, help="heartbeat interval, a tick")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    args = p.parse_args()
    wanted = args.scenarios.split(",")
    print(
        f"{args.days:g} virtual days, a {args.nodes}-node job, one failure per "
        f"{args.mtbf_node_h:g} node-hours, repair {args.repair_h:g} h, checkpoint every "
        f"{args.checkpoint_min:g} min, load {args.load_s:g} s, heartbeat "
        f"{args.tick_s:g} s / timeout {args.timeout_s:g} s; "
        f"{args.seeds} seed(s)\n"
    )
    print(
        "| scenario | ETTR | goodput | interruptions | restart overhead, s (mean / max) "
        "| lost per interruption, s (mean) |"
    )
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for sc in SCENARIOS:
            if sc.name not in wanted:
                continue
            outs = [
                asyncio.run(play(sc, args, seed, f"sqlite:///{tmp}/{sc.name}-{seed}.db"))
                for seed in range(args.seeds)
            ]
            over = [o for out in outs for o in out.overhead_s]
            lost = [x for out in outs for x in out.lost_s]
            print(
                f"| {sc.name} | {statistics.mean(o.ettr for o in outs):.1%} "
                f"| {statistics.mean(o.goodput for o in outs):.1%} "
                f"| {statistics.mean(o.interruptions for o in outs):.1f} "
                f"| {statistics.mean(over or [0]):.0f} / {max(over or [0]):.0f} "
                f"| {statistics.mean(lost or [0]):.0f} |"
            )


if __name__ == "__main__":
    main()
