"""ctld's web page in a real headless browser against a real local cluster (docs/web.md).

The browser is the OS's Chromium driven by Selenium (tests/integration/browser.py);
the users are real second users made with useradd (the ``users`` fixture), who sign in
with the URL their own ``corral web-login`` prints. Each view is checked against the
cluster's real state, a job is watched changing state without a reload, another
user's secrets are looked for everywhere, and every view is photographed (into
``$CORRAL_WEB_SHOTS`` when set, e.g. docs/img, else a temporary directory).
"""

from __future__ import annotations

import json
import os
import pathlib
import pwd
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import wait_for
from tests.integration.browser import chromium, need_browser
from tests.integration.realusers import Users, can_make_users, command, submit_as

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]

PAGES = ("/", "/queue", "/mine", "/usage", "/reservations", "/job/1")


@pytest.fixture(scope="module")
def web(users: Users, module_cluster_factory: ClusterFactory) -> LocalCluster:
    need_browser()  # skip (or fail under CI) before starting a cluster for nothing
    return module_cluster_factory(
        nodes=2, gpus_per_node=4, controller_config=f'operators = ["{users.op.pw_name}"]'
    )


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    where = os.environ.get("CORRAL_WEB_SHOTS")
    path = pathlib.Path(where) if where else tmp_path_factory.mktemp("web-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def base(cluster: LocalCluster) -> str:
    return f"http://{cluster.http_address}"


def login_url(cluster: LocalCluster, pw: pwd.struct_passwd) -> str:
    """What ``corral web-login --url-only`` prints when ``pw`` runs it: the token in
    the fragment, which no browser sends to a server."""
    code, out, err = command(cluster, pw, "corral_cmd", "web-login", "--url-only")
    assert code == 0, err
    url = out.strip()
    assert url.startswith(base(cluster) + "/login#token="), url
    return url


def sign_in(driver: Any, cluster: LocalCluster, pw: pwd.struct_passwd) -> None:
    driver.get(login_url(cluster, pw))
    wait_for(lambda: text_of(driver, "signin") == f"Sign in as {pw.pw_name}", 15, "the button")
    click(driver, "#signin")
    wait_for(lambda: "Log out" in text_of(driver, tag="nav"), 15, "signed in")


def text_of(driver: Any, tag_id: str = "view", tag: str = "") -> str:
    """An element's text now; "" while the page is between two documents (a click's
    navigation, a live update replacing it)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        found = driver.find_element(By.TAG_NAME, tag) if tag else driver.find_element(By.ID, tag_id)
        return str(found.text)
    except WebDriverException:
        return ""


def view_text(driver: Any) -> str:
    return text_of(driver)


def click(driver: Any, css: str) -> None:
    """Click ``css``, again if a live update replaced it between finding and clicking."""
    from selenium.common.exceptions import WebDriverException

    def done() -> bool:
        try:
            driver.find_element("css selector", css).click()
        except WebDriverException:
            return False
        return True

    wait_for(done, 10, f"a click on {css}")


def open_page(
    driver: Any, cluster: LocalCluster, path: str, expect: str, timeout: float = 20
) -> str:
    driver.get(base(cluster) + path)
    return shows(driver, expect, timeout)


def shows(driver: Any, expect: str, timeout: float = 20) -> str:
    """The view's text once it shows ``expect`` (live updates bring it, no reload)."""

    def found() -> str | None:
        text = view_text(driver)
        return text if expect in text else None

    return wait_for(found, timeout, repr(expect))


@pytest.fixture(scope="module")
def alice_browser(web: LocalCluster, users: Users) -> Iterator[Any]:
    with chromium() as driver:
        sign_in(driver, web, users.alice)
        yield driver


@pytest.fixture(scope="module")
def bob_browser(web: LocalCluster, users: Users) -> Iterator[Any]:
    with chromium() as driver:
        sign_in(driver, web, users.bob)
        yield driver


def http(
    cluster: LocalCluster,
    path: str,
    *,
    token: str = "",
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    method: str | None = None,
) -> tuple[int, dict[str, str], str]:
    req = urllib.request.Request(
        base(cluster) + path, data=data, headers=headers or {}, method=method
    )
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def session_token(driver: Any) -> str:
    """The session token the page keeps in its origin's localStorage."""
    return str(driver.execute_script("return localStorage.getItem('corral-session')"))


def set_gpus(
    cluster: LocalCluster, node: str, util: dict[int, float], mem: dict[int, float]
) -> None:
    """What the node's fake GPUs report from now on (noded reads the file per sample)."""
    path = cluster.state_dir / "spool" / node / "fake-gpus.json"
    state = {
        "util": {str(k): v for k, v in util.items()},
        "memory_used_mb": {str(k): v for k, v in mem.items()},
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


# ---------------------------------------------------------------- no session: the login page

API = ("/view/", "/view/queue", "/view/mine", "/view/usage", "/view/reservations", "/view/job/1")
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def test_without_a_session_pages_are_an_empty_shell_and_the_api_answers_401(
    web: LocalCluster, users: Users, shots: pathlib.Path
) -> None:
    for path in PAGES:  # the same shell for anyone, with nothing of anyone's
        status, headers, body = http(web, path)
        assert status == 200, path
        assert "corral web-login" in body and "/static/page.js" in body, path
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
        assert SECURITY_HEADERS.items() <= headers.items(), headers
        assert "Access-Control-Allow-Origin" not in headers
    forged = "v2.0.1.99999999999.abc.AAAA"  # root's uid in a token signed by nobody
    for path in API:
        for token in ("", forged, "x" * 5000):
            status, headers, body = http(web, path, token=token)
            assert status == 401 and "Access-Control-Allow-Origin" not in headers, path
            assert json.loads(body) == {"error": "sign in first"}
    assert http(web, "/events?view=/")[0] == 401
    assert http(web, "/job/1/cancel", data=b"")[0] == 401
    assert http(web, "/logout", data=b"")[0] == 401
    # a preflight for another origin's fetch() with a header: no CORS, ever
    status, headers, _ = http(
        web,
        "/view/queue",
        headers={
            "Origin": "http://127.0.0.1:1",
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        },
        method="OPTIONS",
    )
    assert status in (403, 405)
    assert "Access-Control-Allow-Origin" not in headers
    assert http(web, "/livez")[0] == 200
    status, _, body = http(web, "/readyz")
    assert (status, body) == (200, "ok\n")
    with chromium() as driver:
        driver.get(base(web) + "/queue")
        wait_for(lambda: "Sign in" in view_text(driver), 15, "the sign-in text")
        assert "corral web-login" in view_text(driver)
        assert not driver.find_element("tag name", "nav").is_displayed()
        driver.save_screenshot(str(shots / "web-login.png"))


def test_a_login_url_works_once_and_its_session_is_no_cookie(
    web: LocalCluster, users: Users
) -> None:
    url = login_url(web, users.alice)
    token = url.split("#token=", 1)[1]
    with chromium() as driver:
        driver.get(url)
        wait_for(lambda: text_of(driver, "signin").startswith("Sign in as"), 15, "the button")
        assert "token" not in driver.current_url  # out of the address bar at once
        click(driver, "#signin")
        wait_for(lambda: "Log out" in text_of(driver, tag="nav"), 15, "in")
        assert driver.get_cookies() == []  # nothing a browser would send on its own
        session = session_token(driver)
        assert session.startswith("v2.")
        assert http(web, "/view/mine", token=session)[0] == 200
        driver.get(url)  # the same URL again: used up
        wait_for(lambda: "expired or was used" in view_text(driver), 15, "the refusal")
    body = json.dumps({"token": token}).encode()
    status, _, said = http(web, "/login", data=body, headers={"Content-Type": "application/json"})
    assert status == 403 and "expired or was used" in said
    # another origin's page may not trade a token it got hold of
    fresh = login_url(web, users.alice).split("#token=", 1)[1]
    evil = {"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"}
    status, _, said = http(web, "/login", data=json.dumps({"token": fresh}).encode(), headers=evil)
    assert status == 403


# ---------------------------------------------------------------- every view, real state


def test_each_view_shows_the_clusters_real_state(
    web: LocalCluster, users: Users, alice_browser: Any, shots: pathlib.Path
) -> None:
    driver = alice_browser
    node1, node2 = web.node_names
    web.client().call(
        "UpdateNode", {"names": [node2], "state": "DRAIN", "reason": "GPU 3 XID 79 (test)"}
    )
    web.client().call(
        "CreateReservation",
        {
            "reservation": {
                "name": "maint-web",
                "startTime": time.time() + 3600,
                "durationS": "7200",
                "nodes": node2,
                "users": ["root"],
                "flags": ["MAINT"],
            }
        },
    )
    set_gpus(web, node1, {0: 77.0, 1: 12.0}, {0: 30720.0, 1: 2048.0})
    job = submit_as(
        web,
        users,
        users.alice,
        "-J",
        "train-web",
        "--gres=gpu:2",
        "-w",
        node1,
        "--wrap",
        "sleep 120",
    )
    web.wait_state(job, "RUNNING")

    text = open_page(driver, web, "/", "77%", timeout=30)  # the GPU's sample came with a heartbeat
    assert node1 in text and node2 in text
    assert "GPU 3 XID 79 (test)" in text  # the drain reason
    assert f"{job} {users.alice.pw_name}" in text  # the job and its user on its GPUs
    driver.save_screenshot(str(shots / "web-cluster.png"))

    text = open_page(driver, web, "/queue", "train-web")
    assert str(job) in text and "RUNNING" in text and node1 in text
    driver.save_screenshot(str(shots / "web-queue.png"))
    assert "train-web" in open_page(driver, web, "/mine", "train-web")

    text = open_page(driver, web, f"/job/{job}", "Story")
    assert "submitted" in text and "started" in text and "Efficiency (seff)" in text
    assert "GPUs over time" in text
    # a line once two heartbeats brought samples (the page follows live)
    wait_for(lambda: driver.find_elements("css selector", "#gpus polyline"), 20, "a GPU chart")
    driver.execute_script("document.getElementById('story').scrollIntoView()")
    driver.save_screenshot(str(shots / "web-job.png"))

    text = open_page(driver, web, "/usage?by=user", users.alice.pw_name)
    assert "GPU-hours" in text
    driver.save_screenshot(str(shots / "web-usage.png"))

    text = open_page(driver, web, "/reservations", "maint-web")
    assert "MAINT" in text
    driver.save_screenshot(str(shots / "web-reservations.png"))
    # a phone's width: the same pages, laid out for it
    driver.set_window_size(390, 844)
    open_page(driver, web, "/", node1)
    driver.save_screenshot(str(shots / "web-cluster-phone.png"))
    driver.set_window_size(1100, 850)
    web.client().call("UpdateNode", {"names": [node2], "state": "RESUME"})
    web.client().call("DeleteReservation", {"name": "maint-web"})
    web.client().call("CancelJobs", {"filter": {"jobIds": [str(job)]}})


# the last cell of a queue row, where it is on the screen (a narrow phone's viewport)
REASON_CELL = """
const row = [...document.querySelectorAll('table.jobs tbody tr')]
  .find(r => r.textContent.includes(arguments[0]));
if (!row) return null;
const cell = row.lastElementChild, box = cell.getBoundingClientRect();
return {left: box.left, right: box.right, width: box.width, inner: window.innerWidth,
        display: getComputedStyle(cell).display, text: cell.textContent,
        header: document.querySelector('table.jobs thead tr').lastElementChild.textContent};
"""


def test_at_400_px_the_queue_shows_each_jobs_reason(
    web: LocalCluster, users: Users, alice_browser: Any, shots: pathlib.Path
) -> None:
    """A phone 400 px wide: the queue's "Why / where" column, a pending job's reason in
    words, is on the screen, not scrolled off to the right of the table."""
    driver = alice_browser
    name = "narrow_web_run_named_with_one_long_word"  # no break in it: it must not push
    job = submit_as(web, users, users.alice, "-H", "-J", name, "--wrap", "true")
    driver.set_window_size(400, 844)
    try:
        open_page(driver, web, "/queue", name)
        cell = wait_for(lambda: driver.execute_script(REASON_CELL, name), 10, "the row")
        assert cell["header"].startswith("Why / where"), cell
        assert cell["display"] != "none" and cell["width"] > 40, cell
        assert cell["left"] >= 0 and cell["right"] <= cell["inner"], cell
        assert "held it" in cell["text"], cell
        driver.save_screenshot(str(shots / "web-queue-400px.png"))
    finally:
        driver.set_window_size(1100, 850)
        web.client().call("CancelJobs", {"filter": {"jobIds": [str(job)]}})


def test_a_submitted_job_appears_and_changes_state_without_a_reload(
    web: LocalCluster, users: Users, alice_browser: Any
) -> None:
    driver = alice_browser
    open_page(driver, web, "/mine", "My jobs")
    driver.execute_script("window.__stay = 'no reload'")
    wait_for(
        lambda: driver.execute_script("return document.body.classList.contains('live')"), 10, "live"
    )
    job = submit_as(web, users, users.alice, "-H", "-J", "live-web", "--wrap", "sleep 2")
    row = shows(driver, "live-web")
    assert "PENDING" in row and "held it" in row  # its reason, in corral why's words
    assert driver.execute_script("return window.__stay") == "no reload"

    open_page(driver, web, f"/job/{job}", "PENDING")
    driver.execute_script("window.__stay = 'still'")
    code, _, err = command(web, users.alice, "scontrol", "release", str(job))
    assert code == 0, err
    wait_for(lambda: "RUNNING" in view_text(driver) or "COMPLETED" in view_text(driver), 20, "run")
    wait_for(lambda: "COMPLETED" in view_text(driver), 30, "the job's end, live")
    assert driver.execute_script("return window.__stay") == "still"


def test_a_live_stream_outlives_the_gateways_unproven_deadline(
    web: LocalCluster, users: Users, alice_browser: Any
) -> None:
    # the gateway cuts a TCP connection still unproven 10 s after its accept (issue 22);
    # a signed-in browser's session proves it, so a page's live stream stays open
    token = session_token(alice_browser)
    host, _, port = web.http_address.rpartition(":")
    conn = HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", "/events?view=/mine", headers={"Authorization": f"Bearer {token}"})
    resp = conn.getresponse()
    assert resp.status == 200
    opened = time.monotonic()
    wait_for(lambda: time.monotonic() - opened > 11.0, 15, "past the unproven deadline")
    name = f"late-{os.getpid()}"
    submit_as(web, users, users.alice, "-H", "-J", name, "--wrap", "true")
    seen = b""
    deadline = time.monotonic() + 20
    while name.encode() not in seen and time.monotonic() < deadline:
        chunk = resp.read1(65536)
        assert chunk, "the live stream was closed"
        seen += chunk
    conn.close()
    assert name.encode() in seen


STREAM_READER = r"""
const done = arguments[arguments.length - 1];
import("/static/stream.js").then(async ({ follow }) => {
  const bytes = (text) => new TextEncoder().encode(text);
  const accent = bytes("data: \u00e9t\u00e9\n\n");  // split inside a character
  const chunks = [bytes("event: view\r"), bytes("\ndata: a\rdata: b\r\n"),
    bytes("data:c\n\n: ping\n\nevent: x\ndata\n\n"), accent.slice(0, 7),
    accent.slice(7), bytes("data: never sent")];
  const real = window.fetch;
  window.fetch = async () => new Response(new ReadableStream({
    start(c) { for (const chunk of chunks) c.enqueue(chunk); c.close(); } }));
  const got = [];
  try {
    got.push(await follow("/nowhere", {}, (name, data) => got.push([name, data])));
  } finally {
    window.fetch = real;
  }
  done(got);
});
"""


def test_the_stream_reader_splits_events_as_the_standard_says(
    web: LocalCluster, alice_browser: Any
) -> None:
    # the live stream is read by fetch() (EventSource sends no Authorization header):
    # lines end in CR, LF or CR LF, split across chunks too; comments are skipped; an
    # event ends at a blank line, one left unfinished is dropped
    open_page(alice_browser, web, "/mine", "My jobs")
    got = alice_browser.execute_async_script(STREAM_READER)
    assert got == [
        ["open", ""],
        ["view", "a\nb\nc"],
        ["x", ""],
        ["message", "\u00e9t\u00e9"],
        0,
    ]


# ---------------------------------------------------------------- another user's secrets


def test_another_users_job_hides_its_script_environment_and_output(
    web: LocalCluster, users: Users, alice_browser: Any, bob_browser: Any
) -> None:
    secret, said = "hunter2-web-secret", "bob-output-xyz"
    job = submit_as(
        web,
        users,
        users.bob,
        "-J",
        "bobs-job",
        f"--export=ALL,WEB_SECRET={secret}",
        "--wrap",
        f"echo {said}; sleep 60",
    )
    web.wait_state(job, "RUNNING")
    out = users.home(users.bob) / f"slurm-{job}.out"
    wait_for(lambda: out.exists() and said in out.read_text(), 20, "bob's output")

    text = open_page(bob_browser, web, f"/job/{job}", said)  # the owner sees all three
    assert f"echo {said}" in text  # the script
    click(bob_browser, "details.env summary")
    assert secret in view_text(bob_browser)  # the environment

    for path in (f"/job/{job}", "/queue", "/", "/mine?state=ALL", "/usage?by=user"):
        open_page(alice_browser, web, path, "")
        wait_for(lambda: alice_browser.find_elements("id", "view"), 10, path)
        page = alice_browser.page_source
        assert secret not in page and said not in page, path
    text = open_page(alice_browser, web, f"/job/{job}", "bobs-job")
    assert "Hidden: only the job's owner and operators see them." in text
    assert "--export=<hidden>" in text  # Policy.shown's scrubbed submit line
    # the live stream of that page carries the same scrubbed page
    status, _, body = http(web, f"/view/job/{job}", token=session_token(alice_browser))
    assert status == 200 and "bobs-job" in body
    assert secret not in body and said not in body
    web.client().call("CancelJobs", {"filter": {"jobIds": [str(job)]}})


def test_a_job_name_is_text_never_markup(
    web: LocalCluster, users: Users, alice_browser: Any
) -> None:
    name = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    job = submit_as(web, users, users.alice, "-H", "-J", name, "--wrap", "true")
    for path in (f"/job/{job}", "/queue", "/mine"):
        text = open_page(alice_browser, web, path, "window.__pwned=2")
        assert name in text, path  # shown as the characters it is made of
        assert alice_browser.execute_script("return window.__pwned") is None
    web.client().call("CancelJobs", {"filter": {"jobIds": [str(job)]}})


# ---------------------------------------------------------------- changes need the token


def test_a_cancel_needs_the_session_token_and_the_commands_rights(
    web: LocalCluster, users: Users, alice_browser: Any, bob_browser: Any
) -> None:
    job = submit_as(web, users, users.alice, "-J", "cancel-web", "--wrap", "sleep 120")
    web.wait_state(job, "RUNNING")
    token = session_token(alice_browser)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    # a form another page posts carries no token (there is no cookie to ride along)
    assert http(web, f"/job/{job}/cancel", data=b"csrf=", headers=form)[0] == 401
    assert http(web, f"/job/{job}/cancel", token="guess", data=b"")[0] == 401
    assert http(web, f"/job/{job}/cancel", token=token)[0] == 405  # no GET changes anything
    # ... and a request from another origin is refused whatever it carries
    evil = {"Origin": "http://evil.example"}
    assert http(web, f"/job/{job}/cancel", token=token, data=b"", headers=evil)[0] == 403
    assert web.job(job)["state"] == "JOB_STATE_RUNNING"
    # bob's own session, on alice's job: the authorization table says no
    open_page(bob_browser, web, f"/job/{job}", "cancel-web")
    assert not bob_browser.find_elements("css selector", "form.actions button")
    status, _, body = http(web, f"/job/{job}/cancel", token=session_token(bob_browser), data=b"")
    assert status == 403 and "Not cancelled" in body, body
    assert web.job(job)["state"] == "JOB_STATE_RUNNING"
    # alice's button: her session, her job
    open_page(alice_browser, web, f"/job/{job}", "cancel-web")
    click(alice_browser, "form.actions button")
    web.wait_state(job, "CANCELLED")
    shows(alice_browser, "CANCELLED")  # the page follows without a reload


def test_signing_out_ends_the_users_sessions(web: LocalCluster, users: Users) -> None:
    with chromium() as driver, chromium() as other:
        sign_in(driver, web, users.op)
        sign_in(other, web, users.op)  # the same user in another browser
        token, others = session_token(driver), session_token(other)
        assert http(web, "/view/queue", token=token)[0] == 200
        click(driver, "form.logout button")
        wait_for(lambda: "Sign in" in view_text(driver), 10, "the sign-in text")
        assert driver.execute_script("return localStorage.length") == 0
        assert http(web, "/view/queue", token=token)[0] == 401
        assert http(web, "/view/queue", token=others)[0] == 401  # a sign-out ends them all
        # the other browser's open page learns it from its live stream
        wait_for(lambda: "Sign in" in view_text(other), 10, "the other browser signed out")
