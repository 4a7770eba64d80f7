"""``python bench/ctld_probe.py -f CONFIG --ready-file F``: ctld with counters for bench/.

The same ctld as ``python -m ctld`` (its ``main``), plus read-only instrumentation:

* SIGUSR2 writes ``<state>/run/ctld.stats.json``: the store's group-commit counters
  (``Store.commits``/``Store.requests``, which ctld keeps but does not expose), the
  scheduler's pass count and the time spent in its synchronous parts (snapshot and
  plan), and the number of jobs in memory.
* When ``<state>/bench-probe.json`` says ``{"cprofile": PATH}``, ctld runs under
  cProfile and dumps its stats to PATH when it exits (on SIGTERM, as usual);
  ``{"switchinterval": S}`` sets ``sys.setswitchinterval(S)`` (a GIL experiment);
  ``{"log_level": "WARNING"}`` passes ``--log-level`` (a logging-cost experiment).

Without options nothing here changes what ctld does; the wrappers only count and time.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ctld.__main__ import main
from ctld.control import cluster as cluster_mod
from ctld.planning import scheduling as scheduling_mod
from ctld.storage import store as store_mod

_stores: list[store_mod.Store] = []
_clusters: list[cluster_mod.Cluster] = []
# wall and CPU (the loop thread's: what other processes took from it excluded)
_timing = {"snapshot_s": 0.0, "plan_s": 0.0, "snapshot_cpu_s": 0.0, "plan_cpu_s": 0.0}
_timing["snapshot_calls"] = 0
_seq = [0]


def _state_dir(argv: list[str]) -> Path:
    for i, arg in enumerate(argv):
        if arg in ("-f", "--config") and i + 1 < len(argv):
            return Path(argv[i + 1]).resolve().parent
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1]).resolve().parent
    return Path(os.environ.get("CORRAL_CONF", "corral.toml")).resolve().parent


def _install() -> None:
    orig_open = store_mod.Store.open

    def open_(self: store_mod.Store) -> None:
        _stores.append(self)
        orig_open(self)

    store_mod.Store.open = open_  # type: ignore[method-assign]

    orig_init = cluster_mod.Cluster.__init__

    def init(self: cluster_mod.Cluster, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        _clusters.append(self)

    cluster_mod.Cluster.__init__ = init  # type: ignore[method-assign]

    orig_snapshot = cluster_mod.Cluster.snapshot

    def snapshot(self: cluster_mod.Cluster) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return orig_snapshot(self)
        finally:
            _timing["snapshot_s"] += time.perf_counter() - t0
            _timing["snapshot_cpu_s"] += time.thread_time() - c0
            _timing["snapshot_calls"] += 1

    cluster_mod.Cluster.snapshot = snapshot  # type: ignore[method-assign]

    orig_schedule = scheduling_mod.schedule

    def schedule(snap: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return orig_schedule(snap)
        finally:
            _timing["plan_s"] += time.perf_counter() - t0
            _timing["plan_cpu_s"] += time.thread_time() - c0

    scheduling_mod.schedule = schedule


def _stats_writer(path: Path) -> Any:
    def handler(_signum: int, _frame: Any) -> None:
        _seq[0] += 1
        store = _stores[0] if _stores else None
        cl = _clusters[0] if _clusters else None
        data = {
            "seq": _seq[0],
            "time": time.time(),
            "commits": store.commits if store else None,
            "requests": store.requests if store else None,
            "passes": cl.passes if cl else None,
            "jobs_in_memory": len(cl.jobs) if cl else None,
            **_timing,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    return handler


def run() -> int:
    argv = sys.argv[1:]
    state = _state_dir(argv)
    _install()
    signal.signal(signal.SIGUSR2, _stats_writer(state / "run" / "ctld.stats.json"))
    opts: dict[str, Any] = {}
    probe_file = state / "bench-probe.json"
    if probe_file.exists():
        opts = json.loads(probe_file.read_text())
    if opts.get("log_level"):
        argv = [*argv, "--log-level", str(opts["log_level"])]  # logging-cost experiments
    if opts.get("switchinterval"):
        sys.setswitchinterval(float(opts["switchinterval"]))  # GIL hand-over experiments
    if opts.get("cprofile"):
        import cProfile

        prof = cProfile.Profile()
        try:
            return prof.runcall(main, argv)
        finally:
            prof.dump_stats(opts["cprofile"])
    return main(argv)


if __name__ == "__main__":
    sys.exit(run())
