"""noded killed and started again under running jobs (issue 35): from the new noded's
spawn to its jobs reported again and srun's stream resumed.

A local cluster of two real nodes (loopback; heartbeat interval 5 s: a first heartbeat
after the registration stays ctld's last one long enough to be read). On node01: N batch
jobs (``sleep`` loops) and one job whose srun runs a task there writing a line every
50 ms. Each round SIGKILLs node01's noded (its jobs run on under their supervisors)
and starts it again at once (``LocalCluster.kill_process`` / ``start_node``), then
measures from the new noded's spawn:

- registered: ctld's record of the node's registration (GetNodes' ``lastChange``,
  ctld's clock) with every job still RUNNING and restart count 0 (checked after);
- first heartbeat: ctld's ``lastHeartbeat`` of the node's first beat after it, which
  carries each job's usage (sstat's figures; every job's checked there);
- srun resumed: noded's log line "srun resumed its step", and the first output line
  arriving in the job's output file after the spawn (the gap: from the last line
  before the kill).

Where the time goes comes from noded's own log lines (structlog's timestamps, the same
clock): its first line (interpreter, imports, config and discovery behind it), the
take-over's "job of an earlier noded taken over" lines, "noded listening", "registered
with ctld"; beside them the floors of the interpreter and of noded's imports, timed
alone.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from bench.common import PYTHON, VENV_BIN, BenchCluster, Table, bench_cluster, log
from corral.testing import wait_for

NODE = 0  # node01: every job's batch host, the noded restarted
INTERVAL_S, TIMEOUT_S = 5.0, 30.0
LOOP = "while :; do sleep 1; done"
TASK = "while :; do date +%s.%N; sleep 0.05; done"
LINE = re.compile(r'^timestamp=(\S+) level=\w+ event="?([^"=]+?)"? \w+=')
TASK_LINE = re.compile(rb"^[0-9]+\.[0-9]+$", re.MULTILINE)  # the task's `date +%s.%N`
SRUN_ERROR = re.compile(rb"^srun: error: .*$", re.MULTILINE)


class Arrivals:
    """When the task's lines reached a file, and srun's errors in it: a thread polling
    its size every 5 ms (the srun job's output)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.times: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        offset = 0
        while not self._stop.wait(0.005):
            try:
                with self.path.open("rb") as fh:
                    fh.seek(offset)
                    new = fh.read()
            except OSError:
                continue
            offset += len(new)
            if TASK_LINE.search(new):
                self.times.append(time.time())
            self.errors += [ln.decode(errors="replace") for ln in SRUN_ERROR.findall(new)]

    def last_before(self, t: float) -> float | None:
        return max((x for x in self.times if x < t), default=None)

    def first_after(self, t: float) -> float | None:
        return min((x for x in self.times if x > t), default=None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def log_events(path: Path, offset: int) -> list[tuple[float, str]]:
    """(time, event) of each noded log line written after ``offset``."""
    out = []
    with path.open("rb") as fh:
        fh.seek(offset)
        text = fh.read().decode(errors="replace")
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            stamp = datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
            out.append((stamp, m.group(2)))
    return out


@dataclass
class Round:
    jobs: int
    times: dict[str, float] = field(default_factory=dict)  # seconds from the spawn
    checks: dict[str, int] = field(default_factory=dict)


def _sbatch(c: BenchCluster, *argv: str) -> str:
    proc = subprocess.run(
        [str(VENV_BIN / "sbatch"), "--parsable", "-w", c.node_names[NODE], *argv],
        cwd=c.work_dir,
        env=c.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout.strip()


def _jobs(c: BenchCluster, ids: list[str]) -> list[dict[str, Any]]:
    reply = c.client().call("GetJobs", {"filter": {"jobIds": ids}})
    return list(reply.get("jobs", []))


def _running(c: BenchCluster, ids: list[str]) -> bool:
    jobs = _jobs(c, ids)
    return len(jobs) == len(ids) and all(j.get("state") == "JOB_STATE_RUNNING" for j in jobs)


def _node(c: BenchCluster) -> dict[str, Any]:
    return dict(c.client().call("GetNodes", {"names": [c.node_names[NODE]]})["nodes"][0])


def one_round(c: BenchCluster, ids: list[str], srun_out: Arrivals) -> Round:
    name = c.node_names[NODE]
    log_path = c.state_dir / "log" / f"{name}.log"
    offset = log_path.stat().st_size
    killed = time.time()
    c.kill_process(name)
    spawned = time.time()
    c.start_node(NODE, timeout=120)  # back once its ready file says it registered
    ready = time.time()
    proc = psutil.Process(c.procs[name].pid)
    cpu = proc.cpu_times()
    r = Round(len(ids) - 1)
    r.times["ready file seen"] = ready - spawned
    r.times["noded CPU to ready"] = cpu.user + cpu.system

    def registered() -> float | None:
        change = _node(c).get("lastChange", {})
        when = float(change.get("time", 0.0))
        return when if change.get("event") == "registered" and when > spawned else None

    reg = wait_for(registered, 30, "ctld's record of the registration", interval=0.01)
    r.times["registered (ctld)"] = reg - spawned

    def beat() -> float | None:
        last = float(_node(c).get("lastHeartbeat", 0.0))
        return last if last > reg else None

    r.times["first heartbeat (ctld)"] = wait_for(beat, 30, "a heartbeat", interval=0.01) - spawned
    if not srun_out.errors:  # (once srun lost its step, there is no stream to resume)
        resumed = wait_for(
            lambda: srun_out.first_after(spawned) or (-1.0 if srun_out.errors else None),
            30,
            "srun's output again",
        )
        if resumed > 0:
            r.times["srun output again"] = resumed - spawned
            r.times["srun output gap"] = resumed - (srun_out.last_before(killed) or killed)
        else:
            log(f"srun lost its step: {srun_out.errors}")
    r.checks["srun errors"] = len(srun_out.errors)
    jobs = _jobs(c, ids)
    r.checks["running"] = sum(j.get("state") == "JOB_STATE_RUNNING" for j in jobs)
    r.checks["restarted"] = sum(int(j.get("restartCount", 0)) > 0 for j in jobs)
    r.checks["usage"] = sum(
        1
        for job_id in ids
        if any(
            n.get("node") == name
            for s in c.client().call("GetStepStats", {"jobId": job_id}).get("steps", [])
            for n in s.get("nodes", [])
        )
    )
    events = log_events(log_path, offset)
    _log_times(r, events, spawned)
    return r


def _log_times(r: Round, events: list[tuple[float, str]], spawned: float) -> None:
    def first(event: str) -> float | None:
        return next((t - spawned for t, e in events if e == event), None)

    taken = [t - spawned for t, e in events if e == "job of an earlier noded taken over"]
    marks = {
        "first log line": events[0][0] - spawned if events else None,
        "first job taken over": taken[0] if taken else None,
        "last job taken over": taken[-1] if taken else None,
        "noded listening": first("noded listening"),
        "registered with ctld (noded)": first("registered with ctld"),
        "srun resumed its step (noded)": first("srun resumed its step"),
    }
    r.checks["taken over"] = len(taken)
    r.times.update({k: v for k, v in marks.items() if v is not None})


def floors(runs: int) -> dict[str, float]:
    """Median wall times of what every noded start pays before its first line."""
    cases = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "python -m noded --help": [PYTHON, "-m", "noded", "--help"],
        "python -c 'import noded.server'": [PYTHON, "-c", "import noded.server"],
    }
    out = {}
    for label, argv in cases.items():
        samples = []
        for _ in range(runs + 1):
            t0 = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, env=dict(os.environ))
            samples.append(time.perf_counter() - t0)
        out[label] = statistics.median(samples[1:])  # the first warms the page cache
    return out


def top_imports(n: int = 6) -> list[tuple[str, float]]:
    """Where ``import noded.server``'s time goes, by top-level package: each module's
    own time (-X importtime's "self" column) added up per package, so they sum to the
    whole import."""
    proc = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", "import noded.server"],
        capture_output=True,
        text=True,
        check=True,
    )
    spent: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue  # the header
        own = int(parts[0].rpartition(":")[2]) / 1e6
        top = parts[2].strip().split(".")[0]
        spent[top] = spent.get(top, 0.0) + own
    return sorted(spent.items(), key=lambda kv: -kv[1])[:n]


