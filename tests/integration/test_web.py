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
    """What ``corral web-login --url-only`` prints when ``pw`` runs it."""
    code, out, err = command(cluster, pw, "corral_cmd", "web-login", "--url-only")
    assert code == 0, err
    url = out.strip()
    assert url.startswith(base(cluster) + "/login?token="), url
    return url


def sign_in(driver: Any, cluster: LocalCluster, pw: pwd.struct_passwd) -> None:
    from selenium.webdriver.common.by import By

    driver.get(login_url(cluster, pw))
    button = driver.find_element(By.ID, "signin")
    assert button.text == f"Sign in as {pw.pw_name}"
    button.click()
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
    cookie: str = "",
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    req = urllib.request.Request(base(cluster) + path, data=data, headers=headers or {})
    if cookie:
        req.add_header("Cookie", f"corral_session={cookie}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def session_cookie(driver: Any) -> str:
    return str(driver.get_cookie("corral_session")["value"])


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


def test_unauthenticated_requests_get_the_login_page(
    web: LocalCluster, shots: pathlib.Path
) -> None:
    for path in PAGES:
        status, headers, body = http(web, path)
        assert status == 401, path
        assert "corral web-login" in body and "Sign in" in body, path
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Frame-Options"] == "DENY"
    assert http(web, "/events?view=/")[0] == 401
    assert http(web, "/job/1/cancel", data=b"csrf=x")[0] == 401
    forged = "v1.0.1.99999999999.abc.AAAA"  # root's uid in a cookie signed by nobody
    assert http(web, "/queue", cookie=forged)[0] == 401
    assert http(web, "/livez")[0] == 200
    status, _, body = http(web, "/readyz")
    assert (status, body) == (200, "ok\n")
    with chromium() as driver:
        driver.get(base(web) + "/queue")
        assert "Sign in" in view_text(driver)
        driver.save_screenshot(str(shots / "web-login.png"))


def test_a_login_url_works_once_and_makes_a_strict_httponly_cookie(
    web: LocalCluster, users: Users
) -> None:
    from selenium.webdriver.common.by import By

    url = login_url(web, users.alice)
    with chromium() as driver:
        driver.get(url)
        driver.find_element(By.ID, "signin").click()
        wait_for(lambda: "Log out" in text_of(driver, tag="nav"), 15, "in")
        cookie = driver.get_cookie("corral_session")
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
        assert cookie["secure"] is False  # plain HTTP here; Secure when served over TLS
        driver.delete_all_cookies()
        driver.get(url)  # the same URL again: used up
        assert "expired or was used" in view_text(driver)
    token = url.split("token=", 1)[1]
    status, _, body = http(web, "/login", data=f"token={token}".encode())
    assert status == 403 and "expired or was used" in body


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
    cookie = session_cookie(alice_browser)
    host, _, port = web.http_address.rpartition(":")
    conn = HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", "/events?view=/mine", headers={"Cookie": f"corral_session={cookie}"})
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
    status, _, body = http(web, f"/job/{job}", cookie=session_cookie(alice_browser))
    assert status == 200 and secret not in body and said not in body
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


def test_a_cancel_needs_the_sessions_token_and_the_commands_rights(
    web: LocalCluster, users: Users, alice_browser: Any, bob_browser: Any
) -> None:
    job = submit_as(web, users, users.alice, "-J", "csrf-web", "--wrap", "sleep 120")
    web.wait_state(job, "RUNNING")
    cookie = session_cookie(alice_browser)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    # a forged cross-site form carries the cookie but not the token
    assert http(web, f"/job/{job}/cancel", cookie=cookie, data=b"csrf=", headers=form)[0] == 403
    assert (
        http(web, f"/job/{job}/cancel", cookie=cookie, data=b"csrf=guess", headers=form)[0] == 403
    )
    assert http(web, f"/job/{job}/cancel", cookie=cookie)[0] == 405  # no GET changes anything
    assert web.job(job)["state"] == "JOB_STATE_RUNNING"
    # bob's own token, on alice's job: the authorization table says no
    open_page(bob_browser, web, f"/job/{job}", "csrf-web")
    assert not bob_browser.find_elements("css selector", "form.actions button")
    bobs = bob_browser.find_element("css selector", "form.logout input[name=csrf]")
    data = f"csrf={bobs.get_attribute('value')}".encode()
    status, _, body = http(
        web, f"/job/{job}/cancel", cookie=session_cookie(bob_browser), data=data, headers=form
    )
    assert status == 403 and "Not cancelled" in body, body
    # ... and a form posted from another site is refused whatever it carries
    status, _, _ = http(
        web,
        f"/job/{job}/cancel",
        cookie=cookie,
        data=data,
        headers={**form, "Origin": "http://evil.example"},
    )
    assert status == 403
    assert web.job(job)["state"] == "JOB_STATE_RUNNING"
    # alice's button: her token, her job
    open_page(alice_browser, web, f"/job/{job}", "csrf-web")
    click(alice_browser, "form.actions button")
    web.wait_state(job, "CANCELLED")


def test_signing_out_ends_the_session(web: LocalCluster, users: Users) -> None:
    with chromium() as driver:
        sign_in(driver, web, users.op)
        cookie = session_cookie(driver)
        assert http(web, "/queue", cookie=cookie)[0] == 200
        click(driver, "form.logout button")
        wait_for(lambda: "Sign in" in view_text(driver), 10, "the login page")
        assert http(web, "/queue", cookie=cookie)[0] == 401
