"""ctld's web page at scale: 1,000 simulated nodes x 8 GPUs and 10,000 jobs.

    .venv/bin/python -m bench.web                  # 1,000 nodes, 10,000 jobs
    .venv/bin/python -m bench.web --quick          # 100 nodes, 1,000 jobs

A real ctld (bench/ctld_probe.py) and one simulator process playing every node
(heartbeats every 10 s, each carrying its 8 GPUs' samples). Every node runs one 8-GPU
job; the rest of the jobs wait (8 GPUs each, so every pass weighs them all). Then:

- time to first render of each view: the view's HTTP response (``/view/...``; ctld
  renders it anew: a job was submitted just before, so no rendering is cached) and
  again at once (the shared rendering), its size; with Chromium present, a page load
  until the view is in the page (navigation start to the shell's script having
  fetched and shown it);
- an update's latency: a page's live stream open on the queue (newest first); a job is
  submitted over gRPC; the time from just before SubmitJob to the stream's event that
  shows the job (p50 / p99 over sequential probes);
- ctld's CPU with ten pages open and live (ten users: 4 on the cluster view, 3 on the
  queue, 2 on their own jobs, 1 on a job's page), against the same window without
  them; a job is submitted every second in both, so the pages have something to show.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pwd
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    BenchCluster,
    PhaseResult,
    Table,
    bench_cluster,
    log,
    ms,
    percentile,
    save_result,
)
from bench.scale import _release, _spec, _submit
from corral.testing import wait_for

GPUS, CPUS, HEARTBEAT_S = 8, 64, 10.0
VIEWS = ("/", "/queue", "/mine", "/usage", "/reservations")
WINDOW_S = 30.0


def _users(n: int) -> list[str]:
    """``n`` accounts of this machine to sign in as (ten users with a page open)."""
    names = [p.pw_name for p in pwd.getpwall() if p.pw_uid != 0][: n - 1]
    return [pwd.getpwuid(os.getuid()).pw_name, *names][:n]


async def _session(http: Any, cluster: BenchCluster, user: str) -> str:
    """Sign ``user`` in as the page's script does: their web-login URL's token (in its
    fragment), traded by a POST for the session token."""
    url = cluster.tcp_client(cluster.token(user)).call("CreateWebLogin", {})["url"]
    token = url.split("#token=", 1)[1]
    async with http.post(f"{url.split('/login')[0]}/login", json={"token": token}) as resp:
        assert resp.status == 200, resp.status
        return str((await resp.json())["session"])


def _cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


async def _trickle(cluster: BenchCluster, stop: asyncio.Event) -> int:
    """A held job a second (something new for the pages to show)."""
    spec = _spec(cluster, runtime=60, gpus=GPUS, limit=3600, hold=True)
    n = 0
    while not stop.is_set():
        await _submit(cluster, spec, 1, inflight=1)
        n += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
    return n


async def _window(cluster: BenchCluster, seconds: float) -> float:
    """ctld's CPU share over ``seconds`` with the trickle of submits."""
    stop = asyncio.Event()
    trickle = asyncio.create_task(_trickle(cluster, stop))
    before, t0 = _cpu_s(cluster.ctld_pid), time.monotonic()
    await asyncio.sleep(seconds)
    share = (_cpu_s(cluster.ctld_pid) - before) / (time.monotonic() - t0)
    stop.set()
    await trickle
    return share


async def _stream(http: Any, base: str, session: str, view: str, seen: list[str]) -> None:
    """A page's live stream: each event's data appended to ``seen``."""
    headers = {"Authorization": f"Bearer {session}"}
    async with http.get(
        f"{base}/events", params={"view": view}, headers=headers, timeout=None
    ) as resp:
        assert resp.status == 200, resp.status
        data: list[str] = []
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                data.append(line[6:])
            elif not line and data:
                seen.append("\n".join(data))
                data = []


async def _renders(http: Any, base: str, session: str, cluster: BenchCluster, job: int) -> Table:
    table = Table(
        "Time to first render (the view's HTTP response; ctld renders anew, then shared)",
        ["view", "anew", "shared", "size"],
    )
    spec = _spec(cluster, runtime=60, gpus=GPUS, limit=3600, hold=True)
    headers = {"Authorization": f"Bearer {session}"}
    for view in (*VIEWS, f"/job/{job}"):
        anew, shared, size = [], [], 0
        for _ in range(5):
            await _submit(cluster, spec, 1, inflight=1)  # a change: nothing cached is current
            for out in (anew, shared):
                t0 = time.perf_counter()
                async with http.get(f"{base}/view{view}", headers=headers) as resp:
                    body = await resp.read()
                    assert resp.status == 200, (view, resp.status)
                out.append(time.perf_counter() - t0)
                size = len(body)
        table.add(
            view, ms(percentile(anew, 50)), ms(percentile(shared, 50)), f"{size / 1024:.0f} KiB"
        )
    return table


def _browser(base: str, session: str, job: int) -> Table | None:
    """The view in Chromium's page (the shell, its script, the view's fetch), when
    Chromium is here."""
    try:
        from tests.integration.browser import _found, chromium
    except ImportError:
        return None
    if isinstance(_found(), str):
        return None
    table = Table(
        "Time to first render in Chromium (navigation start to the view in the page)",
        ["view", "view shown", "DOM ready"],
    )
    with chromium() as driver:
        driver.get(base + "/livez")  # the origin's storage, where the page keeps its session
        driver.execute_script("localStorage.setItem('corral-session', arguments[0])", session)
        for view in (*VIEWS, f"/job/{job}"):
            fcp, ready = [], []
            for _ in range(3):
                driver.get(base + view)
                paint = wait_for(
                    lambda: driver.execute_script(
                        "const shown = document.getElementById('view').dataset.updated;"
                        "const n = performance.getEntriesByType('navigation')[0];"
                        "return shown ? [shown - performance.timeOrigin,"
                        " n.domContentLoadedEventEnd] : null;"
                    ),
                    5,
                    "the view in the page",
                )
                fcp.append(paint[0] / 1000)
                ready.append(paint[1] / 1000)
            table.add(view, ms(percentile(fcp, 50)), ms(percentile(ready, 50)))
    return table


