"""The web page's parts without daemons: escaping, sessions, login tokens and their
per-user limit, sign-outs (durable, bounded), the session key's file, output tails, the
GPU series' bound, shared renderings (docs/web.md)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
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
from ctld.model.gpu_samples import MAX_POINTS, GpuSamples, Series, holders
from ctld.web import output
from ctld.web.html import Html, el
from ctld.web.live import Renders, sse
from ctld.web.session import KEY_FILE, MAX_LOGINS_PER_USER, Logins, Sessions, load_key
from ctld.web.signouts import COMPACT_SLACK, SignOuts
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


def sessions_in(path: pathlib.Path, clock: Clock, lifetime_s: int = 3600) -> Sessions:
    signouts = SignOuts(str(path / "web.signouts"), lifetime_s, clock, durable=False)
    return Sessions(b"k" * 32, lifetime_s, signouts, clock)


def test_a_session_token_is_signed_and_expires(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    sessions = sessions_in(tmp_path, clock)
    token, s = sessions.issue(1001)
    assert sessions.check(token) == s and s.uid == 1001 and token.startswith("v2.")
    forged = token.replace("v2.1001.", "v2.0.", 1)  # root's uid, the same signature
    assert sessions.check(forged) is None
    other_key = Sessions(b"x" * 32, 3600, sessions.signouts, clock)
    assert other_key.check(token) is None
    assert sessions.check(token + "x") is None and sessions.check("garbage") is None
    assert sessions.check(token[:-1] + "é") is None  # not ASCII: a mismatch, no error
    assert sessions.check("v2." + "1" * 10_000) is None
    # a token made when web.session was longer counts no longer than it is now
    assert sessions_in(tmp_path, clock, lifetime_s=60).check(token) is None
    clock.now += 3600
    assert sessions.check(token) is None  # expired


def test_a_session_of_the_previous_version_counts_for_nothing(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    sessions = sessions_in(tmp_path, clock)
    payload = f"v1.1001.{int(clock.now)}.{int(clock.now) + 3600}.abcdefgh"
    mac = hmac.new(b"k" * 32, b"corral web session\0" + payload.encode(), hashlib.sha256)
    cookie = f"{payload}.{base64.urlsafe_b64encode(mac.digest()).rstrip(b'=').decode()}"
    assert sessions.check(cookie) is None


def test_a_sign_out_ends_the_users_sessions_and_outlives_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    clock = Clock()
    sessions = sessions_in(tmp_path, clock)
    token, s = sessions.issue(1001)
    other, s2 = sessions.issue(1001)  # the same user in another browser
    bobs, _ = sessions.issue(1002)
    sessions.sign_out(s)
    assert sessions.check(token) is None and sessions.check(other) is None
    assert not sessions.alive(s2)  # an open page's stream ends too
    assert sessions.check(bobs) is not None  # another user's session goes on
    again, s3 = sessions.issue(1001)  # in the same millisecond: still a new session
    assert sessions.check(again) == s3
    restarted = sessions_in(tmp_path, clock)  # a new ctld reads the file
    assert restarted.check(token) is None and restarted.check(other) is None
    assert restarted.check(again) == s3 and restarted.check(bobs) is not None
    clock.now -= 600  # the clock set back: a new session is still newer than the sign-out
    later, _ = restarted.issue(1001)
    assert restarted.check(later) is not None


def test_the_sign_outs_stay_bounded_by_the_users_who_signed_out_lately(
    tmp_path: pathlib.Path,
) -> None:
    # 100,000 sign-outs by ten users over 100 days (one every 86 s): what is kept, in
    # memory and in the file, is an entry per user who signed out within a session
    # lifetime, and the work done (entries looked at, lines written) is a constant per
    # sign-out: never a scan of all entries per sign-out
    clock = Clock()
    lifetime_s = 12 * 3600
    path = tmp_path / "web.signouts"
    signouts = SignOuts(str(path), lifetime_s, clock, durable=False)
    n = 100_000
    largest_file = 0
    for i in range(n):
        clock.now += 86.4
        signouts.sign_out(i % 10, int(clock.now * 1000))
        if i % 1000 == 0:
            largest_file = max(largest_file, len(path.read_bytes().splitlines()))
    assert len(signouts) == 10
    assert largest_file <= 2 * 10 + COMPACT_SLACK + 1
    assert signouts.work <= 4 * n
    # users who signed out once and never again: dropped once their sessions expired
    for uid in range(1000, 6000):
        signouts.sign_out(uid, int(clock.now * 1000))
    assert len(signouts) == 5010
    clock.now += lifetime_s + 1
    signouts.sign_out(1, int(clock.now * 1000))
    assert len(signouts) == 1 and signouts.not_before(1000) == 0
    assert len(path.read_bytes().splitlines()) <= 2 * 1 + COMPACT_SLACK + 1
    reread = SignOuts(str(path), lifetime_s, clock, durable=False)
    assert len(reread) == 1 and reread.not_before(1) == int(clock.now * 1000)


def test_the_sign_outs_file_is_ctlds_own_and_a_torn_line_is_skipped(
    tmp_path: pathlib.Path,
) -> None:
    clock = Clock()
    path = tmp_path / "web.signouts"
    path.write_text(f"1001 {int(clock.now * 1000)}\n1002 12")  # a crash cut the last line
    path.chmod(0o600)
    signouts = SignOuts(str(path), 3600, clock, durable=False)
    assert signouts.not_before(1001) == int(clock.now * 1000)
    assert (path.stat().st_mode & 0o777) == 0o600
    signouts.sign_out(1003, int(clock.now * 1000) + 5)  # not glued to the cut line
    assert SignOuts(str(path), 3600, clock).not_before(1003) == int(clock.now * 1000) + 5
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="mode 0600"):
        SignOuts(str(path), 3600, clock)
    path.unlink()
    os.symlink("/etc/hostname", path)
    with pytest.raises(ConfigError, match="cannot read"):
        SignOuts(str(path), 3600, clock)


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
    assert logins.use("made-up") is None and logins.peek("é") is None


def test_one_users_login_tokens_never_crowd_out_anothers() -> None:
    clock = Clock()
    logins = Logins(120, clock)
    first, _ = logins.issue(1002)
    for _ in range(100_000):  # bob asks and asks: he holds his newest few
        last, _ = logins.issue(1002)
    assert len(logins) == MAX_LOGINS_PER_USER
    assert logins.peek(first) is None and logins.peek(last) == 1002
    alices, _ = logins.issue(1001)
    assert logins.use(alices) == 1001
    assert logins.use(last) == 1002


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
