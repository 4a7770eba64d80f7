"""The operator's path (issue 22): what a new operator meets setting corral up from the
docs, each a clear message and never silence. Real daemons and commands throughout:
ctld and noded started from a config as an operator would, a munged of the test's own,
real second users, a PostgreSQL standby for the takeover, `corral sim` and `corral up`
as processes."""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory, free_port
from corral.testing.munge import Munged
from corral.testing.munge import available as munge_available
from corral.testing.postgres import TempPostgres
from tests.conftest import BIN, Commands, pg_admin_url, pg_schema, wait_for
from tests.integration.realusers import Users, command, open_dir

pytestmark = pytest.mark.timeout(180)
PY = sys.executable


def write_config(base: pathlib.Path, auth: str, *, controller: str = "127.0.0.1") -> pathlib.Path:
    """A one-node config as the admin guide has the operator write it."""
    base.mkdir(parents=True, exist_ok=True)
    conf = base / "corral.toml"
    conf.write_text(
        f"""[controller]
host = "{controller}"
grpc_port = {free_port()}
http_port = {free_port()}
node_port = {free_port()}
socket = "{base}/ctld.sock"
state_dir = "{base}/state"

[auth]
{auth}

[noded]
spool_dir = "{base}/spool"

[[nodes]]
names = "node01"
cpus = 2
memory_mb = 1024

[[partitions]]
name = "debug"
nodes = "node01"
default = true
"""
    )
    return conf


def run_daemon(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ ctld's start


def test_ctld_refuses_to_start_without_its_jwt_key(tmp_path: pathlib.Path) -> None:
    # the example config names /etc/corral/jwt.key; a missing key used to be found only
    # after "ctld listening" was logged, and ctld then exited
    key = tmp_path / "jwt.key"
    conf = write_config(tmp_path, f'type = "local"\njwt_key = "{key}"')
    proc = run_daemon([PY, "-m", "ctld", "-f", str(conf)])
    assert proc.returncode == 1, proc.stderr
    assert "listening" not in proc.stderr, proc.stderr
    assert f"auth.jwt_key: {key}: cannot read the JWT key" in proc.stderr, proc.stderr
    assert "head -c 32 /dev/urandom" in proc.stderr  # how to make one
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)
    proc = run_daemon([PY, "-m", "ctld", "-f", str(conf)])
    assert proc.returncode == 1 and "readable by its owner only" in proc.stderr, proc.stderr
    assert "listening" not in proc.stderr, proc.stderr


