"""One run beside Slurm: corral's commands and real Slurm 22.05's, measured in the same run.

    nice -n 19 .venv/bin/python -m bench.side_by_side            # the full run (as root)
    nice -n 19 .venv/bin/python -m bench.side_by_side --quick    # a trial: fewer samples
    nice -n 19 .venv/bin/python -m bench.side_by_side --scale    # + bench.scale (corral only)
    nice -n 19 .venv/bin/python -m bench.side_by_side --no-slurm # corral alone
    .venv/bin/python -m bench.side_by_side --render bench/results/side-<stamp>/side.json

Real Slurm is the anchors' single-host cluster (/work/shared/anchors/slurm: one node of
64 CPUs, slurmdbd accounting): ``up.sh --clean`` starts it (root; it installs nothing when
the packages are there), the anchors' ``bench.py`` measures it with the system's
commands on PATH, ``down.sh --cancel`` stops it. Then a corral LocalCluster of the same
shape (one node, 64 CPUs) is measured by the same ``bench.py`` with corral's commands
first on PATH, so both get the same calls, counts and job shapes. What bench.py does not
time (one ``sbatch``, ``scancel ID``, ``srun`` inside an allocation, the interpreter's
floor) is timed here the same way for both. Slurm is stopped before corral's turn: the
two never share the machine. The tables (Markdown) go to stdout and to
bench/results/side-<stamp>/tables.md, with bench.py's JSON for each beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import PYTHON, RESULTS, Table, bench_cluster, log, summary

ANCHORS = Path(os.environ.get("CORRAL_SLURM_ANCHORS", "/work/shared/anchors/slurm"))
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BENCH_JOB = "abench"  # bench.py's job name (its default)
EXTRA_JOB = "sbs-extra"  # the jobs this module submits itself
SLURM = "Slurm 22.05"


@dataclass(frozen=True)
class Settings:
    reps: int  # bench.py: repetitions of each submit configuration
    n_submit: int  # bench.py: sbatch calls per repetition
    n_latency: int  # bench.py: submit-to-start probes
    n_srun: int  # bench.py: `srun -n1 true` allocating
    query_reps: int  # bench.py: calls of each query command per queue depth
    levels: tuple[int, ...]  # pending jobs at which the queries are timed
    runs: int  # the calls timed here (floor, sbatch, scancel, srun in an allocation)


FULL = Settings(
    reps=3, n_submit=300, n_latency=20, n_srun=20, query_reps=10, levels=(1000, 5000), runs=20
)
QUICK = Settings(reps=1, n_submit=30, n_latency=5, n_srun=5, query_reps=3, levels=(300,), runs=5)


# ---------------------------------------------------------------- measuring


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    return time.perf_counter() - t0, proc.returncode, proc.stdout, proc.stderr


def _samples(
    argv: list[str], env: dict[str, str], cwd: Path, runs: int, before: Callable[[], None] | None
) -> dict[str, Any]:
    """Wall times of ``runs`` calls after one warm-up; the first error ends it."""
    walls: list[float] = []
    for i in range(runs + 1):
        if before is not None:
            before()
        dt, rc, _, err = _timed(argv, env, cwd)
        if rc != 0:
            return {"error": f"rc={rc}: {err.strip()[-160:]}"}
        if i:
            walls.append(dt)
    return summary(walls) | {"values": walls}


def _sbatch(env: dict[str, str], cwd: Path, *extra: str, wrap: str = "true") -> str:
    argv = ["sbatch", "--parsable", "-J", EXTRA_JOB, "-o", "/dev/null", "-D", str(cwd)]
    _, rc, out, err = _timed([*argv, *extra, "--wrap", wrap], env, cwd)
    if rc != 0:
        raise RuntimeError(f"sbatch failed (rc={rc}): {err.strip()}")
    return out.strip().split(";")[0]


def _poll(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def _queue(env: dict[str, str], cwd: Path, *args: str) -> str:
    return _timed(["squeue", "-h", *args], env, cwd)[2]


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def floor(runs: int) -> dict[str, Any]:
    """The interpreter corral's commands run on (the venv's), started and ended."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cwd = Path.cwd()
    return {
        "python3 -c pass": _samples([PYTHON, "-c", "pass"], env, cwd, runs, None),
        "python3 -I -S -c pass": _samples([PYTHON, "-I", "-S", "-c", "pass"], env, cwd, runs, None),
    }


