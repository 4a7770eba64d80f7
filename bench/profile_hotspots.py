"""Profile phase: where the time goes in ctld under load, and in one ``sbatch``.

ctld is sampled with py-spy (``py-spy record -p <ctld pid> --nonblocking -t -f raw``;
install it with ``.venv/bin/pip install py-spy``, it is not a project dependency) while
this process drives it:

* (a) a burst of held gRPC submits (64 in flight);
* (b) GetJobs of the whole queue over the HTTP gateway (what squeue does), repeated;
* (c) end-to-end: trivial jobs submitted and run to completion (scheduler, launches,
  node reports).

Samples are grouped by thread (the asyncio loop "MainThread", the store's
"store-writer", gRPC's poller) into categories by their leaf frame, plus inclusive
shares of the functions that matter and the hottest source lines. py-spy sees Python
frames only: time inside a C extension (upb protobuf, sqlite3, grpc core) shows on the
Python line that called it, which the hot-lines table names.

``sbatch -H --wrap true`` is profiled with cProfile (wall clock) over several runs,
merged.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import pstats
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (
    PYTHON,
    REPO,
    VENV_BIN,
    BenchCluster,
    PhaseResult,
    Table,
    bench_cluster,
    cancel_all,
    log,
    ms,
    run_cmd,
    submit_grpc_sync,
)

PY_SPY = VENV_BIN / "py-spy"
_PARSE_FUNCS = [("jobopts", "build_parser"), ("options", "parse"), ("jobopts", "merge")]
FRAME_RE = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?):(?P<line>\d+)\)$")

Frame = tuple[str, str, int]  # function, file, line
Stack = tuple[str, tuple[Frame, ...], int]  # thread, frames root->leaf, samples


# ---------------------------------------------------------------- py-spy


def py_spy_available() -> bool:
    return PY_SPY.exists() or shutil.which("py-spy") is not None


def record(
    cluster: BenchCluster, work: Callable[[], Any], rate: int = 100, native: bool = False
) -> list[Stack]:
    """Sample ctld with py-spy while ``work()`` runs; the collapsed stacks.

    ``native`` adds C frames (py-spy --native); it pauses ctld at each sample."""
    exe = str(PY_SPY) if PY_SPY.exists() else "py-spy"
    out = Path(tempfile.mkstemp(prefix="pyspy-", suffix=".txt")[1])
    argv = [exe, "record", "-p", str(cluster.ctld_pid), "-f", "raw", "-o", str(out)]
    argv += ["-r", str(rate), "-t"]
    argv += ["--native"] if native else ["--nonblocking"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(0.5)  # py-spy attaches
        work()
        time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    try:
        return parse_collapsed(out.read_text())
    finally:
        out.unlink(missing_ok=True)


def parse_collapsed(text: str) -> list[Stack]:
    stacks: list[Stack] = []
    for line in text.splitlines():
        body, _, count = line.rpartition(" ")
        if not body or not count.isdigit():
            continue
        parts = body.split(";")
        thread = "?"
        if parts and parts[0].startswith("thread ("):
            thread = parts[0].split(":", 1)[1].strip() if ":" in parts[0] else parts[0]
            parts = parts[1:]
        frames = []
        for p in parts:
            m = FRAME_RE.match(p)
            if m:
                frames.append((m["func"], m["file"], int(m["line"])))
            else:
                frames.append((p, "", 0))
        stacks.append((thread, tuple(frames), int(count)))
    return stacks


def thread_group(name: str) -> str:
    if name.startswith("store-writer"):
        return "store-writer"
    if "_poll_wrapper" in name:
        return "grpc poller"
    if name == "MainThread":
        return "MainThread (asyncio loop)"
    return "other threads"


def leaf_category(frames: tuple[Frame, ...]) -> str:
    """What a sample was doing, from its leaf frame (C calls land on their caller)."""
    if not frames:
        return "other"
    func, file, _ = frames[-1]
    files = [f for _, f, _ in frames]
    if any("json_format.py" in f for f in files):
        return "proto3 JSON conversion (json_format)"
    if any(f.startswith(("structlog/", "logging/")) for f in files):
        return "logging (structlog)"
    if file.startswith("sqlalchemy/"):
        if func.endswith("do_commit"):
            return "SQLite COMMIT incl. fsync (C)"
        if func.endswith(("do_execute", "do_executemany")):
            return "SQLite statement execution (C)"
        return "SQLAlchemy Python layer (compile, bind, result)"
    if file.startswith("ctld/storage/store.py") and func in ("_job_row", "_event_row"):
        return "store row building (protobuf CopyFrom/Serialize)"
    if file.startswith("ctld/sched") or func in ("Cluster.snapshot", "Cluster.apply_plan"):
        return "scheduler (snapshot, plan, apply)"
    if file.startswith(("ctld/model/validate.py", "corral/hostlist.py")):
        return "submit validation"
    if file.startswith(("ctld/", "corral/")):
        return f"ctld/corral: {func}"
    if file.startswith("aiohttp/") or "aiohttp" in file:
        return "aiohttp (HTTP gateway)"
    if "grpc" in file or file.endswith(".pyx.pxi"):
        return "gRPC (Cython/aio layer)"
    if func == "EpollSelector.select":
        return "epoll_wait (loop polling; py-spy may count it active)"
    if func == "Handle._run":
        return "native code run from a loop callback (grpc Cython, upb, syscalls)"
    if file.startswith(("asyncio/", "selectors.py")):
        return "asyncio loop (Python)"
    if file.startswith(("threading.py", "queue.py")):
        return "thread plumbing (queue, wakeups)"
    if "google/protobuf" in file:
        return "protobuf (Python layer)"
    return f"other: {func} ({file})"


INCLUSIVE: list[tuple[str, Callable[[str, str], bool]]] = [
    ("rpc behavior (gRPC handlers)", lambda fn, f: fn.endswith("behavior") and "rpc.py" in f),
    ("gateway handle (HTTP handlers)", lambda fn, f: f.startswith("ctld/api/gateway.py")),
    ("Cluster.submit", lambda fn, f: fn == "Cluster.submit"),
    ("validate_spec", lambda fn, f: fn == "validate_spec"),
    ("Cluster.schedule_pass", lambda fn, f: fn == "Cluster.schedule_pass"),
    ("Cluster.snapshot", lambda fn, f: fn in ("Cluster.snapshot", "snapshot")),
    ("sched.schedule (plan)", lambda fn, f: fn == "schedule" and "sched" in f),
    ("Cluster.report_status", lambda fn, f: fn == "Cluster.report_status"),
    ("Cluster._launch (dispatch)", lambda fn, f: fn == "Cluster._launch"),
    ("ControllerApi.get_jobs", lambda fn, f: fn == "ControllerApi.get_jobs"),
    ("json_format.MessageToDict", lambda fn, f: "json_format.py" in f and "ToDict" in fn),
    ("json_format.Parse", lambda fn, f: "json_format.py" in f and "Parse" in fn),
    ("json.dumps", lambda fn, f: f.startswith("json/")),
    ("structlog", lambda fn, f: f.startswith("structlog/")),
    ("Store._commit_batch", lambda fn, f: fn == "Store._commit_batch"),
    ("_job_row (CopyFrom + SerializeToString)", lambda fn, f: fn == "_job_row"),
    ("SQLAlchemy Connection.execute", lambda fn, f: fn == "Connection.execute"),
    ("SQLAlchemy do_commit", lambda fn, f: fn.endswith("do_commit")),
    ("Store._finish (loop wakeups)", lambda fn, f: fn == "Store._finish"),
]


def analyse(stacks: list[Stack], title: str) -> tuple[list[Table], dict[str, Any]]:
    by_thread: Counter[str] = Counter()
    cats: dict[str, Counter[str]] = defaultdict(Counter)
    incl: dict[str, Counter[str]] = defaultdict(Counter)
    lines: dict[str, Counter[Frame]] = defaultdict(Counter)
    for thread, frames, n in stacks:
        group = thread_group(thread)
        by_thread[group] += n
        cats[group][leaf_category(frames)] += n
        seen = set()
        for fn, f, _ in frames:
            for label, pred in INCLUSIVE:
                if label not in seen and pred(fn, f):
                    seen.add(label)
                    incl[group][label] += n
        if frames:
            lines[group][frames[-1]] += n
    total = sum(by_thread.values()) or 1
    tables = []
    threads = Table(
        f"{title}: samples by thread", ["thread", "samples", "share of all active samples"]
    )
    for group, n in by_thread.most_common():
        threads.add(group, n, f"{n / total:.0%}")
    threads.notes.append("py-spy, active (non-idle) samples only, 100 Hz, --nonblocking")
    tables.append(threads)
    data: dict[str, Any] = {"threads": dict(by_thread), "categories": {}, "inclusive": {}}
    for group in ("MainThread (asyncio loop)", "store-writer"):
        n_group = by_thread.get(group, 0)
        if not n_group:
            continue
        cat = Table(
            f"{title}: {group}, by leaf category",
            ["category", "share of thread", "share of all"],
        )
        for name, n in cats[group].most_common(12):
            cat.add(name, f"{n / n_group:.1%}", f"{n / total:.1%}")
        tables.append(cat)
        inc = Table(
            f"{title}: {group}, inclusive (sample has the function on its stack)",
            ["function", "share of thread"],
        )
        for name, n in incl[group].most_common():
            inc.add(name, f"{n / n_group:.1%}")
        tables.append(inc)
        hot = Table(
            f"{title}: {group}, hottest lines (self)",
            ["share of thread", "where", "source"],
        )
        for (fn, f, ln), n in lines[group].most_common(10):
            hot.add(f"{n / n_group:.1%}", f"{fn} ({f}:{ln})", _source(f, ln))
        tables.append(hot)
        data["categories"][group] = dict(cats[group])
        data["inclusive"][group] = dict(incl[group])
        data.setdefault("hot_lines", {})[group] = [
            [f"{fn} ({f}:{ln})", n] for (fn, f, ln), n in lines[group].most_common(25)
        ]
    return tables, data


def native_category(frames: tuple[Frame, ...]) -> str:
    """A --native sample by what the thread was doing in C at the leaf."""
    texts = [f"{fn} ({f})" for fn, f, _ in frames]
    tail = " ; ".join(texts[-4:])
    if any("gc_collect" in t for t in texts):
        return "cyclic GC (gc_collect_main)"
    if "fdatasync" in tail or "fsync" in tail:
        return "fsync (fdatasync in SQLite COMMIT)"
    if "epoll_wait" in tail:
        return "epoll_wait (loop / gRPC poller idle)"
    if "_queue_SimpleQueue_get" in tail or "queue.py" in tail:
        return "waiting for work (SimpleQueue.get)"
    if "pthread_cond" in tail or "take_gil" in tail or "futex" in tail:
        return "waiting to re-take the GIL (pthread_cond_timedwait)"
    if "PrintLogger.msg" in " ".join(texts[-3:]) or (
        "write (libc" in tail and any("structlog" in t for t in texts)
    ):
        return "log line write() (structlog PrintLogger, flush per line)"
    if "sendmsg" in tail or "recvmsg" in tail:
        return "gRPC socket I/O (sendmsg/recvmsg)"
    if "eventfd" in tail or "_write_to_self" in tail:
        return "cross-thread wakeups (eventfd, loop self-pipe)"
    if "sock_recv" in tail or "sock_send" in tail or "recv (libc" in tail or "send (libc" in tail:
        return "socket send/recv (HTTP gateway, self-pipe)"
    if "pwrite" in tail or "pread" in tail:
        return "SQLite file I/O (pwrite/pread)"
    if "sqlite" in tail.lower():
        return "SQLite (C)"
    if "cygrpc" in texts[-1]:
        return "gRPC Cython/core (C, unsymbolised)"
    if "_message" in texts[-1] or "upb" in texts[-1]:
        return "protobuf upb (C)"
    last_file = frames[-1][1] if frames else ""
    if last_file.endswith(".py") or last_file.startswith("<"):
        return "Python bytecode (see the Python-only tables)"
    return "interpreter and other C"


def analyse_native(stacks: list[Stack], title: str) -> tuple[list[Table], dict[str, Any]]:
    by_group: dict[str, Counter[str]] = defaultdict(Counter)
    for thread, frames, n in stacks:
        by_group[thread_group(thread)][native_category(frames)] += n
    tables = []
    data: dict[str, Any] = {}
    for group in ("MainThread (asyncio loop)", "store-writer"):
        cats = by_group.get(group)
        if not cats:
            continue
        n_group = sum(cats.values())
        t = Table(
            f"{title}: {group}, with C frames (py-spy --native)",
            ["what the thread was doing", "share of thread samples"],
        )
        for name, n in cats.most_common(12):
            t.add(name, f"{n / n_group:.1%}")
        t.notes.append(f"{n_group} samples; --native includes waits the Python view hides")
        tables.append(t)
        data[group] = dict(cats)
    return tables, data


_SITE_DIRS: list[Path] = []


def _source(file: str, line: int) -> str:
    """The source text of a py-spy frame (paths are relative to a sys.path entry)."""
    if not _SITE_DIRS:
        import sys

        _SITE_DIRS.extend(Path(p) for p in sys.path if p and Path(p).is_dir())
        _SITE_DIRS.append(REPO / "src")
        _SITE_DIRS.append(REPO)
    for base in _SITE_DIRS:
        path = base / file
        if path.exists():
            text = linecache.getline(str(path), line).strip()
            return text.replace("|", "\\|")[:70]
    return ""


# ---------------------------------------------------------------- sbatch (cProfile)


def profile_sbatch(cluster: BenchCluster, runs: int) -> tuple[list[Table], dict[str, Any]]:
    env = cluster.env()
    cwd = str(cluster.work_dir)
    tmp = Path(tempfile.mkdtemp(prefix="sbatch-prof-"))
    walls = []
    files = []
    try:
        for i in range(runs + 1):
            out = tmp / f"sbatch-{i}.prof"
            argv = [PYTHON, "-m", "cProfile", "-o", str(out), str(VENV_BIN / "sbatch")]
            argv += ["-H", "--wrap", "true"]
            dt, proc = run_cmd(argv, env, cwd)
            if proc.returncode != 0:
                raise RuntimeError(f"sbatch under cProfile failed: {proc.stderr[-300:]}")
            if i:  # the first run warms caches
                walls.append(dt)
                files.append(str(out))
        stats = pstats.Stats(files[0])
        for f in files[1:]:
            stats.add(f)
        table, data = _sbatch_tables(stats, runs, walls)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return table, data


def _sbatch_tables(
    stats: pstats.Stats, runs: int, walls: list[float]
) -> tuple[list[Table], dict[str, Any]]:
    entries: dict[tuple[str, int, str], tuple[int, int, float, float]] = {
        k: (v[0], v[1], v[2], v[3])
        for k, v in stats.stats.items()  # type: ignore[attr-defined]
    }

    def cum(pred: Callable[[str, int, str], bool]) -> float:
        best = 0.0
        for (file, line, func), (_cc, _nc, _tt, ct) in entries.items():
            if pred(file, line, func):
                best = max(best, ct)
        return best / runs

    def tot(pred: Callable[[str, int, str], bool]) -> float:
        return (
            sum(tt for (f, ln, fn), (_cc, _nc, tt, _ct) in entries.items() if pred(f, ln, fn))
            / runs
        )

    total = stats.total_tt / runs  # type: ignore[attr-defined]

    def named(file_end: str, func: str) -> Callable[[str, int, str], bool]:
        return lambda f, ln, fn: f.endswith(file_end) and fn == func

    def builtin(word: str) -> Callable[[str, int, str], bool]:
        return lambda f, ln, fn: f == "~" and word in fn

    parse = sum(cum(named(f"client/{m}.py", fn)) for m, fn in _PARSE_FUNCS)
    parts = [
        ("imports (_find_and_load, outermost calls)", cum(named("", "_find_and_load"))),
        ("sbatch submit()", cum(named("client/sbatch.py", "submit"))),
        ("  option parsing (parser, #SBATCH merge)", parse),
        ("  to_spec (spec dict incl. environment)", cum(named("client/jobopts.py", "to_spec"))),
        ("  rest.post (HTTP round trip)", cum(named("corral/rest.py", "post"))),
        ("    socket connect", cum(named("socket.py", "create_connection"))),
        ("    sendall", tot(builtin("sendall"))),
        ("    recv (waiting for ctld: parse, commit, reply)", tot(builtin("recv"))),
    ]
    table = Table(
        f"sbatch -H --wrap true under cProfile ({runs} runs merged, wall clock)",
        ["part", "per run", "share of profiled time"],
    )
    for label, value in parts:
        table.add(label, ms(value), f"{value / total:.0%}" if total else "n/a")
    med = sorted(walls)[len(walls) // 2]
    table.notes.append(
        f"profiled Python time {ms(total)} per run; process wall time under cProfile "
        f"{ms(med)} (median; interpreter start-up is outside the profile); cProfile "
        "inflates call-heavy code such as imports"
    )
    top = Table(
        "sbatch: top functions by cumulative time (excluding import machinery)",
        ["function", "cumulative per run", "calls per run"],
    )
    rows = sorted(
        (
            (ct / runs, nc / runs, f"{fn} ({Path(f).name}:{ln})")
            for (f, ln, fn), (_cc, nc, _tt, ct) in entries.items()
            if (
                "importlib" not in f
                and not fn.startswith(("<built-in method builtins.exec", "<module>"))
                and f != "~"
            )
            or (f == "~" and ("recv" in fn or "connect" in fn))
        ),
        reverse=True,
    )
    for ct, nc, name in rows[:15]:
        top.add(name, ms(ct), f"{nc:.0f}")
    return [table, top], {
        "profiled_s_per_run": total,
        "wall_s": walls,
        "parts": {label: v for label, v in parts},
    }


# ---------------------------------------------------------------- phase


def run(quick: bool = False) -> PhaseResult:
    burst = 800 if quick else 3000
    e2e = 200 if quick else 1000
    result = PhaseResult(
        "profile", {"submit_burst": burst, "e2e_jobs": e2e, "sampler": "py-spy 100 Hz"}
    )
    with bench_cluster("profile") as cluster:
        if py_spy_available():
            log(f"profile: py-spy on ctld during {burst} held gRPC submits (64 in flight)")
            runs: dict[str, Any] = {}

            def submits() -> None:
                runs["submit"] = submit_grpc_sync(cluster, burst, 64, hold=True)

            stacks = record(cluster, submits)
            sub = runs["submit"]
            tables, data = analyse(stacks, f"ctld, {burst} gRPC submits")
            tables[0].notes.append(
                f"{sub.jobs_per_s:.0f} jobs/s while sampled (py-spy shares the 2 cores)"
            )
            result.tables.extend(tables)
            result.data["submit_burst"] = data

            cancel_all(cluster)
            log(f"profile: py-spy --native on ctld during {burst} held gRPC submits")

            def submits_native() -> None:
                runs["native"] = submit_grpc_sync(cluster, burst, 64, hold=True)

            stacks = record(cluster, submits_native, native=True)
            tables, data = analyse_native(stacks, f"ctld, {burst} gRPC submits")
            tables[0].notes.append(
                f"{runs['native'].jobs_per_s:.0f} jobs/s while sampled (--native pauses ctld)"
            )
            result.tables.extend(tables)
            result.data["submit_burst_native"] = data

            client = cluster.client()
            in_memory = len(client.get_jobs({}).get("jobs", []))
            log(f"profile: py-spy on ctld during GetJobs x10 ({in_memory} jobs in memory)")
            getjobs_s: list[float] = []

            def getjobs() -> None:
                for _ in range(10):
                    t0 = time.perf_counter()
                    client.get_jobs({})
                    getjobs_s.append(time.perf_counter() - t0)

            stacks = record(cluster, getjobs)
            tables, data = analyse(stacks, f"ctld, GetJobs over HTTP, {in_memory} jobs")
            tables[0].notes.append(
                f"GetJobs median {ms(sorted(getjobs_s)[len(getjobs_s) // 2])} while sampled; "
                f"{burst} held and {in_memory - burst} cancelled jobs in memory (squeue's view)"
            )
            result.tables.extend(tables)
            result.data["getjobs"] = data

            cancel_all(cluster)
            log(f"profile: py-spy on ctld during {e2e} trivial jobs end to end")

            def end_to_end() -> None:
                submit_grpc_sync(cluster, e2e, 64, hold=False, name="e2e")
                deadline = time.monotonic() + 300
                states = ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_COMPLETING"]
                while time.monotonic() < deadline:
                    left = client.get_jobs({"filter": {"states": states}}).get("jobs", [])
                    if not left:
                        break
                    time.sleep(0.1)

            stacks = record(cluster, end_to_end)
            tables, data = analyse(stacks, f"ctld, {e2e} jobs end to end")
            result.tables.extend(tables)
            result.data["e2e"] = data
        else:
            t = Table("ctld profile", ["note"])
            t.add("py-spy not installed: .venv/bin/pip install py-spy (not a project dependency)")
            result.tables.append(t)
        log("profile: cProfile of sbatch -H --wrap true")
        tables, data = profile_sbatch(cluster, 5 if quick else 10)
        result.tables.extend(tables)
        result.data["sbatch"] = data
    with contextlib.suppress(OSError):
        os.sync()
    return result


if __name__ == "__main__":
    from bench.common import phase_main

    phase_main(run)
