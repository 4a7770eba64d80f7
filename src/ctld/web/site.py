"""The web page's routes on ctld's HTTP port: the pages, their views, live updates.

Every page's URL (``/``, ``/queue``, ``/job/7``, ``/login``...) answers the same small
shell without a session: it holds nothing of anyone's. Its script (``static/page.js``)
fetches the view, ``GET /view/<page's path and query>``, with the session token in an
``Authorization`` header (``signin.py``), follows it live (``GET /events``) and posts
the page's actions the same way; those routes answer 401 without a valid token. A view
runs as the session's user through the same ControllerApi handlers and ``Policy`` the
commands use, so the page can show exactly what that user's commands could.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from corral.config import ClusterConfig
from corral.errors import CorralError, InvalidJobId
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.api.rpc import ControllerApi
from ctld.api.standby import Switch
from ctld.api.unproven import Guard
from ctld.web import cluster_view, job_view, queue_view, resv_view, usage_view
from ctld.web.html import Html, el
from ctld.web.live import PING_S, TICK_S, Generation, Rendering, Renders, sse
from ctld.web.page import Ctx, digest_of, shell
from ctld.web.responses import Responder
from ctld.web.session import Session
from ctld.web.signin import SignIn

log = structlog.get_logger("ctld.web")

MAX_STREAMS_PER_USER = 16
STATIC = {
    "app.css": "text/css",
    "page.js": "text/javascript",
    "stream.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}

View = Callable[[Ctx], Awaitable[tuple[str, Html]]]


async def _mine(ctx: Ctx) -> tuple[str, Html]:
    return await queue_view.render(ctx, mine=True)


# path -> (view, who shares a rendering: "jobs" / "accounting" (everyone, unless
# private_data names it), "user", or "" (everyone); whether it shows GPU samples)
VIEWS: dict[str, tuple[View, str, bool]] = {
    "/": (cluster_view.render, "jobs", True),
    "/queue": (queue_view.render, "jobs", False),
    "/mine": (_mine, "user", False),
    "/usage": (usage_view.render, "accounting", False),
    "/reservations": (resv_view.render, "", False),
}


@dataclass(frozen=True)
class Route:
    path: str
    kind: str  # who shares a rendering (VIEWS; "user": each user has one)
    samples: bool  # it shows GPU samples: refreshed as heartbeats bring them
    render: Callable[[Ctx, Session], Awaitable[tuple[str, Html]]]


class Site:
    def __init__(self, config: ClusterConfig, switch: Switch, guard: Guard | None = None) -> None:
        self.config = config
        self.switch = switch
        web_cfg = config.web
        self.renders = Renders(web_cfg.refresh_s)
        ctl = config.controller
        scheme = "https" if config.tls.clients else "http"
        self.base_url = web_cfg.url or f"{scheme}://{ctl.host}:{ctl.http_port}"
        self.respond = Responder(config.tls.clients or self.base_url.startswith("https://"))
        self.signin = SignIn(config, self.respond, guard)
        self.sessions = self.signin.sessions
        self.streams: dict[int, int] = {}  # uid -> open live streams
        pkg = resources.files("ctld.web") / "static"
        self.static = {name: (pkg / name).read_bytes() for name in STATIC}

    # ------------------------------------------------------------ logins

    def issue_login(self, who: Identity) -> pb.CreateWebLoginResponse:
        """CreateWebLogin: a one-time URL for ``who`` (authenticated like any command).
        The token is in the fragment: no browser sends it to a server or in a Referer."""
        token, expires = self.signin.logins.issue(who.uid)
        log.info("web login issued", user=who.user)
        return pb.CreateWebLoginResponse(
            url=f"{self.base_url}/login#token={token}", user=who.user, expires=expires
        )

    # ------------------------------------------------------------ plumbing

    def _api(self) -> ControllerApi | None:
        return self.switch.api

    # ------------------------------------------------------------ without a session

    async def livez(self, request: web.Request) -> web.Response:
        return self.respond.headers(web.Response(text="ok\n"))  # type: ignore[return-value]

    async def readyz(self, request: web.Request) -> web.Response:
        if self._api() is None:
            resp = web.Response(text=f"not ready: {self.switch.refusal()}\n", status=503)
        else:
            resp = web.Response(text="ok\n")
        return self.respond.headers(resp)  # type: ignore[return-value]

    async def static_file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        resp = web.Response(body=self.static[name], content_type=STATIC[name])
        resp.headers["Cache-Control"] = "max-age=300"
        return self.respond.headers(resp)  # type: ignore[return-value]

    async def page(self, request: web.Request) -> web.Response:
        """Every page's URL: the shell, the same for everyone (its script brings the
        view, with the session token)."""
        web_cfg = self.config.web
        return self.respond.html(
            shell(
                path=request.path,
                cluster=self.config.cluster_name,
                session_hours=max(1, web_cfg.session_s // 3600),
            )
        )

    # ------------------------------------------------------------ views

    def _viewer(self, kind: str, who: Identity, api: ControllerApi) -> str:
        """Who else would see the same page: the cache shares a rendering among them."""
        policy = api.cluster.policy
        if kind == "user":
            return f"u{who.uid}"
        if kind and kind in policy.private_data and not policy.is_operator(who):
            return f"u{who.uid}"
        return "all"

    def _generation(self, api: ControllerApi, route: Route) -> Generation:
        """What a view shows changes only when one of these moves: a job or node change
        (the state's version), a pass (reasons, forecasts), the clock's half minute
        (times shown relative to now) and, for views of GPU samples, each heartbeat
        interval (at 1,000 nodes a heartbeat comes every 10 ms: not each of those)."""
        cluster = api.cluster
        now = cluster.clock()
        beats = 0
        if route.samples:
            beats = int(now // max(cluster.config.heartbeat.interval_s, self.config.web.refresh_s))
        return (cluster.version, cluster.passes, beats, int(now // 30))

    def _route(self, path: str) -> Route | None:
        """The view at ``path``; None: not a view."""
        if path in VIEWS:
            view, kind, samples = VIEWS[path]
            return Route(path, kind, samples, lambda ctx, s: view(ctx))
        if path.startswith("/job/") and path[5:].isdigit() and len(path) < 30:
            job_id = int(path[5:])
            # whose job it is and who may cancel it: each user has a rendering
            return Route(path, "user", True, lambda ctx, s: job_view.render(ctx, job_id))
        return None

    async def _render(
        self,
        request_path: str,
        query: dict[str, str],
        s: Session,
        who: Identity,
        api: ControllerApi,
        *,
        live: bool = False,
    ) -> Rendering:
        route = self._route(request_path)
        assert route is not None
        ctx = Ctx(who=who, api=api, now=api.cluster.clock(), query=query, path=route.path)
        key = (f"{route.path}?{sorted(query.items())}", self._viewer(route.kind, who, api))
        generation = self._generation(api, route)
        return await self.renders.get(key, generation, lambda: route.render(ctx, s), live=live)

    async def view(self, request: web.Request) -> web.Response:
        """GET /view/<a page's path>?<its query>: that page's view, as JSON (its title,
        its <main> as HTML, the digest its live stream starts from, who is signed in)."""
        found = self.signin.session(request)
        if found is None:
            return self.respond.unauthorized()
        s, who = found
        path = "/" + request.match_info["path"]
        api = self._api()
        if api is None:
            return self.respond.message("Not the primary", self.switch.refusal(), 503, who.user)
        if self._route(path) is None:
            return self.respond.message("Not found", "There is no such page.", 404, who.user)
        query = {k: v for k, v in request.query.items()}
        try:
            made = await self._render(path, query, s, who, api)
        except InvalidJobId:
            return self.respond.message("No such job", "Invalid job id specified", 404, who.user)
        except CorralError as exc:
            return self.respond.message("Error", exc.message, exc.http_status, who.user)
        return self.respond.json(
            {
                "title": made.title,
                "html": made.html,
                "digest": digest_of(made.html),
                "user": who.user,
            }
        )

    async def cancel(self, request: web.Request) -> web.Response:
        """POST /job/N/cancel, by the page's script with the session token: a form of
        another origin cannot send the header (and its Origin is refused too)."""
        found = self.signin.session(request)
        if found is None:
            return self.respond.unauthorized()
        _, who = found
        if not self.signin.origin_ok(request):
            return self.respond.message("Refused", "This came from another site.", 403, who.user)
        api = self._api()
        if api is None:
            return self.respond.message("Not the primary", self.switch.refusal(), 503, who.user)
        job_id = int(request.match_info["job_id"])
        try:
            api.cluster.store.check_writable()
            req = pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job_id]))
            outcomes = (await api.cancel_jobs(req, who)).outcomes
        except CorralError as exc:
            return self.respond.message("Not cancelled", exc.message, exc.http_status, who.user)
        failed = [o for o in outcomes if not o.ok]
        if failed:
            return self.respond.message("Not cancelled", failed[0].message, 403, who.user)
        return self.respond.json({"ok": True})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The live stream of one page: ``view`` is its path and query."""
        found = self.signin.session(request)
        if found is None:
            return self.respond.unauthorized()
        s, who = found
        target = urlsplit(request.query.get("view", "/"))
        route = self._route(target.path)
        api = self._api()
        if route is None or api is None:
            text = "no such view\n"
            return self.respond.headers(web.Response(status=404 if api else 503, text=text))
        if self.streams.get(who.uid, 0) >= MAX_STREAMS_PER_USER:
            return self.respond.headers(web.Response(status=429, text="too many open pages\n"))
        from urllib.parse import parse_qsl

        query = dict(parse_qsl(target.query))
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        self.respond.headers(resp)
        await resp.prepare(request)
        self.streams[who.uid] = self.streams.get(who.uid, 0) + 1
        try:
            await self._stream(resp, target.path, query, s, who, request.query.get("digest", ""))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.streams[who.uid] -= 1
        return resp

    async def _stream(
        self,
        resp: web.StreamResponse,
        path: str,
        query: dict[str, str],
        s: Session,
        who: Identity,
        digest_of_page: str,
    ) -> None:
        route = self._route(path)
        assert route is not None
        last: Generation | None = None
        shown = digest_of_page
        sent_at = pinged = time.monotonic()
        refresh = self.config.web.refresh_s
        while True:
            api = self._api()
            if api is None or not self.sessions.alive(s):
                await resp.write(sse("logout", "signed out"))
                return
            gen = self._generation(api, route)
            now = time.monotonic()
            if gen != last and now - sent_at >= refresh:
                try:
                    made = await self._render(path, query, s, who, api, live=True)
                    # a shared rendering may predate ``gen``: then ask again next tick
                    html, last = made.html, made.generation
                except CorralError as exc:
                    html, last = Html(el("p", exc.message, class_="notice")), gen
                except Exception:  # a bug in a view: its stream ends, ctld goes on
                    log.exception("web view failed", path=path)
                    return
                digest = digest_of(html)
                if digest != shown:
                    await resp.write(sse("view", html))
                    sent_at = pinged = time.monotonic()
                shown = digest
            elif now - pinged >= PING_S:
                await resp.write(b": ping\n\n")
                pinged = now
            await asyncio.sleep(TICK_S)