def test_ctld_refuses_a_metrics_token_others_may_read(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "metrics.token"
    conf = write_config(tmp_path, 'type = "local"')
    key = f'metrics_token_file = "{token}"\n\n[auth]'
    conf.write_text(conf.read_text().replace("[auth]", key))
    token.write_text(os.urandom(32).hex())
    token.chmod(0o644)
    proc = run_daemon([PY, "-m", "ctld", "-f", str(conf)])
    assert proc.returncode == 1, proc.stderr
    assert "listening" not in proc.stderr, proc.stderr
    assert f"controller.metrics_token_file: {token}: the metrics token must be readable by its" in (
        proc.stderr
    )
    assert "openssl rand -hex 32" in proc.stderr  # how to make one


def _libmunge_file() -> str:
    found = [
        os.path.realpath(p)
        for pattern in (
            "/lib/*/libmunge.so.2",
            "/usr/lib/*/libmunge.so.2",
            "/usr/lib64/libmunge.so.2",
        )
        for p in glob.glob(pattern)
    ]
    return found[0] if found else ""


def test_ctld_refuses_munge_on_a_host_without_libmunge(tmp_path: pathlib.Path) -> None:
    # a host without the munge package: the library is hidden in a mount namespace of
    # ctld's own (an empty file over it), as on a host where it was never installed
    lib = _libmunge_file()
    if not lib or os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root, unshare and libmunge (.ci/run installs munge)")
    conf = write_config(tmp_path, 'type = "munge"')
    hide = f"mount --bind /dev/null {lib} && exec {PY} -m ctld -f {conf}"
    proc = run_daemon(["unshare", "--mount", "sh", "-c", hide])
    assert proc.returncode == 1, proc.stderr
    assert "listening" not in proc.stderr, proc.stderr
    assert 'auth.type = "munge" but libmunge is not installed' in proc.stderr, proc.stderr
    assert "install the munge package" in proc.stderr


def test_ctld_warns_when_munged_does_not_answer(tmp_path: pathlib.Path) -> None:
    # munged down (or started after ctld): ctld serves (the Unix socket and tokens work)
    # but says at once why TCP users will be refused
    if not munge_available():
        pytest.fail("munged is not installed: apt-get install munge (.ci/run installs it)")
    gone = tmp_path / "no-munged.socket"
    conf = write_config(tmp_path, f'type = "munge"\nmunge_socket = "{gone}"')
    ready = tmp_path / "ready"
    log = tmp_path / "ctld.log"
    with open(log, "w") as out:
        ctld = subprocess.Popen(
            [PY, "-m", "ctld", "-f", str(conf), "--ready-file", str(ready)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: ready.exists() or ctld.poll() is not None, 60, "ctld to answer")
        assert ctld.poll() is None, log.read_text()
    finally:
        ctld.send_signal(signal.SIGTERM)
        ctld.wait(30)
    text = log.read_text()
    assert f"but munged does not answer at {gone}" in text, text
    assert "systemctl enable --now munge" in text, text


# ------------------------------------------------------------------ a login node


@pytest.fixture(scope="module")
def munged() -> Iterator[Munged]:
    if not munge_available():
        pytest.fail("munged is not installed: apt-get install munge (.ci/run installs it)")
    daemon = Munged()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def munge_cluster(munged: Munged, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(
        nodes=1, gpus_per_node=0, auth_type="munge", munge_socket=munged.socket
    )


def login_node(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    """A login host's environment: ctld's gateway over TCP, no Unix socket, no token."""
    return {"CORRAL_CTLD_HTTP": cluster.http_address, "CORRAL_CTLD_SOCKET": "", **extra}


def test_a_login_node_with_the_config_and_ctld_http_sends_munge(
    munge_cluster: LocalCluster, users: Users
) -> None:
    # the admin guide's login node: the config (auth.type = "munge") and CORRAL_CTLD_HTTP;
    # the commands used to skip the config whenever CORRAL_CTLD_HTTP was set, and sent
    # nothing
    bob = users.bob
    env = login_node(munge_cluster, CORRAL_CONF=str(munge_cluster.config_path))
    code, out, err = command(
        munge_cluster, bob, "sbatch", "--parsable", "--wrap", "id -u", cwd=users.home(bob), env=env
    )
    assert code == 0, err
    job = munge_cluster.wait_state(int(out), "COMPLETED", "FAILED")
    assert (job["user"], job["uid"]) == (bob.pw_name, bob.pw_uid)


def test_a_login_node_with_only_ctld_http_sends_munge_or_says_why_not(
    munge_cluster: LocalCluster, munged: Munged, users: Users, tmp_path: pathlib.Path
) -> None:
    # no config on this host at all: munged's credential when munged runs here
    # (CORRAL_MUNGE_SOCKET stands in for libmunge's /run/munge/munge.socket.2)
    bob = users.bob
    none = str(tmp_path / "no-such-corral.toml")
    env = login_node(munge_cluster, CORRAL_CONF=none, CORRAL_MUNGE_SOCKET=munged.socket)
    code, out, err = command(munge_cluster, bob, "squeue", "-h", "-o", "%u", env=env)
    assert code == 0, err
    # without munged either: refused, and the command says why it sent nothing
    env["CORRAL_MUNGE_SOCKET"] = str(tmp_path / "no-munged")
    code, out, err = command(munge_cluster, bob, "squeue", env=env)
    assert code == 1, (out, err)
    assert "no credential" in err, err
    assert (
        f"this command sent none: no SLURM_JWT or CORRAL_TOKEN_FILE, no config file ({none})" in err
    )
    assert f"no munged at {tmp_path / 'no-munged'}" in err, err


# ------------------------------------------------------------------ noded's address


def test_noded_refuses_to_advertise_loopback_to_a_remote_ctld(tmp_path: pathlib.Path) -> None:
    # Debian's /etc/hosts maps the host's own name to 127.0.1.1: a noded without an
    # address would advertise it, and ctld on another host would dial itself. The host
    # is made so in namespaces of noded's own (a hosts file, a hostname)
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare")
    conf = write_config(tmp_path, 'type = "local"', controller="192.0.2.10")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.1.1 gpu01.lab.example gpu01\n")
    script = (
        f"mount --bind {hosts} /etc/hosts && hostname gpu01 && "
        f"exec {PY} -m noded -f {conf} -N node01"
    )
    noded = subprocess.Popen(
        ["unshare", "--mount", "--uts", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = noded.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        noded.kill()
        out, _ = noded.communicate()
        raise AssertionError(f"noded ran on, advertising loopback:\n{out[-3000:]}") from None
    assert noded.returncode == 1, out
    assert "gpu01.lab.example (127.0.1.1), a loopback address" in out, out
    assert "ctld is at 192.0.2.10" in out and "address" in out, out


# ------------------------------------------------------------------ waiting for ctld


def test_a_command_says_so_while_no_controller_answers(tmp_path: pathlib.Path) -> None:
    # two controllers listed, neither answering: the command retries for CORRAL_TIMEOUT,
    # saying so at once, not after a silent wait
    dead = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "CORRAL_CTLD_HTTP": dead,
        "CORRAL_CTLD_SOCKET": "",
        "CORRAL_TIMEOUT": "3",
    }
    started = time.monotonic()
    with subprocess.Popen(
        [str(BIN / "squeue")], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as proc:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        said_after = time.monotonic() - started
        rest = proc.stderr.read()
        assert proc.wait(30) == 1
    assert first.startswith("squeue: Unable to contact slurm controller: no primary answers"), first
    assert "retrying for up to 3 s" in first, first
    assert said_after < 2.5, f"said only after {said_after:.1f} s"
    assert "slurm_load_jobs error: Unable to contact slurm controller" in rest, rest


@pytest.fixture
def pg_url() -> Iterator[str]:
    admin = pg_admin_url()
    if admin:
        with pg_schema(admin) as url:
            yield url
        return
    server = TempPostgres.start()
    if server is None:
        pytest.skip("no PostgreSQL: set CORRAL_TEST_PG_URL (.ci/run does) or install it")
    try:
        yield server.url
    finally:
        server.remove()


def test_a_command_says_so_through_a_takeover(
    pg_url: str, cluster_factory: ClusterFactory, tmp_path: pathlib.Path
) -> None:
    c = cluster_factory(
        nodes=1,
        gpus_per_node=0,
        controllers=2,
        lease_s=3.0,
        store_url=pg_url,
        heartbeat_interval_s=1.0,
        heartbeat_timeout_s=12.0,
    )
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    wait_for(lambda: cmd("squeue", check=False).returncode == 0, 30, "a primary")
    c.kill_process("ctld")  # SIGKILL: the standby takes over within lease_s
    proc = cmd("squeue", "-h", check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and lines[0].startswith("squeue: Unable to contact slurm controller"), lines
    assert "retrying for up to" in lines[0], lines
    assert lines[-1].startswith("squeue: ") and " answered after " in lines[-1], lines


# ------------------------------------------------------------------ options, sim, up


def test_ignored_options_say_so_and_help_does_not_present_them_as_working(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0)
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    proc = cmd("sbatch", "-C", "a100", "--wrap", "true")
    assert proc.stderr.splitlines() == [
        "sbatch: warning: --constraint is ignored: corral places jobs by no node feature "
        "but `container` (--container-image), so the job may run on any node of its partition",
    ]
    assert proc.stdout.startswith("Submitted batch job")
    # mail is refused, never silently dropped, on a cluster without [mail] (issue 26)
    proc = cmd("sbatch", "--mail-type=END", "--mail-user=me", "--wrap", "true", check=False)
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert "--mail-type=END: this cluster sends no mail" in proc.stderr, proc.stderr
    script = work / "s.sh"
    script.write_text("#!/bin/sh\n#SBATCH --mail-type=ALL\ntrue\n")
    assert "this cluster sends no mail" in cmd("sbatch", str(script), check=False).stderr
    assert cmd("sbatch", "--mail-type=NONE", "--wrap", "true").returncode == 0
    assert cmd("sbatch", "-Q", "-C", "x", "--wrap", "true").stderr == ""
    srun = cmd("srun", "-C", "a100", "true")
    assert "srun: warning: --constraint is ignored" in srun.stderr, srun.stderr
    helps = cmd("sbatch", "--help").stdout
    for line in helps.splitlines():
        if "--constraint" in line:
            assert "ignored with a warning" in line, line
        if "--mail-type" in line:
            assert "ignored" not in line and "[mail]" in line, line


def test_corral_sim_refuses_a_file_that_is_not_swf(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("; MaxProcs: 4\n#!/bin/sh\necho hello\n")
    proc = subprocess.run(
        [str(BIN / "corral"), "sim", str(script), "--procs", "4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout == ""  # no table of zeros
    assert f"corral sim: error: {script}:2: not a Standard Workload Format job line" in proc.stderr
    empty = tmp_path / "empty.swf"
    empty.write_text("; MaxProcs: 4\n; nothing else\n")
    proc = subprocess.run(
        [str(BIN / "corral"), "sim", str(empty)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"{empty}: no job with a run time and a processor count" in proc.stderr


def test_corral_up_warns_when_other_users_cannot_run_its_python(tmp_path: pathlib.Path) -> None:
    # root made the venv somewhere private (a Python under /root, mode 0700): jobs run
    # as their users and their srun/scontrol/submitit would fail to start
    if os.geteuid() != 0:
        pytest.skip("only root's clusters run jobs as other users")
    base = open_dir("corral-venv-")  # pytest's own tmp dirs are 0700 all the way
    private = base / "root-home"
    private.mkdir(mode=0o700)
    venv = private / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python3*/site-packages"))
    ours = next(pathlib.Path(sys.prefix).glob("lib/python3*/site-packages"))
    (site / "corral-dev.pth").write_text(f"import site; site.addsitedir({str(ours)!r})\n")
    state = tmp_path / "lab"
    up = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "client.corral_cmd",
            "up",
            "--nodes",
            "1",
            "--gpus-per-node",
            "0",
            "--isolation",
            "loopback",
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stderr
        assert "corral: warning: other users cannot run this environment's Python" in up.stderr
        assert f"{private} is mode 0700" in up.stderr, up.stderr
    finally:
        subprocess.run(
            [str(BIN / "corral"), "down", "--state-dir", str(state)],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(base, ignore_errors=True)