async def _latency(
    http: Any, base: str, session: str, cluster: BenchCluster, probes: int
) -> list[float]:
    seen: list[str] = []
    reader = asyncio.create_task(_stream(http, base, session, "/queue?sort=-id", seen))
    await asyncio.sleep(2)
    import grpc

    from corral.wire import corral_pb2 as pb
    from corral.wire import corral_pb2_grpc as pbg

    request = pb.SubmitJobRequest(spec=_spec(cluster, runtime=60, gpus=GPUS, limit=3600, hold=True))
    out = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.grpc_port}") as channel:
        stub = pbg.ControllerStub(channel)
        md = cluster.grpc_metadata()
        for _ in range(probes):
            t0 = time.perf_counter()
            job = (await stub.SubmitJob(request, metadata=md)).job_id
            mark = f'href="/job/{job}"'
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(mark in s for s in seen):
                await asyncio.sleep(0.002)
            out.append(time.perf_counter() - t0)
            await asyncio.sleep(1.5)  # past web.refresh_s: each probe a change on its own
    reader.cancel()
    return out


async def _measure(
    cluster: BenchCluster, nodes: int, jobs: int, probes: int, result: PhaseResult
) -> None:
    import aiohttp

    base = f"http://{cluster.http_address}"
    busy = await _submit(
        cluster, _spec(cluster, runtime=36000, gpus=GPUS, limit=86400, hold=False), nodes
    )
    waiting = await _submit(
        cluster, _spec(cluster, runtime=60, gpus=GPUS, limit=3600, hold=True), jobs - nodes
    )
    await _release(cluster, waiting)
    wait_for(
        lambda: (
            len(
                cluster.client()
                .call("GetJobs", {"filter": {"states": ["JOB_STATE_RUNNING"]}})
                .get("jobs", [])
            )
            >= len(busy)
        ),
        300,
        "every node busy",
        interval=0.5,
    )
    await asyncio.sleep(HEARTBEAT_S + 2)  # every node's GPU samples are in
    async with aiohttp.ClientSession() as http:
        users = _users(10)
        sessions = [await _session(http, cluster, u) for u in users]
        result.tables.append(await _renders(http, base, sessions[0], cluster, busy[0]))
        painted = await asyncio.to_thread(_browser, base, sessions[0], busy[0])
        if painted is not None:
            result.tables.append(painted)
        lat = await _latency(http, base, sessions[0], cluster, probes)
        t = Table(
            "An update's latency (submit over gRPC -> the live stream's event showing it)",
            ["view", "p50", "p99", "probes"],
        )
        t.add("/queue?sort=-id", ms(percentile(lat, 50)), ms(percentile(lat, 99)), len(lat))
        result.tables.append(t)
        result.data["latency_s"] = lat
        quiet = await _window(cluster, WINDOW_S)
        views = ["/"] * 4 + ["/queue"] * 3 + ["/mine"] * 2 + [f"/job/{busy[0]}"]
        seen: list[list[str]] = [[] for _ in views]
        streams = [
            asyncio.create_task(_stream(http, base, c, v, s))
            for c, v, s in zip(sessions, views, seen, strict=True)
        ]
        await asyncio.sleep(3)
        loaded = await _window(cluster, WINDOW_S)
        events = sum(len(s) for s in seen)
        for s in streams:
            s.cancel()
        cpu = Table(
            f"ctld CPU over {WINDOW_S:.0f} s, a held job submitted every second",
            ["pages open", "ctld CPU", "events sent"],
        )
        cpu.add(0, f"{quiet * 100:.1f}%", "-")
        cpu.add(f"10 ({len(set(users))} users)", f"{loaded * 100:.1f}%", events)
        cpu.notes.append(
            f"the ten pages cost {(loaded - quiet) * 100:.1f}% of a core "
            f"({nodes} nodes heartbeating every {HEARTBEAT_S:.0f} s, {jobs} jobs)"
        )
        result.tables.append(cpu)
        result.data["cpu"] = {"quiet": quiet, "ten_pages": loaded, "events": events}


def run(nodes: int, jobs: int, probes: int) -> PhaseResult:
    result = PhaseResult(
        "web",
        {"nodes": nodes, "jobs": jobs, "gpus_per_node": GPUS, "load_average": os.getloadavg()[0]},
    )
    with bench_cluster(
        f"web{nodes}",
        nodes=nodes,
        cpus_per_node=CPUS,
        gpus_per_node=GPUS,
        memory_mb_per_node=512 * 1024,
        simulated=True,
        heartbeat_interval_s=HEARTBEAT_S,
        heartbeat_timeout_s=120.0,
    ) as cluster:
        asyncio.run(_measure(cluster, nodes, jobs, probes, result))
    return result


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--probes", type=int, default=20)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    nodes, jobs = (100, 1000) if args.quick else (args.nodes, args.jobs)
    t0 = time.monotonic()
    result = run(nodes, jobs, 10 if args.quick else args.probes)
    result.elapsed_s = time.monotonic() - t0
    print(result.render())
    log(f"results: {save_result(result)}")


if __name__ == "__main__":
    main()