def measure(levels: list[int], rounds: int) -> tuple[list[Round], dict[str, Any]]:
    # an installed noded starts from its bytecode: written here by the floors' first
    # runs, read by every noded the cluster spawns (they inherit this environment)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    info = {"floors": floors(5), "imports": top_imports()}
    out: list[Round] = []
    with bench_cluster(
        "noded-restart",
        nodes=2,
        cpus_per_node=max(levels) + 2,
        gpus_per_node=0,
        heartbeat_interval_s=INTERVAL_S,
        heartbeat_timeout_s=TIMEOUT_S,
    ) as c:
        srun_job = _sbatch(c, "-o", "srun-%j.out", "--wrap", f"srun -n1 sh -c '{TASK}'")
        srun_out = Arrivals(c.work_dir / f"srun-{srun_job}.out")
        batch: list[str] = []
        try:
            for level in levels:
                while len(batch) < level:
                    batch.append(_sbatch(c, "-o", "/dev/null", "--wrap", LOOP))
                ids = [srun_job, *batch]
                wait_for(
                    lambda ids=ids: _running(c, ids), 120, f"{level} jobs running", interval=0.2
                )
                wait_for(lambda: srun_out.first_after(time.time() - 0.5), 60, "srun's output")
                for i in range(rounds):
                    time.sleep(1.0)  # the last round's beats and records settled
                    r = one_round(c, ids, srun_out)
                    out.append(r)
                    log(
                        f"noded restart, {level} jobs, round {i + 1}: registered "
                        f"{r.times['registered (ctld)'] * 1000:.0f} ms, srun again "
                        f"{r.times['srun output again'] * 1000:.0f} ms after the spawn"
                    )
        finally:
            srun_out.stop()
    return out, info


