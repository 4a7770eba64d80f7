"""Injected node failures on a local cluster: detection, time to resume, jobs run twice.

    .venv/bin/python -m bench.node_failures --rounds 21

Each round submits one job running examples/train-checkpoint.py (--requeue), waits for
it to take a few steps, then injects one failure on its node, cycling through:

- ``node dies``: noded and every process of its jobs get SIGKILL (a power loss);
- ``noded crash``: only noded gets SIGKILL, the training runs on; the node's noded is
  started again after the requeue (its stale copy must be killed: fencing);
- ``partition``: the node's link goes down (netns clusters, root only), healed after
  the requeue; without namespaces this mode is skipped.

It measures the time from the failure to the node being DOWN, and to the requeued
job's first step after resume (its steps.log line, which the script writes after
loading the checkpoint), then waits for the job to complete. At the end every job is
checked: found once in sacct (acknowledged / found / duplicated), and run twice if
any copy wrote a step after a later run had begun. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from corral.localcluster.netns import available as netns_available
from corral.testing import LocalCluster, wait_for
from corral.testing.cluster import ClusterFactory

TRAIN = Path(__file__).resolve().parents[1] / "examples" / "train-checkpoint.py"
BIN = Path(sys.executable).parent


class Bench:
    def __init__(self, cluster: LocalCluster, work: Path) -> None:
        self.c = cluster
        self.work = work
        self.env = cluster.env()

    def run(self, *argv: str) -> str:
        proc = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return proc.stdout

    def job(self, job_id: str) -> dict[str, Any]:
        jobs = self.c.client().call("GetJobs", {"filter": {"jobIds": [job_id]}})["jobs"]
        return dict(jobs[0])

    def node(self, name: str) -> dict[str, Any]:
        return dict(self.c.client().call("GetNodes", {"names": [name]})["nodes"][0])

    def steps(self, job_id: str) -> list[dict[str, str]]:
        path = self.c.state_dir / "checkpoints" / job_id / "steps.log"
        try:
            text = path.read_text()
        except OSError:
            return []
        return [dict(p.split("=", 1) for p in line.split()) for line in text.splitlines() if line]


def ran_twice(log: list[dict[str, str]]) -> bool:
    first: dict[int, int] = {}
    for i, e in enumerate(log):
        first.setdefault(int(e["run"]), i)
    return any(int(e["run"]) < run for run, start in first.items() for e in log[start:])


def one_round(b: Bench, mode: str, steps: int) -> dict[str, Any]:
    job_id = b.run(
        "sbatch",
        "--parsable",
        "--requeue",
        "-o",
        "train-%j.out",
        "--wrap",
        f"exec python3 {TRAIN} --steps {steps} --step-time 0.2",
    ).strip()
    host = wait_for(lambda: b.job(job_id).get("batchHost"), 60, "the job to start")
    index = b.c.node_names.index(host)
    wait_for(lambda: len(b.steps(job_id)) >= 3, 60, "three steps")
    failed_wall, failed = time.time(), time.monotonic()
    if mode == "node dies":
        b.c.kill_node(index, with_jobs=True)
    elif mode == "noded crash":
        b.c.kill_node(index, with_jobs=False)
    else:
        b.c.cut_node(index)
    wait_for(lambda: b.node(host).get("state") == "NODE_STATE_DOWN", 120, "DOWN")
    detect_s = time.monotonic() - failed
    first = wait_for(
        lambda: next((e for e in b.steps(job_id) if e["run"] != "0"), None), 120, "the resume"
    )
    resume_s = float(first["time"]) - failed_wall
    # the node returns (fenced), the job completes elsewhere
    if mode == "partition":
        b.c.cut_node(index, up=True)
    else:
        b.c.start_node(index)
    wait_for(lambda: b.node(host).get("state") == "NODE_STATE_IDLE", 60, "the node back")
    wait_for(lambda: b.job(job_id).get("state") == "JOB_STATE_COMPLETED", 180, "COMPLETED")
    return {"job": job_id, "mode": mode, "detect_s": detect_s, "resume_s": resume_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--interval", type=float, default=1.0, help="heartbeat.interval_s")
    parser.add_argument("--timeout", type=float, default=5.0, help="heartbeat.timeout_s")
    parser.add_argument("--steps", type=int, default=40, help="training steps per job")
    parser.add_argument("--json", default="", help="also write the rounds here")
    args = parser.parse_args()

    factory = ClusterFactory(prefix="corral-failbench-")
    factory.keep = bool(os.environ.get("CORRAL_BENCH_KEEP"))
    netns = netns_available()[0]
    modes = ["node dies", "noded crash"] + (["partition"] if netns else [])
    state = factory.base / "cluster0"  # the factory's first cluster: its checkpoints
    work = factory.base / "work"
    work.mkdir()
    rounds: list[dict[str, Any]] = []
    try:
        cluster = factory(
            nodes=3,
            gpus_per_node=0,
            heartbeat_interval_s=args.interval,
            heartbeat_timeout_s=args.timeout,
            noded_config=f'checkpoint_dir = "{state / "checkpoints"}"',
            controller_config="checkpoint_cleanup = false",  # the rounds read them after
            isolation="netns" if netns else "loopback",
        )
        b = Bench(cluster, work)
        for i in range(args.rounds):
            r = one_round(b, modes[i % len(modes)], args.steps)
            rounds.append(r)
            print(
                f"round {i + 1}: {r['mode']}: DOWN after {r['detect_s']:.2f} s, "
                f"first step after resume {r['resume_s']:.2f} s",
                file=sys.stderr,
            )
        acct = b.run("sacct", "-X", "-n", "-P", "-o", "JobID,State")
        found = [line.split("|") for line in acct.splitlines() if line]
        ids = [j for j, _ in found]
        acked = [r["job"] for r in rounds]
        twice = [r["job"] for r in rounds if ran_twice(b.steps(r["job"]))]
        completed = sum(1 for _, s in found if s == "COMPLETED")
    finally:
        factory.close(logs=False)
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, indent=1))
    print_table(args, rounds, acked, ids, twice, completed)
    return 0


def print_table(
    args: Any,
    rounds: list[dict[str, Any]],
    acked: list[str],
    ids: list[str],
    twice: list[str],
    completed: int,
) -> None:
    def stats(key: str, mode: str | None = None) -> str:
        xs = [r[key] for r in rounds if mode is None or r["mode"] == mode]
        if not xs:
            return "-"
        return f"{statistics.median(xs):.2f} / {max(xs):.2f}"

    print(
        f"heartbeat interval {args.interval:g} s, timeout {args.timeout:g} s; "
        f"{len(rounds)} injected node failures\n"
    )
    print("| acknowledged | found | duplicated | completed | run twice |")
    print("|---|---|---|---|---|")
    dup = len(ids) - len(set(ids))
    found = len(set(acked) & set(ids))
    print(f"| {len(acked)} | {found} | {dup} | {completed} | {len(twice)} |\n")
    print("| failure | rounds | to DOWN, s (median / max) | to first step after resume, s |")
    print("|---|---|---|---|")
    for mode in sorted({r["mode"] for r in rounds}):
        n = sum(1 for r in rounds if r["mode"] == mode)
        print(f"| {mode} | {n} | {stats('detect_s', mode)} | {stats('resume_s', mode)} |")
    print(f"| all | {len(rounds)} | {stats('detect_s')} | {stats('resume_s')} |")


if __name__ == "__main__":
    sys.exit(main())
