"""ctld's HTTP port against a second real user (issue 34; docs/security.md, "The local
attacker"): what bob's job name may do to another viewer's live page, who may scrape
/metrics and what it shows under private_data, what root opens when bob views his
own job page whose -o names a FIFO, a device or a file of root's, and what alice's page
of bob's requeued job shows under private_data = ["accounting"] (issue 37).

One cluster, with private_data = ["jobs", "accounting"] and op its operator (the
earlier-runs test starts its own, with "accounting" alone). Views are
read over plain HTTP with the session a real ``corral web-login`` (run as the user)
starts, as the page's script reads them: no browser needed for what a stream or a view
carries.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import pwd
import shutil
import socket
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPConnection, HTTPException
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.config import load_config
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory, free_port
from tests.conftest import wait_for
from tests.integration.realusers import Users, as_user, can_make_users, command, open_dir, submit_as
from tests.integration.stored import rewrite_stored
from tests.openwatch import OpenWatch
from tests.ssestream import events

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]

ROOTS_SECRET = f"root-only-{os.urandom(4).hex()}\n"
USER_FAMILIES = ("corral_user_jobs", "corral_user_gpus", "corral_user_gpu_seconds")


@pytest.fixture(scope="module")
def lab(users: Users, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(
        nodes=1,
        gpus_per_node=1,
        controller_config=(
            f'operators = ["{users.op.pw_name}"]\n'
            'private_data = ["jobs", "accounting"]\n'
            f"metrics_port = {free_port()}"
        ),
    )


def session(c: LocalCluster, pw: pwd.struct_passwd) -> dict[str, str]:
    """The headers of a web session ``pw`` started with her own ``corral web-login``:
    the login token (after '#') traded for a session token, as the page's script does."""
    code, out, err = command(c, pw, "corral_cmd", "web-login", "--url-only")
    assert code == 0, err
    token = parse_qs(urlsplit(out.strip()).fragment)["token"][0]
    conn = HTTPConnection(c.http_address, timeout=10)
    body = json.dumps({"token": token})
    conn.request("POST", "/login", body=body, headers={"Content-Type": "application/json"})
    reply = conn.getresponse()
    said = reply.read()
    assert reply.status == 200, said
    conn.close()
    return {"Authorization": f"Bearer {json.loads(said)['session']}"}


