"""corral sim --from-store: the site's history read from a real (SQLite) store and
replayed through the scheduling core: a replay of its own schedule reproduces every
start; a candidate with more shares for an account shortens that account's waits;
dependencies, arrays' %N, holds, --begin, reservations (from the reservation log),
preemption and jobs carried into the window are replayed as ctld would treat them."""

from __future__ import annotations

import itertools
import pathlib
import subprocess
import sys
import tomllib

import pytest
import sqlalchemy as sa

from corral.config import parse_config
from corral.jobspec import fill
from corral.wire import corral_pb2 as pb
from ctld.sim import history as hist
from ctld.sim import site as sm
from ctld.sim import synthetic as syn
from ctld.sim.site_engine import SiteReplay
from ctld.sim.site_jobs import replay_jobs
from ctld.sim.site_report import Run, fidelity, real_rows, replay_rows, summarize
from ctld.storage.store_rows import Op, apply_ops

T0 = 1_700_000_000.0
CORRAL = pathlib.Path(sys.executable).parent / "corral"


def config_text(url: str, extra: str = "", nodes: int = 2) -> str:
    return (
        f'cluster_name = "lab"\n[controller]\nstore_url = "{url}"\n'
        f'[[nodes]]\nnames = "n[1-{nodes}]"\ncpus = 64\nmemory_mb = 524288\n'
        'gpus = { backend = "fake", count = 8 }\n'
        f'[[partitions]]\nname = "gpu"\nnodes = "n[1-{nodes}]"\ndefault = true\n'
        f'max_time = "1-00:00:00"\n{extra}'
    )


def job(
    job_id: int,
    submit: float,
    gpus: int = 8,
    limit: int = 3600,
    user: str = "alice",
    account: str = "a",
    **spec: object,
) -> pb.Job:
    s = pb.JobSpec(
        name=str(spec.pop("name", f"j{job_id}")),
        partitions=["gpu"],
        account=account,
        ntasks=1,
        cpus_per_task=8,
        mem_per_node_mb=1024,
        gpus_per_node=gpus,
        time_limit_s=limit,
        **spec,  # type: ignore[arg-type]
    )
    fill(s)
    return pb.Job(
        job_id=job_id,
        spec=s,
        user=user,
        account=account,
        partition="gpu",
        state=pb.JOB_STATE_PENDING,
        time_limit_s=limit,
        submit_time=submit,
        eligible_time=max(submit, s.begin_time),
        num_cpus=8,
        mem_mb=1024,
        num_gpus=gpus,
        qos="normal",
    )


class Lab:
    """A store written with a history, and the config naming it."""

    def __init__(self, tmp: pathlib.Path, extra: str = "", nodes: int = 2) -> None:
        self.url = f"sqlite:///{tmp}/store.db"
        self.config_path = tmp / "corral.toml"
        self.config_path.write_text(config_text(self.url, extra, nodes))
        self.config = parse_config(tomllib.loads(self.config_path.read_text()))
        self.site = sm.running_site(self.config, [])
        self.site.nodes = sm.node_sizes(self.config, [])

    def schedule(self, pending: list[tuple[pb.Job, float]]) -> list[pb.Job]:
        """``pending`` run as the replay schedules them, written as the real history."""
        done = syn.scheduled_history(self.site, pending)
        syn.write_store(self.url, done)
        return done

    def replay(self, site: sm.Site | None = None, start: float | None = None) -> Run:
        history = hist.read(hist.open_engine(self.url), start, T0 + 10 * 86400)
        chosen = site or sm.running_site(self.config, history.accounting)
        chosen.nodes = sm.node_sizes(chosen.config, history.jobs)
        jobs = replay_jobs(history, {})
        run = Run(chosen.name, replay_rows(jobs, SiteReplay(chosen, history, jobs).run()), chosen)
        summarize(run, history, lambda _p: 16)
        return run

    def real(self, start: float | None = None) -> Run:
        history = hist.read(hist.open_engine(self.url), start, T0 + 10 * 86400)
        return Run("real", real_rows(replay_jobs(history, {})), self.site)


def starts(run: Run) -> dict[int, float]:
    return {r.job_id: r.start for r in run.rows}


