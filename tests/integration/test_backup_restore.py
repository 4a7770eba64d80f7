"""Backups of a running ctld's store and restores into it, with real daemons:

- a backup taken under load restores to a store a ctld starts from, with every job
  acknowledged before the backup began (SQLite and PostgreSQL); a restore, a schema
  upgrade and a second ctld are refused while a ctld holds the store;
- a rollback (docs/operations.md): the backup from before ``corral db upgrade`` goes
  back, ctld starts on it, and the node, registering again, keeps the job the restored
  store knows and fences (kills) the one it does not;
- hostile files: a link or file another user planted where a backup is written is
  replaced, never written through; a backup another user owns or may write, or a
  link to one, is refused.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from corral.errors import CorralError
from corral.testing.backups import backup, corral_db, restore
from corral.testing.cluster import ClusterFactory
from tests.conftest import Commands, pg_schema, pg_url_or_skip, pid_alive, wait_for
from tests.integration.realusers import Users, as_user, open_dir

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """ "" (SQLite in the cluster's state dir) or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield ""
        return
    with pg_schema(pg_url_or_skip()) as url:
        yield url


def sacct_ids(cmd: Commands) -> list[str]:
    out = cmd("sacct", "-X", "-n", "-P", "-o", "JobID", "-S", "2000-01-01", "-a").stdout
    return [line.split("|")[0] for line in out.split()]


def test_a_backup_under_load_restores_every_acknowledged_job(
    store_url: str, tmp_path: pathlib.Path, cluster_factory: ClusterFactory
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0, store_url=store_url)
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    acked: list[str] = []
    refused: list[str] = []
    stop = threading.Event()
    spec = {"script": "#!/bin/sh\ntrue\n", "workDir": str(work), "name": "load", "hold": True}

    def load() -> None:
        client = c.client()
        while not stop.is_set():
            try:
                acked.append(client.call("SubmitJob", {"spec": spec})["jobId"])
            except CorralError as exc:
                refused.append(exc.message)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= 30, 30, "submissions before the backup")
        before = list(acked)  # acknowledged before the backup began: it must hold them
        path = tmp_path / "store.backup"
        out = backup(c, path)
        after = len(acked)
        wait_for(lambda: len(acked) >= after + 10, 30, "submissions after the backup")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not refused, refused[:3]  # a backup costs the running ctld nothing
    assert "backed up to" in out and path.stat().st_mode & 0o777 == 0o600

    # while ctld runs: no restore, no upgrade, no second ctld on a SQLite store
    held = f"held by ctld (pid {c.procs['ctld'].pid}" if not store_url else "a ctld session"
    for action in (("restore", str(path)), ("upgrade",)):
        done = corral_db(c, *action, check=False)
        assert done.returncode == 1 and held in done.stderr, done.stderr
    if not store_url:
        second = subprocess.run(
            [sys.executable, "-m", "ctld", "-f", str(c.config_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1 and held in second.stderr, second.stderr

    out = restore(c, path)
    assert "restored from" in out
    ids = sacct_ids(cmd)
    assert len(ids) == len(set(ids))
    assert set(before) <= set(ids), "an acknowledged job is missing from the restored store"
    assert set(ids) <= set(acked), "the restored store has a job never acknowledged"
    assert len(ids) < len(acked)  # what came after the backup is gone, as documented
    # ctld runs on it: it takes jobs again, numbered after the restored store's last
    new = cmd("sbatch", "--parsable", "-H", "--wrap", "true").stdout.strip()
    assert int(new) == max(int(i) for i in ids) + 1
    if not store_url:
        kept = out.split("the store it replaced is kept as ")[1].strip()
        assert pathlib.Path(kept).stat().st_mode & 0o777 == 0o600


def test_a_rollback_keeps_the_jobs_the_backup_knows_and_fences_the_rest(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory
) -> None:
    # a long heartbeat timeout: the node must not fence its jobs on its own while ctld
    # is stopped for the restore, only when the restored ctld tells it to
    c = cluster_factory(nodes=1, gpus_per_node=0, heartbeat_interval_s=1.0, heartbeat_timeout_s=60)
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)

    def submit(name: str) -> tuple[str, int]:
        script = f"echo $$ > {name}.pid; while [ ! -e {name}.end ]; do sleep 0.1; done; echo done"
        job_id = cmd("sbatch", "--parsable", "-o", f"{name}.out", "--wrap", script).stdout.strip()
        cmd.wait_state(job_id, "RUNNING")
        pid_file = work / f"{name}.pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, f"{name} to start")
        return job_id, int(pid_file.read_text())

    kept, kept_pid = submit("kept")
    path = tmp_path / "before-upgrade.backup"
    backup(c, path)
    # the upgrade: ctld stopped (the command refuses otherwise), the schema migrated,
    # the new version runs a while and starts a job the backup cannot know
    c.stop_process("ctld")
    assert "already at" in corral_db(c, "upgrade").stdout  # (one version here: at head)
    c.start_ctld()
    fenced, fenced_pid = submit("fenced")

    restore(c, path)  # the rollback: the backup back, the previous ctld started on it
    wait_for(lambda: not pid_alive(fenced_pid), 30, "the job the restored store lacks fenced")
    node_log = (c.state_dir / "log" / f"{c.node_names[0]}.log").read_text()
    assert "fenced jobs ctld gave to other nodes" in node_log and fenced in node_log
    assert pid_alive(kept_pid), "the job the restored store knows was killed"
    assert c.state(kept) == "RUNNING"
    with pytest.raises(CorralError, match="Invalid job id"):
        c.job(fenced)  # unknown to the restored store
    # the node takes work again once the fenced job is gone, and the kept one ends well
    wait_for(lambda: cmd("sinfo", "-h", "-o", "%T").stdout.split() == ["mixed"], 30, "node back")
    (work / "kept.end").touch()
    cmd.wait_state(kept, "COMPLETED")
    assert (work / "kept.out").read_text() == "done\n"


# ------------------------------------------------------------ hostile files


def sqlite_store(tmp_path: pathlib.Path) -> str:
    url = f"sqlite:///{tmp_path}/store.db"
    db(["upgrade", "--url", url])
    return url


def db(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ctld.db", *argv], capture_output=True, text=True, timeout=60
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def drop() -> Iterator[pathlib.Path]:
    """A directory like /tmp: everyone may write in it, sticky."""
    path = open_dir("corral-drop-")
    path.chmod(0o1777)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def test_a_backup_replaces_what_another_user_planted_never_writes_through(
    users: Users, tmp_path: pathlib.Path, drop: pathlib.Path
) -> None:
    url = sqlite_store(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link, planted = drop / "via-link.backup", drop / "planted.backup"

    def plant() -> None:
        os.symlink(victim, link)
        planted.write_text("alice's\n")
        planted.chmod(0o666)

    assert as_user(users.alice, plant)[0] == 0
    inode = planted.stat().st_ino
    for dest in (link, planted):
        db(["backup", "--url", url, str(dest)])
        st = dest.lstat()
        assert st.st_uid == 0 and st.st_mode == 0o100600, oct(st.st_mode)
    assert victim.read_text() == "precious\n"
    assert planted.stat().st_ino != inode  # a new file, not hers written over
    assert not [p.name for p in drop.iterdir() if p.name.startswith(".")]  # no temp left
    # a name that looks like an option is a file name after --
    done = subprocess.run(
        [sys.executable, "-m", "ctld.db", "backup", "--url", url, "--", "-x.backup"],
        cwd=drop,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (drop / "-x.backup").stat().st_mode == 0o100600


def test_a_backup_another_user_could_have_written_is_refused(
    users: Users, tmp_path: pathlib.Path, drop: pathlib.Path
) -> None:
    url = sqlite_store(tmp_path)
    good = tmp_path / "good.backup"
    db(["backup", "--url", url, str(good)])
    content = good.read_bytes()
    forged, link = drop / "forged.backup", drop / "link.backup"

    def plant() -> None:
        forged.write_bytes(content)  # hers: she could have put any job in it
        forged.chmod(0o600)
        os.symlink(good, link)

    assert as_user(users.alice, plant)[0] == 0
    writable = tmp_path / "writable.backup"
    writable.write_bytes(content)
    writable.chmod(0o620)
    before = (tmp_path / "store.db").read_bytes()
    for path, why in (
        (forged, f"owned by uid {users.alice.pw_uid}, not by you"),
        (writable, "mode 0620: others may write it"),
        (link, "is a symbolic link"),
    ):
        done = db(["restore", "--url", url, str(path)], check=False)
        assert done.returncode == 1 and why in done.stderr, done.stderr
        done = db(["verify", str(path)], check=False)
        assert done.returncode == 1 and why in done.stderr, done.stderr
    assert (tmp_path / "store.db").read_bytes() == before
    assert not list(tmp_path.glob("store.db.replaced-*"))