def _stat(rs: list[Round], key: str) -> str:
    xs = [r.times[key] for r in rs if key in r.times]
    if not xs:
        return "n/a"
    return f"{statistics.median(xs) * 1000:.0f} / {max(xs) * 1000:.0f}"


def tables(rounds: list[Round], info: dict[str, Any]) -> list[Table]:
    levels = sorted({r.jobs for r in rounds})
    main = Table(
        "noded restarted under running jobs: from the new noded's spawn, ms (median / max)",
        [
            "batch jobs + srun job",
            "rounds",
            "registered (ctld)",
            "first heartbeat, every job's usage (ctld)",
            "srun resumed (noded)",
            "srun output again",
            "srun output gap",
            "restarts / lost / srun errors",
        ],
    )
    parts = Table(
        "Where a noded restart's time goes: noded's log lines, ms from the spawn (median)",
        [
            "batch jobs + srun job",
            "first log line",
            "first job taken over",
            "last job taken over",
            "noded listening",
            "registered (noded)",
            "noded CPU to ready",
        ],
    )
    for level in levels:
        rs = [r for r in rounds if r.jobs == level]
        restarted = sum(r.checks["restarted"] for r in rs)
        lost = sum(r.jobs + 1 - r.checks["running"] for r in rs)
        errors = max(r.checks["srun errors"] for r in rs)
        short = sum(r.jobs + 1 - r.checks["usage"] for r in rs)
        main.add(
            f"{level} + 1",
            len(rs),
            _stat(rs, "registered (ctld)"),
            _stat(rs, "first heartbeat (ctld)") + (f" ({short} missing)" if short else ""),
            _stat(rs, "srun resumed its step (noded)"),
            _stat(rs, "srun output again"),
            _stat(rs, "srun output gap"),
            f"{restarted} / {lost} / {errors}",
        )

        def med(key: str, rs: list[Round] = rs) -> str:
            xs = [r.times[key] for r in rs if key in r.times]
            return f"{statistics.median(xs) * 1000:.0f}" if xs else "n/a"

        parts.add(
            f"{level} + 1",
            med("first log line"),
            med("first job taken over"),
            med("last job taken over"),
            med("noded listening"),
            med("registered with ctld (noded)"),
            med("noded CPU to ready"),
        )
    f = info["floors"]
    main.notes += [
        "SIGKILL to node01's noded, started again at once on the same ports; every job's "
        "batch host is node01, the srun job's one task runs there (a line every 50 ms); "
        "the daemons' bytecode written (PYTHONDONTWRITEBYTECODE unset), as installed",
        "registered / first heartbeat: ctld's own times of the node's registration and of "
        "the beat after it (which carries every job's usage, checked in sstat's figures)",
        "srun resumed: noded's log line when srun's RESUME is taken; output again: the first "
        "line reaching the output file after the spawn; gap: from the last line before the "
        "kill (the output meanwhile waited in the task's pipe and came in one burst)",
        "restarts / lost / srun errors: jobs with a restart count above 0 / not RUNNING, "
        "summed over the rounds / srun's error lines (`srun: error: Node failure`)",
    ]
    parts.notes += [
        "floors, timed alone (median of 5): "
        + ", ".join(f"`{k}` {v * 1000:.0f} ms" for k, v in f.items()),
        "`import noded.server` by package (-X importtime, each module's own time): "
        + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in info["imports"]),
        "first log line: the interpreter, noded's imports, the config, GPU and resource "
        "discovery before it; the take-over lines: reading the records and attaching "
        "to each job's supervisor; listening: after every supervisor is attached",
        "noded CPU to ready: user + system seconds of the new noded when its ready file "
        "was seen (ms): against the wall time, what the 2 shared cores' load took",
    ]
    return [main, parts]


if __name__ == "__main__":
    sys.exit("run it as: python -m bench.daemon_restarts --part noded")