def extras(env: dict[str, str], cwd: Path, s: Settings) -> dict[str, Any]:
    """The calls bench.py does not time, the same way for both clusters."""
    out: dict[str, Any] = {}
    log("  sbatch --wrap true, one call")
    out["sbatch"] = _samples(
        ["sbatch", "-J", EXTRA_JOB, "-o", "/dev/null", "-D", str(cwd), "--wrap", "true"],
        env,
        cwd,
        s.runs,
        None,
    )
    held: list[str] = []

    def submit_held() -> None:
        held.append(_sbatch(env, cwd, "--hold"))

    # scancel of one held job, a fresh one each call: the argv names the last one submitted
    log("  scancel ID of a held job")
    walls: list[float] = []
    error = ""
    for i in range(s.runs + 1):
        submit_held()
        dt, rc, _, err = _timed(["scancel", held[-1]], env, cwd)
        if rc != 0:
            error = f"rc={rc}: {err.strip()[-160:]}"
            break
        if i:
            walls.append(dt)
    out["scancel"] = {"error": error} if error else summary(walls) | {"values": walls}

    # srun inside an allocation: a batch job holds one CPU, srun joins it by SLURM_JOB_ID
    log("  srun -n1 true inside a running batch job")
    alloc = _sbatch(env, cwd, "-n1", wrap="sleep 3600")
    try:
        _poll(
            f"job {alloc} to run",
            lambda: _queue(env, cwd, "-j", alloc, "-o", "%T").strip() == "RUNNING",
            120,
        )
        inside = {**env, "SLURM_JOB_ID": alloc}
        out["srun_in_allocation"] = _samples(["srun", "-n1", "true"], inside, cwd, s.runs, None)
    finally:
        _timed(["scancel", "-n", EXTRA_JOB], env, cwd)
    _poll("this run's jobs to leave the queue", lambda: not _queue(env, cwd, "-n", EXTRA_JOB), 300)
    return out


def anchor_bench(
    env: dict[str, str], out: Path, s: Settings, ctld_pid: int | None
) -> dict[str, Any]:
    """The anchors' bench.py, run as a program with ``env``'s commands first on PATH."""
    argv = [
        "/usr/bin/python3",
        str(ANCHORS / "bench.py"),
        "--phases",
        "query,submit,latency,srun,sacct",
        "--reps",
        str(s.reps),
        "--n-submit",
        str(s.n_submit),
        "--n-latency",
        str(s.n_latency),
        "--n-srun",
        str(s.n_srun),
        "--query-reps",
        str(s.query_reps),
        "--pending-levels",
        ",".join(str(n) for n in s.levels),
        "--job-name",
        BENCH_JOB,
        "--out",
        str(out),
    ]
    if ctld_pid:
        argv += ["--ctld-pid", str(ctld_pid)]
    log(f"  {shlex.join(argv[1:])}")
    # bench.py logs its progress to stdout: ours stays the tables
    proc = subprocess.run(argv, env=env, cwd=out.parent, stdout=sys.stderr, check=False)
    path = out / "results-default.json"
    if not path.exists():
        return {"error": f"bench.py wrote no results (rc={proc.returncode})"}
    phases: dict[str, Any] = json.loads(path.read_text())["phases"]
    result = {key.split(":", 1)[1]: value for key, value in phases.items()}
    if proc.returncode != 0:
        result["error"] = f"bench.py ended with rc={proc.returncode} (see its log above)"
    return result


# ---------------------------------------------------------------- the two clusters


def slurm_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "SLURM_"))}
    env["PATH"] = SYSTEM_PATH  # never corral's commands of the same names
    return env


def measure_slurm(s: Settings, out: Path) -> dict[str, Any]:
    env = slurm_env()
    t0 = time.monotonic()
    log(f"slurm: {ANCHORS / 'up.sh'} --clean")
    up = subprocess.run(
        [str(ANCHORS / "up.sh"), "--clean"], env=env, stdout=sys.stderr, stderr=sys.stderr
    )
    if up.returncode != 0:
        _down(env)
        return {"error": f"up.sh failed (rc={up.returncode})"}
    result: dict[str, Any] = {"up_s": time.monotonic() - t0, "load": _load()}
    try:
        version = _timed(["sinfo", "-V"], env, out)[2].strip()
        result["version"] = version
        log(f"slurm: {version} is up in {result['up_s']:.1f} s")
        result["bench"] = anchor_bench(env, out / "slurm", s, None)
        result["extras"] = extras(env, out, s)
    finally:
        _down(env)
    result["elapsed_s"] = time.monotonic() - t0
    return result