def test_a_replay_of_its_own_schedule_reproduces_every_start(tmp_path: pathlib.Path) -> None:
    lab = syn.Lab(nodes=4)
    url = f"sqlite:///{tmp_path}/store.db"
    config = parse_config(tomllib.loads(lab.config(url)))
    site = sm.running_site(config, [])
    site.nodes = sm.node_sizes(config, [])
    pending = syn.jobs(lab, 400, load=1.2, t0=T0)
    syn.write_store(url, syn.scheduled_history(site, pending))
    (tmp_path / "corral.toml").write_text(lab.config(url))
    history = hist.read(hist.open_engine(url), None, T0 + 30 * 86400)
    jobs = replay_jobs(history, {})
    replayed = replay_rows(jobs, SiteReplay(site, history, jobs).run())
    real = real_rows(replay_jobs(history, {}))
    waited = [r for r in real if r.wait > 60]
    assert len(waited) > 50  # a queue formed: the order mattered
    fid = fidelity(real, replayed, 0.0, 0.0)
    assert fid.compared == 400 and fid.within == 400 and fid.max_s == 0.0
    # the command says the same
    shown = subprocess.run(
        [
            str(CORRAL),
            "sim",
            "--from-store",
            str(tmp_path / "corral.toml"),
            "--end",
            str(T0 + 30 * 86400),
            "--by",
            "account",
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert shown.returncode == 0, shown.stderr
    assert "fidelity: 400 of 400 jobs (100%)" in shown.stdout
    assert "start error median 0.0 s" in shown.stdout


def test_doubling_an_accounts_shares_shortens_its_waits(tmp_path: pathlib.Path) -> None:
    # two accounts with the same usage behind them, then a burst from both on one node:
    # fair-share decides the order, so the account with twice the shares goes first
    extra = (
        '[[accounts]]\nname = "a"\nusers = ["alice"]\n[[accounts]]\nname = "b"\nusers = ["bob"]\n'
    )
    lab = Lab(tmp_path, extra, nodes=1)
    pending = [
        (job(1, T0, user="alice", account="a"), 600.0),
        (job(2, T0 + 700, user="bob", account="b"), 600.0),
    ]
    burst = T0 + 1400
    for i in range(10):
        pending.append((job(10 + i, burst + i, user="alice", account="a"), 300.0))
        pending.append((job(30 + i, burst + i, user="bob", account="b"), 300.0))
    lab.schedule(pending)
    doc = sm.apply_overrides(tomllib.loads(lab.config_path.read_text()), ["accounts.a.shares=2"])
    config = sm.make_config(doc, "candidate")
    history = hist.read(hist.open_engine(lab.url), None, T0 + 86400)
    running = lab.replay()
    candidate = lab.replay(sm.candidate_site(lab.site, config, history.accounting, []))
    a_then, a_now = running.groups["account"]["a"], candidate.groups["account"]["a"]
    b_then, b_now = running.groups["account"]["b"], candidate.groups["account"]["b"]
    assert a_now.mean_wait < a_then.mean_wait and b_now.mean_wait > b_then.mean_wait
    # its fair-share target follows its shares: half of the GPU-hours, then two thirds
    total = sum(s.gpu_hours for s in candidate.groups["account"].values())
    assert a_then.target_gpu_hours == pytest.approx(total / 2)
    assert a_now.target_gpu_hours == pytest.approx(total * 2 / 3)


def test_dependencies_arrays_holds_and_begin_times_are_replayed(tmp_path: pathlib.Path) -> None:
    lab = Lab(tmp_path)
    first = job(1, T0, gpus=1)
    after = job(2, T0, gpus=1, dependency="afterok:1")
    never = job(3, T0, gpus=1, dependency="afternotok:1")
    begin = job(4, T0, gpus=1, begin_time=T0 + 5000)
    pending = [(first, 1000.0), (after, 100.0), (never, 100.0), (begin, 100.0)]
    for task in range(4):  # an array of 4 with %1: one task at a time
        t = job(10 + task, T0, gpus=1, array="0-3%1", name="arr")
        t.array_job_id, t.array_task_id = 10, task
        pending.append((t, 500.0))
    lab.schedule(pending)
    run = lab.replay()
    by = {r.job_id: r for r in run.rows}
    assert by[2].start >= by[1].end == T0 + 1000
    assert by[2].wait == 0  # eligible once its dependency was met: not a scheduler wait
    assert by[3].start == 0  # afternotok on a job that completed: never
    assert by[4].start >= T0 + 5000
    spans = sorted((by[i].start, by[i].end) for i in range(10, 14))
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # never two


def test_holds_from_the_story_are_replayed(tmp_path: pathlib.Path) -> None:
    lab = Lab(tmp_path)
    held = job(1, T0, gpus=1)
    done = syn.record(held, T0 + 900, T0 + 1000, [("n1", 8, 1024, (0,), 0)])
    done.events.add(time=T0, event="held", to_state=pb.JOB_STATE_PENDING)
    done.events.add(time=T0 + 900, event="released", to_state=pb.JOB_STATE_PENDING)
    syn.write_store(lab.url, [done])
    (row,) = lab.replay().rows
    assert row.start == T0 + 900 and row.wait == 0


def test_a_reservation_from_the_log_keeps_its_nodes(tmp_path: pathlib.Path) -> None:
    lab = Lab(tmp_path)
    resv = pb.Reservation(
        name="maint", start_time=T0 + 1000, end_time=T0 + 5000, nodes="n1", users=["carol"]
    )
    inside = job(1, T0, user="carol", reservation="maint", limit=600)
    others = [job(2 + i, T0 + 10, limit=7200) for i in range(2)]  # 2 h: overlap the window
    ran = [syn.record(j, T0 + 20, T0 + 80, [("n2", 8, 1024, (), 0)]) for j in (inside, *others)]
    syn.write_store(lab.url, ran)
    engine = sa.create_engine(lab.url)
    with engine.begin() as conn:
        apply_ops(conn, [Op(reservations_put=[resv], reservations_at=T0 - 100)])
        apply_ops(conn, [Op(reservations_delete=["maint"], reservations_at=T0 + 5000)])
    engine.dispose()
    run = lab.replay()
    by = {r.job_id: r for r in run.rows}
    assert T0 + 1000 <= by[1].start < T0 + 5000  # only inside its window
    # the 2-hour jobs may not end inside the window on n1: one runs on n2 at once,
    # the other after it (or after the window)
    assert sorted(r.start for r in (by[2], by[3]))[0] == T0 + 10


def test_preemption_is_replayed_and_counted(tmp_path: pathlib.Path) -> None:
    extra = (
        '[scheduler]\npreempt_mode = "requeue"\n'
        '[[qos]]\nname = "high"\npriority = 100\npreempt = ["normal"]\n'
    )
    lab = Lab(tmp_path, extra, nodes=1)
    low = job(1, T0, gpus=8, limit=7200)
    high = job(2, T0 + 600, gpus=8, limit=600)
    high.qos = "high"
    lab.schedule([(low, 3000.0), (high, 300.0)])
    run = lab.replay()
    by = {r.job_id: r for r in run.rows}
    assert by[2].start == T0 + 600  # it took the node at once
    assert by[1].preempted == 1 and by[1].end >= T0 + 900 + 3000  # then ran again, whole
    assert run.groups["account"]["a"].preempted == 1


def test_jobs_running_when_the_window_opens_keep_their_nodes(tmp_path: pathlib.Path) -> None:
    lab = Lab(tmp_path, nodes=1)
    long = job(1, T0, gpus=8, limit=7200)
    later = job(2, T0 + 3600, gpus=8, limit=600)
    lab.schedule([(long, 5000.0), (later, 100.0)])
    run = lab.replay(start=T0 + 1800)  # job 1 runs when the window opens
    (row,) = run.rows  # only job 2 was submitted in the window
    assert row.job_id == 2 and row.start == T0 + 5000


def test_overrides_name_tables_and_entries() -> None:
    doc = {
        "scheduler": {"placement": "pack"},
        "nodes": [{"names": "n1", "cpus": 8, "memory_mb": 1024}],
        "partitions": [{"name": "gpu", "nodes": "n1"}],
    }
    out = sm.apply_overrides(
        doc,
        [
            "scheduler.placement=fgd",
            'partitions.gpu.max_time="2:00:00"',
            "accounts.ml.shares=6",
            "priority.tres_weights={ gpu = 20.0 }",
        ],
    )
    assert out["scheduler"]["placement"] == "fgd" and doc["scheduler"]["placement"] == "pack"
    assert out["partitions"][0]["max_time"] == "2:00:00"
    assert out["accounts"] == [{"name": "ml", "shares": 6}]
    assert out["priority"]["tres_weights"] == {"gpu": 20.0}
    for bad, words in (
        ("scheduler.placement", "expected KEY=VALUE"),
        ("=3", "expected KEY=VALUE"),
        ("partitions.cpu.max_time=1", "no partition 'cpu'"),
        ("accounts.ml=2", "name the entry and its key"),
        ("scheduler.placement.x=1", "is not a table"),
    ):
        with pytest.raises(sm.ConfigError, match=words):
            sm.apply_overrides(doc, [bad])
    with pytest.raises(sm.ConfigError, match="placement: must be pack"):
        sm.make_config(sm.apply_overrides(doc, ["scheduler.placement=best"]), "c")


def test_export_swf_is_anonymous_and_a_trace_corral_replays(tmp_path: pathlib.Path) -> None:
    lab = Lab(tmp_path)
    secret = "mallory-7fb2"
    pending = [
        (job(1, T0, user=secret, account="secretproj", name="my-thesis"), 300.0),
        (job(2, T0 + 5, user="alice", account="a", dependency="afterany:1"), 60.0),
    ]
    done = lab.schedule(pending)
    done_uid = {j.job_id: j for j in done}
    assert done_uid
    out = tmp_path / "site.swf"
    made = subprocess.run(
        [
            str(CORRAL),
            "sim",
            "--from-store",
            str(lab.config_path),
            "--end",
            str(T0 + 86400),
            "--export-swf",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    text = out.read_text()
    for word in (secret, "secretproj", "my-thesis", "alice", "n1"):
        assert word not in text
    lines = [ln.split() for ln in text.splitlines() if not ln.startswith(";")]
    assert [int(f[11]) for f in lines] == [1, 2] and [int(f[12]) for f in lines] == [1, 2]
    assert int(lines[1][16]) == 1  # its preceding job: the first one
    replayed = subprocess.run(
        [str(CORRAL), "sim", str(out), "--procs", "128", "--policy", "easy"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert replayed.returncode == 0 and "| easy | 2 |" in replayed.stdout, replayed.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "scheduler.placement=best"], "placement: must be pack"),
        (["--start", "2030-01-02", "--end", "2030-01-01"], "the window is empty"),
        (["--start", "yesterday-ish"], "Invalid --start specification"),
        (["--by", "queue"], "--by 'queue'"),
    ],
)
def test_bad_input_is_named_with_exit_1(
    tmp_path: pathlib.Path, args: list[str], words: str
) -> None:
    lab = Lab(tmp_path)
    lab.schedule([(job(1, T0), 60.0)])
    done = subprocess.run(
        [str(CORRAL), "sim", "--from-store", str(lab.config_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_store_that_is_not_there_or_not_a_store(tmp_path: pathlib.Path) -> None:
    for url, words in (
        (f"sqlite:///{tmp_path}/none.db", "cannot read the store: No such file"),
        ("mysql://u:secret@h/db", "only sqlite:///PATH and postgresql://"),
        ("sqlite://", "not a store file"),
    ):
        done = subprocess.run(
            [str(CORRAL), "sim", "--from-store", url, "-f", str(_config(tmp_path))],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and words in done.stderr, done.stderr
        assert "secret" not in done.stderr
    (tmp_path / "junk.db").write_text("not sqlite at all " * 100)
    done = subprocess.run(
        [
            str(CORRAL),
            "sim",
            "--from-store",
            f"sqlite:///{tmp_path}/junk.db",
            "-f",
            str(_config(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "cannot read the store" in done.stderr


def _config(tmp: pathlib.Path) -> pathlib.Path:
    path = tmp / "c.toml"
    path.write_text(config_text(f"sqlite:///{tmp}/unused.db"))
    return path


async def test_the_store_logs_every_reservation_change_with_its_time(
    tmp_path: pathlib.Path,
) -> None:
    from corral.identity import Identity
    from ctld.model.reservations import Reservations
    from ctld.storage.store import Store

    url = f"sqlite:///{tmp_path}/store.db"
    config = parse_config(tomllib.loads(config_text(url)))
    clock = [T0]
    book = Reservations(config, lambda: clock[0])
    store = Store(url)
    store.open()
    try:
        spec = pb.Reservation(
            name="maint", start_time=T0 + 100, duration_s=600, nodes="n1", users=["root"]
        )
        _resv, op = book.create(Identity("root", 0, 0), spec, lambda *_: [])
        await store.commit(op)
        clock[0] = T0 + 50
        await store.commit(book.update(pb.UpdateReservationRequest(name="maint", nodes="n2")))
        clock[0] = T0 + 800
        expired = book.expired()
        assert expired is not None
        await store.commit(expired)
    finally:
        store.close()
    versions = hist.read(hist.open_engine(url), T0, T0 + 1000).reservations
    assert [(v.since, v.until, v.resv.nodes) for v in versions] == [
        (T0, T0 + 50, "n1"),
        (T0 + 50, T0 + 800, "n2"),
    ]
