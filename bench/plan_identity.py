"""Plan identity: the scheduling core decides exactly what it decided before a refactor.

Dumps, one JSON line per case, what ``ctld.sched`` decides on fixed inputs, so that two
source trees can be compared byte for byte:

- ``sim:POLICY``: a replay of the first ``--jobs`` jobs of an SWF trace (KTH-SP2 by
  default) through ``ctld.sim``: every job's start, end and first forecast, and a
  digest of every plan the replay asked for (full passes and starts at submit alike);
- ``pass:NAME``: the whole plan of bench/sched_pass.py's snapshots (1,000 nodes x 8
  GPUs, 10k pending: half busy under ctld's and the core's settings, and all busy);
- ``mixed:SEED``: the plans of small seeded random snapshots built to reach every part
  of the core: each placement policy, shards, GPU types, advance reservations,
  preemption and claims, accounting and per-user QOS limits, -w/-x, --exclusive, down
  or drained nodes and partitions, held jobs, the starvation guard, ``max_job_test``,
  stacked forecasts, predictions, FCFS.

A plan is dumped with its dicts in the order the core filled them, so even that must
match. Run it on both trees and compare:

    .venv/bin/python bench/plan_identity.py against /tmp/base/src   # both trees, then compare
    .venv/bin/python bench/plan_identity.py dump OUT.jsonl [--jobs 5000] [--mixed 1000]
    .venv/bin/python bench/plan_identity.py compare A.jsonl B.jsonl

``against SRC`` runs ``dump`` twice, in fresh interpreters: once with ``SRC`` (another
tree's src/, e.g. from ``git archive BASE | tar -x -C /tmp/base``) first on the path,
once with this tree's; the inputs are built by this file both times.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))  # bench.sched_pass; after src/, which may be another tree's
KTH = Path("/work/shared/traces/swf/KTH-SP2-1996-2.1-cln.swf.gz")
SIM_POLICIES = ("corral", "easy", "conservative", "easy-sjbf", "easy++", "fcfs", "corral-stacked")


def plan_json(plan: Any) -> str:
    """A plan as JSON, its dicts in the order the core filled them."""
    return json.dumps(dataclasses.asdict(plan), separators=(",", ":"))


# ------------------------------------------------------------------ the replay


def sim_cases(trace: Path, jobs: int, policies: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    from ctld.sched import quick
    from ctld.sim import engine, swf

    loaded = swf.load(trace, jobs)
    procs = loaded.max_procs
    for policy in policies:
        digest = hashlib.sha256()
        passes = [0]

        def recording(
            real: Callable[[Any], Any], digest: Any = digest, passes: list[int] = passes
        ) -> Callable[[Any], Any]:
            def schedule(snapshot: Any) -> Any:
                plan = real(snapshot)
                digest.update(plan_json(plan).encode())
                passes[0] += 1
                return plan

            return schedule

        saved = (engine.schedule, quick.schedule)  # type: ignore[attr-defined]
        engine.schedule = recording(saved[0])  # type: ignore[attr-defined]
        quick.schedule = recording(saved[1])  # type: ignore[attr-defined]
        try:
            result = engine.replay(loaded.jobs, procs, policy)
        finally:
            engine.schedule, quick.schedule = saved  # type: ignore[attr-defined]
        outcomes = sorted(
            (o.job.job_id, o.start, o.end, o.first_forecast, o.forecast_position)
            for o in result.outcomes
        )
        # one pool of processors: a start's "nodes" are that pool, so its time is all
        yield {
            "case": f"sim:{policy}",
            "jobs": len(outcomes),
            "passes": passes[0],
            "plans_sha256": digest.hexdigest(),
            "outcomes": outcomes,
        }


# ------------------------------------------------------------------ 10k pending


def pass_cases() -> Iterator[dict[str, Any]]:
    from bench import sched_pass
    from ctld.sched import Settings, schedule

    for name, snap in (
        (
            "half-busy-ctld",
            dataclasses.replace(
                sched_pass.make_snapshot(10_000), settings=sched_pass.ctld_settings()
            ),
        ),
        (
            "half-busy-core",
            dataclasses.replace(sched_pass.make_snapshot(10_000), settings=Settings()),
        ),
        (
            "all-busy-ctld",
            dataclasses.replace(
                sched_pass.make_full_snapshot(10_000), settings=sched_pass.ctld_settings()
            ),
        ),
    ):
        yield {"case": f"pass:{name}", "plan": json.loads(plan_json(schedule(snap)))}


# ------------------------------------------------------------------ mixed snapshots


def mixed_snapshot(seed: int) -> Any:
    """A small random snapshot, consistent as ctld builds them (free = total - running)."""
    from ctld.sched import (
        INFINITY,
        Claim,
        JobRequest,
        NodeView,
        PartitionView,
        Placement,
        QosView,
        ReservationView,
        RunningView,
        Settings,
        Snapshot,
    )
    from ctld.sched.model import AssocLimit, LimitSet, QosLimit, TresLimit

    rng = random.Random(seed)
    now = 1000.0
    users, accounts = ("u1", "u2", "u3"), ("a1", "a2")
    qos_names = ("low", "normal", "high")
    nodes: list[Any] = []
    running: list[Any] = []
    job_id = 10_000
    for i in range(rng.randint(2, 10)):
        name = f"n{i:02d}"
        gpus = rng.choice((0, 2, 4, 8))
        shards = rng.choice((0, 0, 4)) if gpus else 0
        cpus, mem = rng.choice((8, 16, 32)), rng.choice((1000, 4000))
        free_cpus, free_mem, free_gpus = cpus, mem, list(range(gpus))
        used_shards: dict[int, int] = {}
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
            c = rng.randint(1, max(1, free_cpus // 2))
            m = rng.randint(0, free_mem // 2)
            if c > free_cpus:
                break
            g: tuple[int, ...] = ()
            k = 0
            if shards and rng.random() < 0.4:
                # shards of one GPU: a shared one with room left, or a free one
                room = [x for x in free_gpus if used_shards.get(x, 0) < shards]
                if room:
                    k = rng.randint(1, shards - used_shards.get(room[0], 0))
                    used_shards[room[0]] = used_shards.get(room[0], 0) + k
                    g = (room[0],)
            elif rng.random() < 0.7:
                g = tuple([x for x in free_gpus if x not in used_shards][: rng.randint(1, 2)])
            free_cpus -= c
            free_mem -= m
            if not k:
                free_gpus = [x for x in free_gpus if x not in g]
            job_id += 1
            start = now - rng.randint(0, 500)
            limit = rng.choice((300, 900, 3600, -1))
            running.append(
                RunningView(
                    job_id,
                    INFINITY if limit < 0 else start + limit,
                    (Placement(name, c, m, g, k),),
                    user=rng.choice(users),
                    qos=rng.choice(qos_names),
                    start_time=start,
                    predicted_s=rng.choice((0.0, 120.0, 600.0)),
                    account=rng.choice(accounts),
                    priority=rng.randint(0, 100),
                    preemptable=rng.random() < 0.9,
                )
            )
        shared = set(used_shards)
        nodes.append(
            NodeView(
                name,
                cpus,
                mem,
                gpus,
                free_cpus,
                free_mem,
                tuple(x for x in free_gpus if x not in shared),
                gpu_type=rng.choice(("", "a100", "h100")) if gpus else "",
                schedulable=rng.random() < 0.85,
                idle=free_cpus == cpus and not shared and len(free_gpus) == gpus,
                shards_per_gpu=shards,
                shards_used=tuple(sorted(used_shards.items())),
            )
        )
    names = tuple(n.name for n in nodes)
    half = names[: max(1, len(names) // 2)]
    partitions = [
        PartitionView("p", names),
        PartitionView("q", half, max_nodes=rng.choice((0, 1, 2)), max_time_s=rng.choice((-1, 600))),
        PartitionView("d", names[-1:], state=rng.choice(("DOWN", "DRAIN", "INACTIVE", "UP"))),
    ]
    reservations = []
    if rng.random() < 0.4:
        start = now + rng.choice((-100, 0, 200, 2000))
        reservations.append(
            ReservationView("r1", start, start + rng.choice((500, 5000)), half, users=("u1",))
        )
    qos = (
        QosView("high", 100, preempts=("low",), mode="requeue"),
        QosView("low", 0, mode=rng.choice(("requeue", "cancel", "off"))),
        QosView("normal", 10, preempts=("low",) if rng.random() < 0.3 else (), mode="requeue"),
    )
    pending = []
    for j in range(1, rng.randint(3, 40) + 1):
        gpus = rng.choice((0, 0, 1, 2, 4, 8))
        pending.append(
            JobRequest(
                j,
                tuple(rng.sample(("p", "q", "d"), rng.choice((1, 1, 2)))),
                nodes_min=rng.choice((1, 1, 1, 2, 3)),
                ntasks=rng.choice((1, 1, 2, 4)),
                cpus_per_task=rng.choice((1, 2, 4)),
                mem_per_node_mb=rng.choice((0, 100, 800)),
                gpus_per_node=gpus,
                shards_per_node=rng.choice((0, 0, 0, 1, 2, 3)) if not gpus else 0,
                gpu_type=rng.choice(("", "", "a100")),
                exclusive=rng.random() < 0.1,
                nodelist=(rng.choice(names),) if rng.random() < 0.1 else (),
                exclude=(rng.choice(names),) if rng.random() < 0.1 else (),
                time_limit_s=rng.choice((60, 300, 600, 3600, -1)),
                priority=rng.randint(0, 1000),
                blocked_reason="JobHeldUser" if rng.random() < 0.05 else "",
                user=rng.choice(users),
                account=rng.choice(accounts),
                qos=rng.choice(("", "normal", "low", "high")),
                reservation="r1" if reservations and rng.random() < 0.2 else "",
                submit_time=now - rng.randint(0, 5000),
                eligible_time=rng.choice((0.0, 0.0, now - 100)),
                predicted_s=rng.choice((0, 0, 30, 200)),
            )
        )
    pending.sort(key=lambda r: (-r.priority, r.submit_time, r.job_id))
    claims = []
    lows = [r for r in running if r.qos == "low"]
    highs = [r for r in pending if r.qos == "high"]
    if lows and highs and rng.random() < 0.3:
        victim = lows[0]
        p = victim.placements[0]
        claims.append(Claim(highs[0].job_id, (p,), (victim.job_id,), "p"))
    limits = LimitSet()
    if rng.random() < 0.3:
        limits = LimitSet(
            assocs=(
                AssocLimit("root/", "", grp=TresLimit(cpus=rng.choice((-1, 40)))),
                AssocLimit("a1/", "root/", grp_jobs=rng.choice((-1, 3))),
                AssocLimit("a1/u1", "a1/", max_jobs=rng.choice((-1, 1)), max_wall_s=3600),
            ),
            qos=(
                QosLimit("normal", per_user=TresLimit(gpus=rng.choice((-1, 2)))),
                QosLimit("low", grp_jobs=rng.choice((-1, 2)), max_wall_s=rng.choice((-1, 600))),
            ),
        )
    settings = Settings(
        backfill=rng.random() < 0.85,
        reserve_depth=rng.choice((0, 1, 1, 2, 5)),
        forecast_depth=rng.choice((0, 2, 100)),
        placement=rng.choice(("pack", "firstfit", "frag", "fgd", "random")),
        predict=rng.random() < 0.5,
        backfill_order=rng.choice(("priority", "shortest")),
        max_job_test=rng.choice((0, 0, 2, 5)),
        starve_after_s=rng.choice((0.0, 0.0, 1000.0)),
        qos_max_jobs_per_user=rng.choice(((), (("normal", 1),), (("high", 2),))),
        stack_forecasts=rng.choice((0, 0, 3)),
    )
    return Snapshot(
        seed,
        now,
        tuple(nodes),
        tuple(partitions),
        tuple(pending),
        tuple(running),
        tuple(reservations),
        settings,
        limits=limits,
        qos=qos,
        claims=tuple(claims),
    )


def mixed_cases(count: int) -> Iterator[dict[str, Any]]:
    from ctld.sched import schedule

    for seed in range(count):
        plan = schedule(mixed_snapshot(seed))
        yield {"case": f"mixed:{seed}", "plan": json.loads(plan_json(plan))}


# ------------------------------------------------------------------ the commands


def dump(out: Path, trace: Path, jobs: int, policies: tuple[str, ...], mixed: int) -> None:
    import ctld.sched

    began = time.monotonic()
    with out.open("w") as f:
        cases = [mixed_cases(mixed), pass_cases()]
        if jobs and policies:
            cases.append(sim_cases(trace, jobs, policies))
        for source in cases:
            for case in source:
                f.write(json.dumps(case, separators=(",", ":")) + "\n")
    took = time.monotonic() - began
    print(f"{out}: dumped with {Path(ctld.sched.__file__).parent} in {took:.0f} s", file=sys.stderr)


def compare(a: Path, b: Path) -> int:
    left = [json.loads(line) for line in a.read_text().splitlines()]
    right = [json.loads(line) for line in b.read_text().splitlines()]
    if [c["case"] for c in left] != [c["case"] for c in right]:
        print("the two dumps hold different cases: dumped with different options?")
        return 2
    differ = [x["case"] for x, y in zip(left, right, strict=True) if x != y]
    same_bytes = a.read_bytes() == b.read_bytes()
    for x, y in zip(left, right, strict=True):
        if x["case"] in differ[:5]:
            print(f"{x['case']} differs:\n  {json.dumps(x)[:600]}\n  {json.dumps(y)[:600]}")
    sims = [c for c in left if c["case"].startswith("sim:")]
    print(
        f"{len(left)} cases ({len(sims)} replays of {sims[0]['jobs'] if sims else 0} jobs, "
        f"{sum(c['passes'] for c in sims)} plans in them): {len(differ)} differ; "
        f"byte for byte {'identical' if same_bytes else 'NOT identical'}"
    )
    return 0 if same_bytes and not differ else 1


def against(src: Path, rest: list[str]) -> int:
    """Dump under ``src`` (another tree's src/) and under this tree, and compare."""
    outs = []
    with tempfile.TemporaryDirectory(prefix="plan-identity-") as tmp:
        for label, path in (("base", src.resolve()), ("this", REPO / "src")):
            out = Path(tmp) / f"{label}.jsonl"
            env = dict(os.environ, PYTHONPATH=f"{path}{os.pathsep}{REPO}")
            cmd = [sys.executable, str(Path(__file__).resolve()), "dump", str(out), *rest]
            subprocess.run(cmd, env=env, check=True)
            outs.append(out)
        return compare(*outs)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("dump", "against"):
        p = sub.add_parser(name)
        p.add_argument("path", type=Path, help="dump: the output file; against: the other src/")
        p.add_argument("--trace", type=Path, default=KTH)
        p.add_argument("--jobs", type=int, default=5000, help="replay the first N (0: no replay)")
        p.add_argument("--policy", action="append", help=f"default: {', '.join(SIM_POLICIES)}")
        p.add_argument("--mixed", type=int, default=1000, help="random snapshots")
    p = sub.add_parser("compare")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = ap.parse_args(argv)
    if args.command == "compare":
        return compare(args.a, args.b)
    policies = tuple(args.policy or SIM_POLICIES)
    if args.command == "dump":
        dump(args.path, args.trace, args.jobs, policies, args.mixed)
        return 0
    rest = ["--trace", str(args.trace), "--jobs", str(args.jobs), "--mixed", str(args.mixed)]
    for policy in policies:
        rest += ["--policy", policy]
    return against(args.path, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