def _down(env: dict[str, str]) -> None:
    log(f"slurm: {ANCHORS / 'down.sh'} --cancel")
    subprocess.run(
        [str(ANCHORS / "down.sh"), "--cancel"], env=env, stdout=sys.stderr, stderr=sys.stderr
    )


def measure_corral(s: Settings, out: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    result: dict[str, Any] = {"load": _load()}
    # the anchors' node: one host, 64 CPUs
    with bench_cluster("side", nodes=1, cpus_per_node=64) as cluster:
        env = cluster.env()
        # an installed corral has its bytecode: never time compiling it on every call
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for cmd in (["sbatch", "--version"], ["squeue"], ["sinfo"], ["scancel", "--version"]):
            _timed(cmd, env, out)  # writes the bytecode once
        result["bench"] = anchor_bench(env, out / "corral", s, cluster.ctld_pid)
        # the floor again right before the single calls: the aims compare with it
        result["floor"] = floor(s.runs)
        result["extras"] = extras(env, out, s)
    result["elapsed_s"] = time.monotonic() - t0
    return result


def measure_scale(args: argparse.Namespace) -> dict[str, Any]:
    """bench.scale as a program (corral only): its tables, as it prints them."""
    if args.quick:
        argv = [PYTHON, "-m", "bench.scale", "--quick"]
    else:
        pending = "1000,10000,50000" if args.scale_50k else "1000,10000"
        argv = [PYTHON, "-m", "bench.scale", "--nodes", "100,1000", "--pending", pending]
        argv += ["--probes", "20"]
    t0 = time.monotonic()
    log(f"scale: {shlex.join(argv[1:])}")
    proc = subprocess.run(
        argv,
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
    )
    text = proc.stdout
    if proc.returncode != 0:
        text += f"\n(bench.scale ended with rc={proc.returncode})\n"
    return {"argv": argv[1:], "text": text, "elapsed_s": time.monotonic() - t0}


# ---------------------------------------------------------------- tables


def _get(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _ms(stat: Any, key: str = "median") -> str:
    if not isinstance(stat, dict):
        return "n/a"
    if stat.get("error"):
        return "error"
    value = stat.get(key)
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def _ratio(a: Any, b: Any, key: str = "median", inverse: bool = False) -> str:
    try:
        x, y = float(a[key]), float(b[key])
    except (TypeError, KeyError, ValueError):
        return ""
    if inverse:
        x, y = y, x
    return f"{x / y:.2g}x" if y > 0 else ""


def _rate(stat: Any) -> str:
    if not isinstance(stat, dict) or stat.get("median") is None:
        return "n/a"
    return f"{stat['median']:.1f} jobs/s"


def _mib(kib: Any) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.0f} MiB"


def _levels(*benches: dict[str, Any]) -> list[int]:
    """The queue depths either system's query phase reached."""
    keys = {k for b in benches for k in _get(b, "query") or {} if k.startswith("pending_")}
    return sorted(int(k[8:]) for k in keys)


def tables(corral: dict[str, Any], slurm: dict[str, Any], fl: dict[str, Any]) -> list[Table]:
    cb, sb = corral.get("bench", {}), slurm.get("bench", {})
    cx, sx = corral.get("extras", {}), slurm.get("extras", {})
    levels = _levels(cb, sb)
    top = levels[-1] if levels else 0
    out: list[Table] = []

    commands = Table(
        "Commands, one call (wall time)",
        ["command", "corral p50", "corral p95", f"{SLURM} p50", f"{SLURM} p95", "corral / Slurm"],
    )
    commands.add(
        "`python3 -c pass` (the floor: corral's interpreter)",
        _ms(fl["python3 -c pass"]),
        _ms(fl["python3 -c pass"], "p95"),
        "",
        "",
        "",
    )

    def row(label: str, c: Any, s: Any) -> None:
        commands.add(label, _ms(c), _ms(c, "p95"), _ms(s), _ms(s, "p95"), _ratio(c, s))

    row("`sbatch --wrap true`", cx.get("sbatch"), sx.get("sbatch"))
    for level in levels:
        key = f"pending_{level}"
        what = "idle" if level == 0 else f"{level:,} pending"
        row(f"`squeue`, {what}", _get(cb, "query", key, "squeue"), _get(sb, "query", key, "squeue"))
    row(
        f'`squeue -h -o "%i %T"`, {top:,} pending',
        _get(cb, "query", f"pending_{top}", "squeue -h -o %i %T"),
        _get(sb, "query", f"pending_{top}", "squeue -h -o %i %T"),
    )
    for level in (0, top):
        key = f"pending_{level}"
        what = "idle" if level == 0 else f"{level:,} pending"
        row(f"`sinfo`, {what}", _get(cb, "query", key, "sinfo"), _get(sb, "query", key, "sinfo"))
    row("`scancel ID` (one held job)", cx.get("scancel"), sx.get("scancel"))
    row("`sacct -j ID`", _get(cb, "sacct", "sacct -j ID"), _get(sb, "sacct", "sacct -j ID"))
    crows = _get(cb, "sacct", "sacct -X -S today (all jobs)", "rows")
    srows = _get(sb, "sacct", "sacct -X -S today (all jobs)", "rows")
    row(
        f"`sacct -X -S 00:00` (the day's jobs: corral {crows}, Slurm {srows} rows)",
        _get(cb, "sacct", "sacct -X -S today (all jobs)"),
        _get(sb, "sacct", "sacct -X -S today (all jobs)"),
    )
    commands.notes.append(
        "the queries at each depth are bench.py's (`squeue` with the pending jobs held); "
        "one `sbatch`, `scancel` and the floor are timed by bench/side_by_side.py; "
        "corral's commands with their bytecode written (PYTHONDONTWRITEBYTECODE unset); "
        "`sacct -X`: Slurm's database keeps the day's jobs of earlier runs, corral's "
        "cluster is new, so their row counts differ"
    )
    out.append(commands)

    submit = Table("Submission and start", ["figure", "corral", SLURM, "corral / Slurm"])
    for mode, what in (("hold", "held"), ("run", "jobs run")):
        for par in (1, 2, 4):
            c = _get(cb, "submit", f"{mode}_par{par}", "jobs_per_s")
            s = _get(sb, "submit", f"{mode}_par{par}", "jobs_per_s")
            label = f"`sbatch` jobs/s, {par} submitter{'s' if par > 1 else ''}, {what}"
            submit.add(label, _rate(c), _rate(s), _ratio(c, s))
    for key, what in (("median", "p50"), ("p95", "p95")):
        c = _get(cb, "latency", "start_minus_sbatch_return_s")
        s = _get(sb, "latency", "start_minus_sbatch_return_s")
        submit.add(
            f"submit-to-start {what} (from sbatch's return)",
            _ms(c, key),
            _ms(s, key),
            _ratio(c, s, key),
        )
    submit.notes.append(
        "bench.py's submit phase: N sbatch processes per configuration, the median of the "
        "repetitions (corral / Slurm above 1: corral submits more); Slurm at its defaults "
        "(batch_sched_delay 3 s: its submit-to-start waits for it)"
    )
    out.append(submit)

    srun = Table(
        "srun (wall time of the command)",
        ["command", "corral p50", "corral p95", f"{SLURM} p50", f"{SLURM} p95", "corral / Slurm"],
    )
    floor_s = fl["python3 -I -S -c pass"]
    srun.add("`python3 -I -S -c pass` (the floor)", _ms(floor_s), _ms(floor_s, "p95"), "", "", "")
    c, s = _get(cb, "srun", "srun_n1_true_s"), _get(sb, "srun", "srun_n1_true_s")
    srun.add(
        "`srun -n1 true`, allocating", _ms(c), _ms(c, "p95"), _ms(s), _ms(s, "p95"), _ratio(c, s)
    )
    c, s = cx.get("srun_in_allocation"), sx.get("srun_in_allocation")
    srun.add(
        "`srun -n1 true`, in an allocation",
        _ms(c),
        _ms(c, "p95"),
        _ms(s),
        _ms(s, "p95"),
        _ratio(c, s),
    )
    srun.notes.append(
        "allocating: bench.py's srun phase; in an allocation: a running `sbatch --wrap "
        "'sleep 3600'` job, srun joining it by SLURM_JOB_ID"
    )
    out.append(srun)

    memory = Table("Controller memory (RSS)", ["pending jobs (held)", "ctld", "slurmctld", "ratio"])
    for level in levels:
        c = _get(cb, "query", f"pending_{level}", "rss_kib")
        s = _get(sb, "query", f"pending_{level}", "rss_kib")
        memory.add(f"{level:,}", _mib(c), _mib(s), f"{c / s:.2g}x" if c and s else "")
    c, s = _get(cb, "query", "rss_kib_after_cancel"), _get(sb, "query", "rss_kib_after_cancel")
    memory.add("0, after cancelling them", _mib(c), _mib(s), f"{c / s:.2g}x" if c and s else "")
    c, s = _get(cb, "query", "cancel_all_s"), _get(sb, "query", "cancel_all_s")
    memory.add(
        f"`scancel -n` of the {top:,} held jobs, until squeue shows none",
        "n/a" if c is None else f"{c:.1f} s",
        "n/a" if s is None else f"{s:.1f} s",
        "",
    )
    out.append(memory)
    out.append(aims(corral, slurm))
    return out


def aims(corral: dict[str, Any], slurm: dict[str, Any]) -> Table:
    """Issue 16's aims for the commands and srun, judged on this run's figures."""
    cb, sb = corral.get("bench", {}), slurm.get("bench", {})
    cx, sx = corral.get("extras", {}), slurm.get("extras", {})
    table = Table("Aims (issue 16), judged on this run", ["aim", "corral", "target", "verdict"])
    base = _get(corral, "floor", "python3 -c pass", "median")

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("met" if ok else "**missed**")

    for label, stat in (
        ("`sbatch --wrap true`", cx.get("sbatch")),
        ("`scancel ID`", cx.get("scancel")),
        ("`squeue`, idle queue", _get(cb, "query", "pending_0", "squeue")),
    ):
        value = _get(stat, "median")
        ok = None if value is None or not base else value <= 2 * base
        target = "n/a" if not base else f"2 x floor = {2 * base * 1000:.1f} ms"
        table.add(f"{label} within 2x of `python3 -c pass`", _ms(stat), target, verdict(ok))
    levels = _levels(cb, sb)
    level = next((n for n in levels if n >= 1000), levels[-1] if levels else 0)
    c = _get(cb, "query", f"pending_{level}", "squeue")
    s = _get(sb, "query", f"pending_{level}", "squeue")
    ok = None if not (c and s and "median" in c and "median" in s) else c["median"] <= s["median"]
    table.add(f"`squeue` at {level:,} pending no slower than Slurm's", _ms(c), _ms(s), verdict(ok))
    c = _get(cb, "submit", "hold_par4", "jobs_per_s")
    ok = None if c is None else c["median"] >= 150
    table.add("held `sbatch`, 4 submitters, >= 150 jobs/s", _rate(c), "150 jobs/s", verdict(ok))
    for label, cs, ss in (
        ("allocating", _get(cb, "srun", "srun_n1_true_s"), _get(sb, "srun", "srun_n1_true_s")),
        ("in an allocation", cx.get("srun_in_allocation"), sx.get("srun_in_allocation")),
    ):
        for key in ("median", "p95"):
            cv, sv = _get(cs, key), _get(ss, key)
            ok = None if cv is None or sv is None else cv <= sv
            what = "p50" if key == "median" else key
            table.add(
                f"`srun -n1 true` {label}, {what} <= Slurm's",
                _ms(cs, key),
                _ms(ss, key),
                verdict(ok),
            )
    c = _get(cb, "latency", "start_minus_sbatch_return_s")
    s = _get(sb, "latency", "start_minus_sbatch_return_s")
    ok = None if c is None or s is None else c["median"] < s["median"]
    table.add("submit-to-start p50 below Slurm's (keep the lead)", _ms(c), _ms(s), verdict(ok))
    table.notes.append(
        "the floor: `python3 -c pass` timed right before corral's single calls "
        f"({_ms(_get(corral, 'floor', 'python3 -c pass'))} p50)"
    )
    return table


def render(
    quick: bool,
    s: Settings,
    corral: dict[str, Any],
    slurm: dict[str, Any],
    floors: list[dict[str, Any]],
    scale: dict[str, Any] | None,
    meta: dict[str, Any],
) -> str:
    scale_part = "" if scale is None else f", scale {scale['elapsed_s'] / 60:.1f} min"
    lines = [
        f"## One run beside Slurm ({meta['started']} UTC{', --quick' if quick else ''})",
        "",
        f"`{meta['command']}`: {meta['elapsed_s'] / 60:.1f} min in all (Slurm's part "
        f"{slurm.get('elapsed_s', 0) / 60:.1f} min, corral's {corral.get('elapsed_s', 0) / 60:.1f}"
        f" min{scale_part}); "
        f"load average {meta['load_start']} at the start, {slurm.get('load', '-')} when "
        f"Slurm's part began, {corral.get('load', '-')} when corral's began, "
        f"{meta['load_end']} at the end "
        f"({os.cpu_count()} cores). Slurm: {slurm.get('version', 'not run')}, the anchors' "
        "single host (one node, 64 CPUs, slurmdbd), defaults; corral: a LocalCluster of one "
        f"node x 64 CPUs. Samples: {s.runs} calls per command, {s.query_reps} per query and "
        f"depth, {s.reps} x {s.n_submit} sbatch per submit figure, {s.n_latency} "
        f"submit-to-start probes, {s.n_srun} allocating sruns.",
        "",
    ]
    for which, data in (("Slurm", slurm), ("corral", corral)):
        errors = [data.get("error"), _get(data, "bench", "error")]
        errors += [f"{k}: {v['error']}" for k, v in data.get("extras", {}).items() if "error" in v]
        for error in filter(None, errors):
            lines += [f"**{which}: {error}**", ""]
    tabs = tables(corral, slurm, floors[0])
    end = floors[-1]["python3 -c pass"]
    tabs[0].notes.append(
        f"the floor at the end of the run: {_ms(end)} p50 ({_ms(end, 'p95')} p95); "
        "a slower end means the machine's load rose during the run"
    )
    lines += [t.render() for t in tabs]
    if scale is not None:
        lines += [
            "### Scale, corral only (no Slurm counterpart here: the anchors' Slurm has one "
            "real node)",
            "",
            f"`.venv/bin/python {shlex.join(scale['argv'])}` (the node simulator), "
            f"{scale['elapsed_s'] / 60:.1f} min:",
            "",
            scale["text"].replace("## scale", "").strip().replace("\n### ", "\n#### "),
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    # a TERM (timeout, Ctrl-C in a wrapper) still stops what this run started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a trial: fewer samples, 300 pending")
    p.add_argument("--scale", action="store_true", help="also bench.scale (corral only)")
    p.add_argument("--scale-50k", action="store_true", help="--scale with 50,000 pending too")
    p.add_argument("--no-slurm", action="store_true", help="corral alone")
    p.add_argument("--render", metavar="SIDE_JSON", help="print the tables of an earlier run")
    args = p.parse_args(argv)
    if args.render:
        raw = json.loads(Path(args.render).read_text())
        quick = "--quick" in raw["meta"]["command"].split()
        print(
            render(
                quick,
                QUICK if quick else FULL,
                raw["corral"],
                raw["slurm"],
                raw["floor"],
                raw["scale"],
                raw["meta"],
            )
        )
        return 0
    if not args.no_slurm:
        if os.geteuid() != 0:
            p.error("starting Slurm needs root (or pass --no-slurm)")
        if not (ANCHORS / "up.sh").exists():
            p.error(f"no {ANCHORS / 'up.sh'} (set CORRAL_SLURM_ANCHORS, or pass --no-slurm)")
    s = QUICK if args.quick else FULL
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"side-{stamp}"
    out.mkdir(parents=True)
    os.chmod(out, 0o755)
    t0 = time.monotonic()
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "command": shlex.join(["python", "-m", "bench.side_by_side", *sys.argv[1:]]),
        "load_start": f"{os.getloadavg()[0]:.1f}",
    }
    floors = [floor(s.runs)]
    slurm: dict[str, Any] = {"error": "not run (--no-slurm)"}
    corral: dict[str, Any] = {"error": "not run"}
    scale: dict[str, Any] | None = None

    def save() -> None:
        """side.json as far as the run got: a later part's failure keeps the earlier ones
        (``--render`` prints them)."""
        meta["load_end"] = f"{os.getloadavg()[0]:.1f}"
        meta["elapsed_s"] = time.monotonic() - t0
        raw = {"meta": meta, "floor": floors, "corral": corral, "slurm": slurm, "scale": scale}
        (out / "side.json").write_text(json.dumps(raw, indent=1, default=str))

    if not args.no_slurm:
        slurm = measure_slurm(s, out)
        save()
    log("corral: a LocalCluster, 1 node x 64 CPUs")
    corral = measure_corral(s, out)
    save()
    if args.scale or args.scale_50k:
        scale = measure_scale(args)
    floors.append(floor(s.runs))
    save()
    text = render(args.quick, s, corral, slurm, floors, scale, meta)
    print(text, flush=True)
    (out / "tables.md").write_text(text)
    log(f"{meta['elapsed_s'] / 60:.1f} min; tables in {out / 'tables.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
