"""What every view gets (``Ctx``), the page around a view, and small formatters."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.identity import Identity
from corral.slurmfmt import format_duration, format_timestamp
from corral.wire import corral_pb2 as pb
from ctld.web.html import Html, el

if TYPE_CHECKING:
    from ctld.api.reads import Reads
    from ctld.api.rpc import ControllerApi
    from ctld.model.authz import Policy

NAV = (
    ("/", "Cluster"),
    ("/queue", "Queue"),
    ("/mine", "My jobs"),
    ("/usage", "Usage"),
    ("/reservations", "Reservations"),
)


@dataclass
class Ctx:
    """A request as a view sees it: who asks, the primary's API, the query."""

    who: Identity
    api: ControllerApi
    now: float
    query: Mapping[str, str] = field(default_factory=dict)
    path: str = "/"

    @property
    def reads(self) -> Reads:
        """What a view reads: the API's reads, with the caller's authorization (never
        ctld's records, state or store: tests/unit/test_web_reads.py)."""
        return self.api.reads

    @property
    def policy(self) -> Policy:
        return self.api.cluster.policy

    def arg(self, name: str, default: str = "") -> str:
        return self.query.get(name, default).strip()[:200]

    def int_arg(self, name: str, default: int, low: int, high: int) -> int:
        try:
            value = int(self.arg(name) or default)
        except ValueError:
            return default
        return min(max(value, low), high)


def shell(*, path: str, cluster: str, session_hours: int) -> Html:
    """The page at every URL: head, navigation, an empty <main>, the one script. It is
    the same for everyone and holds nothing of anyone's: the script (static/page.js)
    fetches the view with the session token, fills <main> and the user's name, and
    shows the sign-in text (the template) when there is no session."""
    links = [
        el("a", label, href=href, aria_current="page" if href == path else None)
        for href, label in NAV
    ]
    logout = el(
        "form",
        el("button", "Log out ", el("span", id="user"), type="submit", class_="link"),
        method="post",
        action="/logout",
        class_="logout",
    )
    sign_in = el(
        "div",
        el("h1", "Sign in"),
        el("p", class_="notice", id="signin-note", hidden=True),
        el(
            "p",
            "Run ",
            el("code", "corral web-login"),
            " in a shell on a host of the cluster and open the URL it prints. It signs "
            "you in as the user who ran it, for ",
            f"{session_hours} hours.",
        ),
        el("button", type="button", id="signin", hidden=True),
        class_="login",
    )
    needs_script = el(
        "noscript", el("p", "This page needs JavaScript: the session lives in the page.")
    )
    return Html(
        "<!doctype html>"
        + el(
            "html",
            el(
                "head",
                el("meta", charset="utf-8"),
                el("meta", name="viewport", content="width=device-width, initial-scale=1"),
                el("title", cluster),
                el("link", rel="stylesheet", href="/static/app.css"),
                el("link", rel="icon", href="/static/favicon.svg", type="image/svg+xml"),
                el("script", type="module", src="/static/page.js"),
            ),
            el(
                "body",
                el("nav", el("span", cluster, class_="brand"), *links, logout, hidden=True),
                el("main", needs_script, id="view", data_cluster=cluster),
                el("template", sign_in, id="signin-template"),
            ),
            lang="en",
        )
    )


def digest_of(fragment: str) -> str:
    """What a page's live stream compares to know whether the page shows the latest."""
    return hashlib.blake2b(fragment.encode(), digest_size=8).hexdigest()


# ---------------------------------------------------------------- formatters


def job_state(state: int) -> str:
    return pb.JobState.Name(state).removeprefix("JOB_STATE_")  # type: ignore[arg-type]


def node_state(state: int) -> str:
    return pb.NodeState.Name(state).removeprefix("NODE_STATE_")  # type: ignore[arg-type]


def when(epoch: float, now: float) -> str:
    """A timestamp with how far it is from now ("in 5 min", "3 h ago")."""
    if epoch <= 0:
        return ""
    delta = epoch - now
    ago = delta < 0
    delta = abs(delta)
    if delta < 90:
        rel = f"{int(delta)} s"
    elif delta < 5400:
        rel = f"{round(delta / 60)} min"
    elif delta < 3 * 86400:
        rel = f"{delta / 3600:.1f} h"
    else:
        rel = f"{delta / 86400:.1f} d"
    return (
        f"{format_timestamp(epoch)} ({rel} ago)" if ago else f"{format_timestamp(epoch)} (in {rel})"
    )


def elapsed(job: pb.Job, now: float) -> str:
    if job.start_time <= 0:
        return "0:00"
    end = job.end_time if job.end_time > 0 else now
    return format_duration(max(0.0, end - job.start_time))


def gib(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def badge(text: str, kind: str = "") -> Html:
    return el("span", text, class_=f"badge {kind or text.lower()}")


def job_link(job_id: int) -> Html:
    return el("a", str(job_id), href=f"/job/{job_id}")


def table(head: Sequence[str], rows: Sequence[Sequence[object]], *, cls: str = "") -> Html:
    return el(
        "div",
        el(
            "table",
            el("thead", el("tr", [el("th", h, scope="col") for h in head])),
            el("tbody", [el("tr", [el("td", c) for c in row]) for row in rows]),
            class_=cls or None,
        ),
        class_="scroll",
    )


def pager(ctx: Ctx, total: int, page: int, per_page: int) -> Html:
    """Previous/next links that keep the other filters."""
    pages = max(1, (total + per_page - 1) // per_page)
    if pages == 1:
        return Html("")

    def href(n: int) -> str:
        from urllib.parse import urlencode

        q = {k: v for k, v in ctx.query.items() if k != "page"}
        q["page"] = str(n)
        return f"{ctx.path}?{urlencode(q)}"

    return el(
        "p",
        el("a", "previous", href=href(page - 1), rel="prev") if page > 1 else None,
        f" page {page} of {pages} ",
        el("a", "next", href=href(page + 1), rel="next") if page < pages else None,
        class_="pager",
    )
