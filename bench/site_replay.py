"""The speed of ``corral sim --from-store``: a replay of a 100,000-job store.

Writes a synthetic site history (``ctld.sim.synthetic``: a lab cluster of 8-GPU nodes,
three accounts of four users, jobs of 1-8 GPUs and CPU-only ones arriving at a chosen
load of the GPUs, run times log-normal with a 1 h median under limits 1-4x as long)
into a real SQLite store, then times what the command does with it, apart: reading the
store (the history), and replaying it through ctld's scheduling core under the
config's policy, in CPU seconds. The figure is jobs replayed per CPU second.

    nice -n 19 .venv/bin/python bench/site_replay.py [--jobs 100000] [--nodes 64]
        [--load 0.9] [--store PATH] [--profile]

The history written is a quick stand-in (each job started on the first node with its
GPUs free at its submit): a store to be replayed, not one to compare the replay with.
"""

from __future__ import annotations

import argparse
import cProfile
import pathlib
import pstats
import tempfile
import time
import tomllib

from corral.config import parse_config
from ctld.sim import history as hist
from ctld.sim import site as sm
from ctld.sim import synthetic as syn
from ctld.sim.site_engine import SiteReplay
from ctld.sim.site_jobs import replay_jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--load", type=float, default=0.9, help="offered load of the GPUs")
    ap.add_argument("--store", help="keep the store here (default: a temporary file)")
    ap.add_argument("--placement", default="pack")
    ap.add_argument("--profile", action="store_true", help="the replay's top 15 functions")
    args = ap.parse_args()
    lab = syn.Lab(nodes=args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(args.store or f"{tmp}/store.db")
        url = f"sqlite:///{path}"
        if not path.exists():
            began = time.perf_counter()
            done = syn.naive_history(lab, syn.jobs(lab, args.jobs, load=args.load))
            syn.write_store(url, done)
            print(f"wrote {args.jobs:,} jobs in {time.perf_counter() - began:.1f} s: {path}")
        text = lab.config(url, f'[scheduler]\nplacement = "{args.placement}"\n')
        config = parse_config(tomllib.loads(text))
        cpu = time.process_time()
        history = hist.read(hist.open_engine(url), None, None)
        read_s = time.process_time() - cpu
        site = sm.running_site(config, history.accounting)
        site.nodes = sm.node_sizes(config, history.jobs)
        jobs = replay_jobs(history, {})
        prepared_s = time.process_time() - cpu - read_s
        replay = SiteReplay(site, history, jobs)
        began = time.process_time()
        profile = cProfile.Profile() if args.profile else None
        if profile:
            profile.enable()
        outcomes = replay.run()
        if profile:
            profile.disable()
        replay_s = time.process_time() - began
        started = sum(1 for o in outcomes.values() if o.start)
        span_days = (history.end - history.start) / 86400
        print(
            f"{len(jobs):,} jobs ({span_days:.0f} days of history) on {args.nodes} nodes x "
            f"{lab.gpus} GPUs, load {args.load}, placement {args.placement}: read "
            f"{read_s:.1f} s CPU, prepared {prepared_s:.1f} s, replayed {replay_s:.1f} s CPU "
            f"({replay.passes:,} passes, {started:,} started): "
            f"{len(jobs) / replay_s:,.0f} jobs per CPU second "
            f"({len(jobs) / (read_s + prepared_s + replay_s):,.0f} with the read)"
        )
        if profile:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(15)


if __name__ == "__main__":
    main()
