"""The web page's parts without daemons: escaping, sessions, login tokens, the session
key's file, output tails, the GPU series' bound, shared renderings (docs/web.md)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import pwd
import re
import stat
import threading
import time

import pytest

from corral.errors import ConfigError
from corral.wire import corral_pb2 as pb
from ctld.gpu_samples import MAX_POINTS, GpuSamples, Series, holders
from ctld.web import output
from ctld.web.html import Html, el
from ctld.web.live import Renders, sse
from ctld.web.session import KEY_FILE, Logins, Sessions, load_key
from tests.openwatch import OpenWatch
from tests.ssestream import events

NOBODY = pwd.getpwnam("nobody")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------- escaping


def test_text_and_attributes_are_escaped_markup_is_not() -> None:
    name = '<script>alert("x")</script>'
    page = el("p", name, el("a", "ok", href=f'/job/1" onclick="{name}'), title=name)
    assert "<script>" not in page
    assert "&lt;script&gt;alert" in page
    assert 'href="/job/1&quot; onclick=&quot;&lt;script&gt;' in page
    assert el("div", el("b", "bold")) == "<div><b>bold</b></div>"  # Html passes as markup
    assert el("td", Html("<i>x</i>"), "<i>") == "<td><i>x</i>&lt;i&gt;</td>"
    assert el("input", disabled=True, value=None) == "<input disabled>"


def test_an_event_keeps_each_line_in_its_own_data_field() -> None:
    assert sse("view", "a\nb") == b"event: view\ndata: a\ndata: b\n\n"
    assert sse("view", "a\rb\r\nc") == b"event: view\ndata: a\ndata: b\ndata: c\n\n"


# what a job name may carry into a live page: every line end the format knows, the
# fields' own words, and characters that end lines elsewhere but not in an event stream
HOSTILE = (
    "a\nb",
    "a\rb",
    "a\r\nb",
    "x\r\revent: logout\rdata: forged\r\r",
    "x\r\n\r\nevent: logout\r\ndata: forged\r\n\r\n",
    "x\n\nevent: logout\ndata: forged\n\n",
    "\r",
    "\n\r",
    "",
    ": a comment\rid: 7\rretry: 1",
    "nul\x00byte",
    "line\u2028para\u2029nel\x85vt\x0bff\x0c",
    " leading space",
)


@pytest.mark.parametrize("text", HOSTILE)
def test_any_text_arrives_as_one_events_data(text: str) -> None:
    """As a browser's EventSource parses the stream: one event of the writer's type,
    whose data is the text (a CR or CRLF read back as LF, as HTML reads it anyway)."""
    assert events(sse("view", text).decode()) == [("view", re.sub(r"\r\n?", "\n", text))]


@pytest.mark.parametrize("name", ["", "view\nevent: logout", "view\r", "Logout", "a b", "x" * 40])
def test_an_event_name_is_a_plain_word(name: str) -> None:
    with pytest.raises(ValueError):
        sse(name, "data")


# ---------------------------------------------------------------- sessions and logins


def test_a_session_cookie_is_signed_expires_and_can_be_revoked() -> None:
    clock = Clock()
    sessions = Sessions(b"k" * 32, 3600, clock)
    cookie, s = sessions.issue(1001)
    assert sessions.check(cookie) == s and s.uid == 1001
    forged = cookie.replace("v1.1001.", "v1.0.", 1)  # root's uid, the same signature
    assert sessions.check(forged) is None
    assert Sessions(b"x" * 32, 3600, clock).check(cookie) is None  # another key
    assert sessions.check(cookie + "x") is None and sessions.check("garbage") is None
    assert sessions.check(cookie[:-1] + "é") is None  # not ASCII: a mismatch, no error
    assert not sessions.csrf_ok(s, "é")
    other, s2 = sessions.issue(1001)
    assert sessions.csrf(s) != sessions.csrf(s2)  # one token per session
    assert sessions.csrf_ok(s, sessions.csrf(s)) and not sessions.csrf_ok(s, sessions.csrf(s2))
    assert not sessions.csrf_ok(s, "")
    sessions.revoke(s)
    assert sessions.check(cookie) is None and sessions.check(other) == s2
    clock.now += 3600
    assert sessions.check(other) is None  # expired


def test_a_login_token_works_once_and_only_briefly() -> None:
    clock = Clock()
    logins = Logins(120, clock)
    token, expires = logins.issue(1001)
    assert expires == clock.now + 120
    assert logins.peek(token) == 1001  # the confirmation page does not use it up
    assert logins.use(token) == 1001
    assert logins.use(token) is None and logins.peek(token) is None
    late, _ = logins.issue(1002)
    clock.now += 121
    assert logins.use(late) is None
    assert logins.use("made-up") is None


def test_the_session_key_is_made_0600_and_refused_when_others_may_read_it(
    tmp_path: pathlib.Path,
) -> None:
    key = load_key(str(tmp_path))
    path = tmp_path / KEY_FILE
    assert len(key) == 32 and (path.stat().st_mode & 0o777) == 0o600
    assert load_key(str(tmp_path)) == key  # kept across restarts
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="mode 0600"):
        load_key(str(tmp_path))
    path.unlink()
    os.symlink("/etc/hostname", path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_key(str(tmp_path))


# ---------------------------------------------------------------- output tails


def test_an_output_file_is_shown_only_if_the_jobs_user_owns_it(tmp_path: pathlib.Path) -> None:
    own = tmp_path / "slurm-1.out"
    own.write_text("line1\nline2\n")
    os.chown(own, NOBODY.pw_uid, NOBODY.pw_gid)
    assert output.tail(str(own), NOBODY.pw_uid) == ("line1\nline2\n", "")
    text, why = output.tail(str(own), NOBODY.pw_uid, limit=8)
    assert text.endswith("line2\n") and "left out" in text and not why
    root_file = tmp_path / "root-secret"
    root_file.write_text("secret\n")
    assert output.tail(str(root_file), NOBODY.pw_uid)[0] == ""  # not hers
    link = tmp_path / "slurm-2.out"
    os.symlink(root_file, link)
    os.lchown(link, NOBODY.pw_uid, NOBODY.pw_gid)
    assert output.tail(str(link), NOBODY.pw_uid)[0] == ""  # a link is never followed
    hard = tmp_path / "slurm-3.out"
    os.link(own, hard)
    assert output.tail(str(hard), NOBODY.pw_uid)[0] == ""  # nor a second name of a file
    assert output.tail("relative.out", NOBODY.pw_uid)[1] == "no output file"


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a device node and a file of root's")
@pytest.mark.timeout(30)
def test_a_fifo_a_device_or_roots_file_behind_a_link_is_never_opened(
    tmp_path: pathlib.Path,
) -> None:
    """What a user may name with -o: each is checked before anything opens it (no FIFO
    or device open, no file of root's opened or read), and the answer comes at once."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    device = tmp_path / "device"
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    secret = tmp_path / "private" / "slurm-1.out"
    secret.parent.mkdir(mode=0o700)
    secret.write_text("root's secret\n")
    hers = tmp_path / "hers"
    hers.mkdir()
    os.symlink(secret.parent, hers / "dir")  # a link above the file, not at its end
    os.symlink(secret, hers / "link.out")
    watch = OpenWatch()
    for path in (fifo, device, secret):
        watch.add(str(path))
    # a writer waits for a reader to open the FIFO: one would let it through
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()
    try:
        started = time.monotonic()
        for path in (fifo, device, hers / "dir" / "slurm-1.out", hers / "link.out"):
            text, why = output.tail(str(path), NOBODY.pw_uid)
            assert text == "" and why.startswith("not shown"), (path, why)
        assert time.monotonic() - started < 2
        assert watch.touched() == []
        assert writer.is_alive()  # no reader ever opened the FIFO
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer go
        writer.join(5)
        watch.close()
    mine = tmp_path / "mine.out"  # the job user's own file is shown
    mine.write_text("hers\n")
    os.chown(mine, NOBODY.pw_uid, NOBODY.pw_gid)
    assert output.tail(str(mine), NOBODY.pw_uid) == ("hers\n", "")


# ---------------------------------------------------------------- GPU series


def test_a_jobs_gpu_series_stays_bounded_and_covers_the_whole_run() -> None:
    s = Series()
    for t in range(10 * MAX_POINTS):
        s.add(float(t), float(t % 100), float(t))
    assert len(s.points) <= MAX_POINTS
    assert s.points[0][0] == 0.0 and s.points[-1][0] > 9 * MAX_POINTS
    assert max(p[2] for p in s.points) >= 10 * MAX_POINTS - s.stride  # memory: the peak kept


def test_samples_go_to_the_jobs_on_each_gpu() -> None:
    job = pb.Job(job_id=7, allocations=[pb.NodeAllocation(node="n1", gpu_indices=[1, 2])])
    other = pb.Job(job_id=8, allocations=[pb.NodeAllocation(node="n2", gpu_indices=[1])])
    on = holders("n1", [job, other])
    assert on == {1: [7], 2: [7]}
    samples = GpuSamples()
    gpus = [pb.GpuStatus(index=i, util_pct=10.0 * i, memory_used_mb=100.0) for i in range(4)]
    samples.record("n1", gpus, on, now=50.0)
    assert sorted(samples.of_job(7)) == [("n1", 1), ("n1", 2)]
    assert samples.of_job(7)[("n1", 2)].points == [(50.0, 20.0, 100.0)]
    assert set(samples.now("n1", 30, now=60.0)) == {0, 1, 2, 3}
    assert samples.now("n1", 30, now=90.0) == {}  # too old to say anything about now


# ---------------------------------------------------------------- shared renderings


async def test_pages_showing_the_same_view_share_one_rendering() -> None:
    clock = Clock()
    renders = Renders(refresh_s=1.0, clock=clock)
    made = 0

    async def render() -> tuple[str, Html]:
        nonlocal made
        made += 1
        await asyncio.sleep(0.01)
        return "t", Html(f"<p>{made}</p>")

    key = ("/queue?[]", "all")
    got = await asyncio.gather(*(renders.get(key, (1,), render, live=True) for _ in range(10)))
    assert made == 1 and {g.html for g in got} == {"<p>1</p>"}
    stale = await renders.get(key, (2,), render, live=True)  # redoing it is not due yet:
    assert (stale.html, stale.generation) == ("<p>1</p>", (1,))  # it says it is older
    assert (await renders.get(key, (2,), render)).html == "<p>2</p>"  # a page load: the latest
    clock.now += 0.2  # a cheap view is redone for a stream at its next tick
    assert (await renders.get(key, (3,), render, live=True)).html == "<p>3</p>"


async def test_live_renderings_stay_within_their_share_of_ctlds_cpu() -> None:
    clock = Clock()
    renders = Renders(refresh_s=1.0, clock=clock)

    async def slow() -> tuple[str, Html]:
        time.sleep(0.1)  # a view that costs 0.1 s of CPU
        return "t", Html("<p>x</p>")

    for i in range(3):  # three views of 0.1 s each within the second: 0.3 s > BUDGET
        await renders.get((f"/v{i}", "all"), (1,), slow, live=True)
    clock.now += 0.6  # each is due again (5 x its cost = 0.5 s) ...
    kept = await renders.get(("/v0", "all"), (2,), slow, live=True)
    assert kept.generation == (1,)  # ... but the last second's budget is spent
    clock.now += 1.0
    assert (await renders.get(("/v0", "all"), (2,), slow, live=True)).generation == (2,)
