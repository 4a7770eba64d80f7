"""A synthetic site history written into a real store: for ``bench/site_replay.py``
(the replay's speed on a 100,000-job store) and the tests of ``corral sim
--from-store``.

A lab cluster of GPU nodes in one partition, a few accounts and users, jobs of 1-8
GPUs (a few shard jobs and whole-node ones), Poisson arrivals at a chosen load, run
times log-normal under limits 1-4x as long. Each job is written finished, as ctld
writes one (its row, its story's submitted and started events), with the start a
replay of the same jobs gives (``record``) or, for a store only to be read fast, its
submit time (``write_store``'s default).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from corral.wire import corral_pb2 as pb
from ctld.sim.history import History
from ctld.sim.site import Site
from ctld.sim.site_engine import SiteReplay
from ctld.sim.site_jobs import ReplayJob
from ctld.storage.store import Store
from ctld.storage.store_rows import Op, apply_ops, insert_job


@dataclass(frozen=True)
class Lab:
    nodes: int = 16
    gpus: int = 8
    cpus: int = 64
    memory_mb: int = 512 * 1024
    accounts: tuple[str, ...] = ("ml", "vision", "nlp")
    users_per_account: int = 4
    shards_per_gpu: int = 0

    def node_names(self) -> list[str]:
        return [f"gpu{i:03d}" for i in range(1, self.nodes + 1)]

    def config(self, store_url: str, extra: str = "") -> str:
        """A corral.toml for this cluster whose store is ``store_url``."""
        accounts = "".join(
            f'\n[[accounts]]\nname = "{a}"\nshares = 1\n'
            f"users = [{', '.join(f'{chr(34)}{u}{chr(34)}' for u in self.users(a))}]\n"
            for a in self.accounts
        )
        shards = f", shards_per_gpu = {self.shards_per_gpu}" if self.shards_per_gpu else ""
        return (
            f'cluster_name = "lab"\n[controller]\nstore_url = "{store_url}"\n'
            f'[[nodes]]\nnames = "gpu[001-{self.nodes:03d}]"\ncpus = {self.cpus}\n'
            f"memory_mb = {self.memory_mb}\n"
            f'gpus = {{ backend = "fake", count = {self.gpus}{shards} }}\n'
            f'[[partitions]]\nname = "gpu"\nnodes = "gpu[001-{self.nodes:03d}]"\n'
            f'default = true\nmax_time = "2-00:00:00"\n{accounts}{extra}'
        )

    def users(self, account: str) -> list[str]:
        return [f"{account}{i}" for i in range(1, self.users_per_account + 1)]


def jobs(
    lab: Lab, count: int, *, load: float = 0.9, seed: int = 1, t0: float = 1.7e9
) -> list[tuple[pb.Job, float]]:
    """``count`` jobs as submitted (pending), arriving at ``load`` of the GPUs, each with
    how long it runs."""
    rng = random.Random(seed)
    shapes = [(1, 0.4), (2, 0.2), (4, 0.2), (8, 0.15), (0, 0.05)]  # GPUs (0: a shard job)
    mean_gpus = sum(max(g, 0.25) * w for g, w in shapes)
    median_run = 3600.0
    mean_run = median_run * math.exp(0.5)  # log-normal, sigma 1
    rate = load * lab.nodes * lab.gpus / (mean_gpus * mean_run)  # jobs per second
    users = [(a, u) for a in lab.accounts for u in lab.users(a)]
    weights = [1 + i for i in range(len(users))]
    out = []
    now = t0
    for i in range(count):
        now += rng.expovariate(rate)
        gpus = rng.choices([g for g, _ in shapes], [w for _, w in shapes])[0]
        run = min(median_run * math.exp(rng.gauss(0, 1)), 40 * 3600)
        limit = min(int(run * rng.uniform(1.0, 4.0)) + 60, 2 * 86400)  # the partition's max
        account, user = rng.choices(users, weights)[0]
        spec = pb.JobSpec(
            name=f"job{rng.randrange(20)}",
            partitions=["gpu"],
            account=account,
            nodes_min=1,
            ntasks=1,
            cpus_per_task=max(gpus, 1) * 8,
            mem_per_node_mb=max(gpus, 1) * 64 * 1024,
            gpus_per_node=gpus,
            time_limit_s=limit,
        )
        if gpus == 0 and lab.shards_per_gpu:
            spec.shards_per_node = max(1, lab.shards_per_gpu // 4)
        job = pb.Job(
            job_id=i + 1,
            spec=spec,
            user=user,
            uid=10000 + users.index((account, user)),
            gid=10000,
            state=pb.JOB_STATE_PENDING,
            partition="gpu",
            account=account,
            time_limit_s=limit,
            submit_time=now,
            eligible_time=now,
            num_nodes=1,
            num_tasks=1,
            num_cpus=spec.cpus_per_task,
            mem_mb=spec.mem_per_node_mb,
            num_gpus=gpus,
            qos="normal",
        )
        out.append((job, run))
    return out


def record(
    job: pb.Job,
    start: float,
    end: float,
    placements: Iterable[tuple[str, int, int, Sequence[int], int]],
) -> pb.Job:
    """``job`` finished: started at ``start`` on ``placements``, ended at ``end``."""
    done = pb.Job()
    done.CopyFrom(job)
    done.state = pb.JOB_STATE_COMPLETED
    done.start_time, done.end_time = start, end
    del done.allocations[:]
    for node, cpus, mem, gpus, shards in placements:
        done.allocations.add(
            node=node, cpus=cpus, mem_mb=mem, gpu_indices=list(gpus), shards=shards
        )
    done.nodelist = ",".join(a.node for a in done.allocations)
    for event, at, to in (
        ("submitted", job.submit_time, pb.JOB_STATE_PENDING),
        ("started", start, pb.JOB_STATE_RUNNING),
        ("exited", end, pb.JOB_STATE_COMPLETED),
    ):
        done.events.add(time=at, event=event, to_state=to, cause="synthetic")
    return done


def write_store(url: str, finished: Iterable[pb.Job], chunk: int = 5000) -> int:
    """Write ``finished`` jobs into a new store at ``url`` (made at the schema's head)."""
    store = Store(url, sqlite_synchronous="OFF")
    store.open()
    engine = store.engine
    count = 0
    batch: list[Op] = []
    try:
        for job in finished:
            batch.append(insert_job(job))
            count += 1
            if len(batch) >= chunk:
                _flush(engine, batch)
        _flush(engine, batch)
    finally:
        store.close()
    return count


def _flush(engine: sa.engine.Engine, batch: list[Op]) -> None:
    if batch:
        with engine.begin() as conn:
            apply_ops(conn, batch)
        batch.clear()


def naive_history(lab: Lab, pending: Iterable[tuple[pb.Job, float]]) -> list[pb.Job]:
    """Each job finished as if it started at its submit on the first node with its GPUs
    free by then (a quick stand-in history: a store to be replayed, not compared)."""
    free_at = {n: [0.0] * lab.gpus for n in lab.node_names()}
    out = []
    for job, run in pending:
        want = max(job.spec.gpus_per_node, 1)
        best = None
        for node, gpus in free_at.items():
            ready = sorted(range(lab.gpus), key=lambda g: gpus[g])[:want]
            at = max(max(gpus[g] for g in ready), job.submit_time)
            if best is None or at < best[0]:
                best = (at, node, ready)
            if at <= job.submit_time:
                break
        assert best is not None
        start, node, ready = best
        for g in ready:
            free_at[node][g] = start + run
        shards = job.spec.shards_per_node
        out.append(
            record(
                job,
                start,
                start + run,
                [(node, job.num_cpus, job.mem_mb, ready[:1] if shards else ready, shards)],
            )
        )
    return out


def scheduled_history(site: Site, pending: Sequence[tuple[pb.Job, float]]) -> list[pb.Job]:
    """``pending`` jobs finished as a replay under ``site`` schedules them: a history the
    same replay must reproduce start for start (the tests' reference)."""
    first = min(job.submit_time for job, _run in pending)
    last = max(job.submit_time for job, _run in pending) + 1.0
    history = History(first, last, last)
    replayed = []
    for job, run in pending:
        copy = pb.Job()
        copy.CopyFrom(job)
        replayed.append(ReplayJob(copy, [run], pb.JOB_STATE_COMPLETED))
    outcomes = SiteReplay(site, history, replayed).run()
    out = []
    for rj in replayed:
        o = outcomes[rj.job.job_id]
        if not o.start:  # still pending, as the store keeps it
            waiting = pb.Job()
            waiting.CopyFrom(rj.job)
            waiting.state = pb.JOB_STATE_PENDING
            waiting.events.add(time=waiting.submit_time, event="submitted", cause="synthetic")
            out.append(waiting)
            continue
        out.append(
            record(
                rj.job,
                o.start,
                o.end,
                [
                    (a.node, a.cpus, a.mem_mb, tuple(a.gpu_indices), a.shards)
                    for a in rj.job.allocations
                ],
            )
        )
    return out