def view(c: LocalCluster, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """A page's view as its script gets it: (status, the HTML of its <main>)."""
    conn = HTTPConnection(c.http_address, timeout=20)
    try:
        conn.request("GET", f"/view{path}", headers=headers)
        reply = conn.getresponse()
        return reply.status, str(json.loads(reply.read())["html"])
    finally:
        conn.close()


# ---------------------------------------------------------------- the live stream


def test_a_job_name_forges_no_event_on_another_viewers_live_page(
    lab: LocalCluster, users: Users
) -> None:
    """bob's job names carry an event stream's own syntax after a CR, a CRLF and an LF;
    op's live queue must get them as text in its one kind of event, never an event of
    their making (a forged "logout" reloads every viewer's page). sbatch refuses such a
    name now (mail34); a ctld of an older version stored them: they are planted so."""
    tag = os.urandom(3).hex()
    names = {
        f"cr{tag}\r\revent: logout\rdata: forged\r\r",
        f"crlf{tag}\r\n\r\nevent: logout\r\ndata: forged\r\n\r\n",
        f"lf{tag}\n\nevent: logout\ndata: forged\n\n",
    }
    code, _, err = command(
        lab, users.bob, "sbatch", "-H", "-J", next(iter(names)), "--wrap", "true"
    )
    assert code != 0 and "control character" in err, err
    planted = {}
    for name in names:
        planted[submit_as(lab, users, users.bob, "-H", "-J", "plain", "--wrap", "true")] = name
    lab.stop_process("ctld")
    for job_id, name in planted.items():
        rewrite_stored(lab, job_id, lambda spec, name=name: setattr(spec, "name", name))
    lab.start_ctld()
    shown = {name.replace("\r\n", "\n").replace("\r", "\n") for name in names}
    conn = HTTPConnection(lab.http_address, timeout=30)
    conn.request("GET", "/events?view=/queue&digest=", headers=session(lab, users.op))
    reply = conn.getresponse()
    assert reply.status == 200 and reply.headers["Content-Type"] == "text/event-stream"
    chunks: list[bytes] = []

    def read() -> None:  # as the browser would: whatever arrives, as it arrives
        with contextlib.suppress(OSError, ValueError, HTTPException):
            while chunk := reply.read1(65536):
                chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def stream() -> list[tuple[str, str]]:
        return events(b"".join(chunks).decode(errors="replace"))

    def names_shown(got: list[tuple[str, str]]) -> bool:
        return any(all(name in data for name in shown) for _, data in got)

    def settled() -> list[tuple[str, str]] | None:
        got = stream()
        forged = any(kind != "view" for kind, _ in got)
        return got if forged or names_shown(got) else None

    try:
        got = wait_for(settled, 20, "op's live queue showing bob's three jobs")
    finally:
        assert conn.sock is not None
        conn.sock.shutdown(socket.SHUT_RDWR)  # ends the reader's read
        reader.join(5)
        conn.close()
    kinds = [kind for kind, _ in got]
    assert set(kinds) == {"view"}, f"a job name made events of its own: {kinds}"
    assert names_shown(got)


# ---------------------------------------------------------------- a job page's earlier runs


def test_a_requeued_jobs_earlier_runs_follow_private_data_accounting(
    users: Users, cluster_factory: ClusterFactory
) -> None:
    """Under private_data = ["accounting"] alice may list bob's job (squeue) but not
    its accounting: sacct -D and ``corral history`` show her none of its runs, and
    neither does its page (issue 37: the page read the earlier runs from the store
    with no check); bob and the operator see them."""
    lab = cluster_factory(
        nodes=1,
        gpus_per_node=0,
        controller_config=f'operators = ["{users.op.pw_name}"]\nprivate_data = ["accounting"]',
    )
    job = submit_as(lab, users, users.bob, "--requeue", "-J", "rerun", "--wrap", "sleep 300")
    lab.wait_state(job, "RUNNING")
    code, _, err = command(lab, users.bob, "scontrol", "requeue", str(job))
    assert code == 0, err
    wait_for(
        lambda: lab.job(job).get("restartCount") == 1 and lab.state(job) == "RUNNING", 60, "run 1"
    )
    pages = {
        pw.pw_name: view(lab, f"/job/{job}", session(lab, pw))
        for pw in (users.alice, users.bob, users.op)
    }
    for pw in (users.bob, users.op):
        status, page = pages[pw.pw_name]
        assert status == 200 and "Earlier runs" in page, (pw.pw_name, page[-800:])
    status, page = pages[users.alice.pw_name]
    assert status == 200 and "rerun" in page, page[-800:]  # the job itself: squeue's rule
    assert "Earlier runs" not in page, page[page.index("Earlier runs") - 200 :][:800]
    code, _, err = command(lab, users.alice, "corral_cmd", "history", str(job))
    assert code == 1 and "Invalid job id specified" in err, err  # the same rule
    command(lab, users.bob, "scancel", str(job))


# ---------------------------------------------------------------- /metrics


def scrape_as(pw: pwd.struct_passwd, url: str, token: str = "") -> tuple[int, str]:
    """A scrape of ``url`` by a process that is ``pw``: (status, its challenge)."""

    def body() -> None:
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                print(reply.status)
        except urllib.error.HTTPError as exc:
            print(exc.code, exc.headers.get("WWW-Authenticate", ""), sep="\n")

    code, out, err = as_user(pw, body)
    assert code == 0, err
    status, _, challenge = out.strip().partition("\n")
    return int(status), challenge


def test_metrics_answer_only_the_token_and_hide_users_under_private_data(
    lab: LocalCluster, users: Users
) -> None:
    running = submit_as(lab, users, users.bob, "-t", "5", "--gres=gpu:1", "--wrap", "sleep 120")
    lab.wait_state(running, "RUNNING")
    metrics_port = load_config(str(lab.config_path)).controller.metrics_port
    urls = [
        f"http://{lab.http_address}/metrics",
        f"http://{lab.controller_host}:{metrics_port}/metrics",
    ]
    bob = users.bob
    for url in urls:  # the gateway's port and the metrics port alike
        assert scrape_as(bob, url) == (401, 'Bearer realm="corral metrics"')
        assert scrape_as(bob, url, "guess" * 8)[0] == 401
    code, _, err = as_user(bob, lambda: print(lab.metrics_token_path.read_text()))
    assert code != 0 and "Permission denied" in err  # the token is root's alone
    token = lab.metrics_token_path.read_text().strip()
    assert scrape_as(bob, urls[1], token)[0] == 200  # whoever has the token, not who asks

    families = {f.name: f for f in text_string_to_metric_families(lab.scrape())}
    running_jobs = [
        s.value for s in families["corral_jobs"].samples if s.labels["state"] == "RUNNING"
    ]
    assert running_jobs == [1.0] and "corral_node_gpus_allocated" in families
    # private_data: squeue and sacct hide bob's jobs and usage from others, so do the metrics
    assert not set(USER_FAMILIES) & set(families), sorted(families)
    text = lab.scrape()
    assert bob.pw_name not in text and "user=" not in text


# ---------------------------------------------------------------- the job page's output


@pytest.fixture
def trap(users: Users) -> Iterator[pathlib.Path]:
    """root's FIFO, device and file, and bob's links to the file, all bob may name."""
    base = open_dir("corral-trap-")
    os.mkfifo(base / "fifo", 0o600)
    os.mknod(base / "device", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    private = base / "private"
    private.mkdir(mode=0o755)
    (private / "secret.out").write_text(ROOTS_SECRET)
    (private / "secret.out").chmod(0o600)
    home = users.home(users.bob)

    def links() -> None:
        for name in ("link.out", "dir"):
            (home / name).unlink(missing_ok=True)
        os.symlink(private / "secret.out", home / "link.out")
        os.symlink(private, home / "dir")

    assert as_user(users.bob, links)[0] == 0
    yield base
    for name in ("link.out", "dir"):
        (home / name).unlink(missing_ok=True)
    shutil.rmtree(base)


def test_root_opens_no_fifo_device_or_roots_file_that_bobs_output_names(
    lab: LocalCluster, users: Users, trap: pathlib.Path
) -> None:
    home = users.home(users.bob)
    named = {
        "fifo": trap / "fifo",
        "device": trap / "device",
        "link": home / "link.out",
        "dir link": home / "dir" / "secret.out",
    }
    jobs = {
        what: submit_as(lab, users, users.bob, "-o", str(path), "--wrap", "true")
        for what, path in named.items()
    }
    for job_id in jobs.values():  # bob's own shell cannot open any of them: the job fails
        lab.wait_state(job_id, "FAILED", "COMPLETED", timeout=60)
    watch = OpenWatch()
    for path in ("fifo", "device", "private/secret.out"):
        watch.add(str(trap / path))
    # a writer waits for a reader of the FIFO: any open of it for reading lets it through
    writer = threading.Thread(
        target=lambda: os.close(os.open(trap / "fifo", os.O_WRONLY)), daemon=True
    )
    writer.start()
    headers = session(lab, users.bob)
    try:
        pages: dict[str, str] = {}
        for what, job_id in jobs.items():
            started = time.monotonic()
            status, page = view(lab, f"/job/{job_id}", headers)
            took = time.monotonic() - started
            assert status == 200, (what, page[-500:])
            assert took < 5, f"{what}: the page took {took:.1f} s"
            pages[what] = page
        assert watch.touched() == [], "root opened or read what bob named"
        assert writer.is_alive(), "something opened root's FIFO for reading"
        for what, page in pages.items():
            section = page[page.index(f"Output: {named[what]}") :][:400]
            assert ROOTS_SECRET not in page and 'class="output"' not in section, section
            assert "not shown: not a regular file of the job's user" in section, section
    finally:
        os.close(os.open(trap / "fifo", os.O_RDONLY | os.O_NONBLOCK))  # lets the writer go
        writer.join(5)
        watch.close()
