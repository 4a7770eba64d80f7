"""The web page's routes on ctld's HTTP port: the login, the views, live updates.

Only the login page, ``/livez``, ``/readyz`` and the static files answer without a
session; every other route answers 401 with the login page. A view runs as the
session's user through the same ControllerApi handlers and ``Policy`` the commands use,
so the page can show exactly what that user's commands could.
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

from corral.auth.users import identity_of
from corral.config import ClusterConfig
from corral.errors import CorralError, InvalidJobId
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.rpc import ControllerApi
from ctld.standby import Switch
from ctld.unproven import Guard
from ctld.web import cluster_view, job_view, queue_view, resv_view, usage_view
from ctld.web.html import Html, el
from ctld.web.live import PING_S, TICK_S, Generation, Rendering, Renders, sse
from ctld.web.page import Ctx, digest_of, shell
from ctld.web.session import COOKIE, Logins, Session, Sessions, load_key

log = structlog.get_logger("ctld.web")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
MAX_FORM_BYTES = 4096
MAX_STREAMS_PER_USER = 16
STATIC = {"app.css": "text/css", "live.js": "text/javascript", "favicon.svg": "image/svg+xml"}

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
    kind: str  # who shares a rendering (VIEWS)
    samples: bool  # it shows GPU samples: refreshed as heartbeats bring them
    render: Callable[[Ctx, Session], Awaitable[tuple[str, Html]]]


class Site:
    def __init__(self, config: ClusterConfig, switch: Switch, guard: Guard | None = None) -> None:
        self.config = config
        self.switch = switch
        self.guard = guard
        web_cfg = config.web
        self.sessions = Sessions(load_key(config.controller.state_dir), web_cfg.session_s)
        self.logins = Logins(web_cfg.login_ttl_s)
        self.renders = Renders(web_cfg.refresh_s)
        ctl = config.controller
        scheme = "https" if config.tls.clients else "http"
        self.base_url = web_cfg.url or f"{scheme}://{ctl.host}:{ctl.http_port}"
        self.secure = config.tls.clients or self.base_url.startswith("https://")
        self.streams: dict[int, int] = {}  # uid -> open live streams
        pkg = resources.files("ctld.web") / "static"
        self.static = {name: (pkg / name).read_bytes() for name in STATIC}

    # ------------------------------------------------------------ logins

    def issue_login(self, who: Identity) -> pb.CreateWebLoginResponse:
        """CreateWebLogin: a one-time URL for ``who`` (authenticated like any command)."""
        token, expires = self.logins.issue(who.uid)
        log.info("web login issued", user=who.user)
        return pb.CreateWebLoginResponse(
            url=f"{self.base_url}/login?token={token}", user=who.user, expires=expires
        )

    # ------------------------------------------------------------ plumbing

    def _headers(self, resp: web.StreamResponse) -> web.StreamResponse:
        h = resp.headers
        h["Content-Security-Policy"] = CSP
        h["X-Content-Type-Options"] = "nosniff"
        h["X-Frame-Options"] = "DENY"
        # not no-referrer: with it a browser sends "Origin: null" on a same-site POST
        h["Referrer-Policy"] = "same-origin"
        h.setdefault("Cache-Control", "no-store")
        if self.secure:
            h["Strict-Transport-Security"] = "max-age=31536000"
        return resp

    def _html(self, page: Html, status: int = 200) -> web.Response:
        resp = web.Response(text=page, status=status, content_type="text/html", charset="utf-8")
        # never compressed: a page holds a CSRF token beside text others choose (job
        # names), which compression would let an observer of sizes guess (BREACH)
        self._headers(resp)
        return resp

    def _session(self, request: web.Request) -> tuple[Session, Identity] | None:
        cookie = request.cookies.get(COOKIE, "")
        s = self.sessions.check(cookie) if cookie else None
        if s is None:
            return None
        try:
            found = s, identity_of(s.uid)
        except CorralError:  # the user is gone from the user database
            return None
        if self.guard is not None:  # a signed-in browser's connection holds no place
            self.guard.proven(request.transport)
        return found

    def _api(self) -> ControllerApi | None:
        return self.switch.api

    def _page(
        self, title: str, body: Html, who: Identity | None, s: Session | None, path: str
    ) -> Html:
        csrf = self.sessions.csrf(s) if s is not None else ""
        return shell(title, body, who=who, csrf=csrf, path=path, cluster=self.config.cluster_name)

    def _message(
        self,
        title: str,
        text: str,
        status: int,
        who: Identity | None = None,
        s: Session | None = None,
    ) -> web.Response:
        body = el("div", el("h1", title), el("p", text))
        return self._html(self._page(title, body, who, s, ""), status)

    def _login_page(self, note: str = "", status: int = 401) -> web.Response:
        body = el(
            "div",
            el("h1", "Sign in"),
            el("p", note, class_="notice") if note else None,
            el(
                "p",
                "Run ",
                el("code", "corral web-login"),
                " in a shell on a host of the cluster and open the URL it prints. It signs "
                "you in as the user who ran it, for ",
                f"{self.config.web.session_s // 3600} hours.",
            ),
            class_="login",
        )
        return self._html(self._page("Sign in", body, None, None, "/login"), status)

    def _origin_ok(self, request: web.Request) -> bool:
        """A POST's Origin, when the browser sends one, must be this site."""
        origin = request.headers.get("Origin")
        return origin is None or urlsplit(origin).netloc == request.host

    async def _form(self, request: web.Request) -> dict[str, str] | None:
        size = request.content_length
        if size is None or size > MAX_FORM_BYTES:  # a form is small, and says its size
            return None
        data = await request.post()
        return {k: v for k, v in data.items() if isinstance(v, str)}

    # ------------------------------------------------------------ unauthenticated routes

    async def livez(self, request: web.Request) -> web.Response:
        return self._headers(web.Response(text="ok\n"))  # type: ignore[return-value]

    async def readyz(self, request: web.Request) -> web.Response:
        if self._api() is None:
            resp = web.Response(text=f"not ready: {self.switch.refusal()}\n", status=503)
        else:
            resp = web.Response(text="ok\n")
        return self._headers(resp)  # type: ignore[return-value]

    async def static_file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        resp = web.Response(body=self.static[name], content_type=STATIC[name])
        resp.headers["Cache-Control"] = "max-age=300"
        return self._headers(resp)  # type: ignore[return-value]

    async def login_form(self, request: web.Request) -> web.Response:
        token = request.query.get("token", "")
        if not token:
            return self._login_page(status=200)
        uid = self.logins.peek(token)
        if uid is None:
            return self._login_page(
                "This login link has expired or was used: run corral web-login again.", 403
            )
        try:
            user = identity_of(uid).user
        except CorralError:
            return self._login_page("This login link's user is unknown here.", 403)
        body = el(
            "div",
            el("h1", "Sign in"),
            el(
                "form",
                el("input", type="hidden", name="token", value=token),
                el("button", f"Sign in as {user}", type="submit", id="signin"),
                method="post",
                action="/login",
            ),
            class_="login",
        )
        return self._html(self._page("Sign in", body, None, None, "/login"))

    async def login(self, request: web.Request) -> web.Response:
        if not self._origin_ok(request):
            return self._login_page("This sign-in came from another site.", 403)
        form = await self._form(request)
        uid = self.logins.use(form.get("token", "")) if form else None
        if uid is None:
            return self._login_page(
                "This login link has expired or was used: run corral web-login again.", 403
            )
        cookie, s = self.sessions.issue(uid)
        resp = web.HTTPSeeOther("/")
        resp.set_cookie(
            COOKIE,
            cookie,
            max_age=int(s.expires - s.issued),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=self.secure,
        )
        self._headers(resp)
        log.info("web session started", uid=uid)
        raise resp

    async def logout(self, request: web.Request) -> web.Response:
        found = self._session(request)
        form = await self._form(request) if self._origin_ok(request) else None
        if (
            found is None
            or form is None
            or not self.sessions.csrf_ok(found[0], form.get("csrf", ""))
        ):
            return self._message("Not signed out", "The request lacked this session's token.", 403)
        self.sessions.revoke(found[0])
        resp = web.HTTPSeeOther("/login")
        resp.del_cookie(COOKIE, path="/")
        self._headers(resp)
        raise resp

    # ------------------------------------------------------------ views

    def _viewer(self, kind: str, who: Identity, s: Session, api: ControllerApi) -> str:
        """Who else would see the same page: the cache shares a rendering among them."""
        policy = api.cluster.policy
        if kind == "user":
            return f"u{who.uid}"
        if kind == "session":
            return f"s{s.sid}"
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
            return Route(
                path,
                "session",  # it carries the session's CSRF token
                True,
                lambda ctx, s: job_view.render(ctx, job_id, self.sessions.csrf(s)),
            )
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
        key = (f"{route.path}?{sorted(query.items())}", self._viewer(route.kind, who, s, api))
        generation = self._generation(api, route)
        return await self.renders.get(key, generation, lambda: route.render(ctx, s), live=live)

    async def view(self, request: web.Request) -> web.Response:
        found = self._session(request)
        if found is None:
            return self._login_page()
        s, who = found
        api = self._api()
        if api is None:
            return self._message("Not the primary", self.switch.refusal(), 503, who, s)
        if self._route(request.path) is None:
            return self._message("Not found", "There is no such page.", 404, who, s)
        query = {k: v for k, v in request.query.items()}
        try:
            made = await self._render(request.path, query, s, who, api)
        except InvalidJobId:
            return self._message("No such job", "Invalid job id specified", 404, who, s)
        except CorralError as exc:
            return self._message("Error", exc.message, exc.http_status, who, s)
        return self._html(self._page(made.title, made.html, who, s, request.path))

    async def cancel(self, request: web.Request) -> web.Response:
        found = self._session(request)
        if found is None:
            return self._login_page()
        s, who = found
        form = await self._form(request) if self._origin_ok(request) else None
        if form is None or not self.sessions.csrf_ok(s, form.get("csrf", "")):
            return self._message("Refused", "The request lacked this session's token.", 403, who, s)
        api = self._api()
        if api is None:
            return self._message("Not the primary", self.switch.refusal(), 503, who, s)
        job_id = int(request.match_info["job_id"])
        try:
            api.cluster.store.check_writable()
            req = pb.CancelJobsRequest(filter=pb.JobFilter(job_ids=[job_id]))
            outcomes = (await api.cancel_jobs(req, who)).outcomes
        except CorralError as exc:
            return self._message("Not cancelled", exc.message, exc.http_status, who, s)
        failed = [o for o in outcomes if not o.ok]
        if failed:
            return self._message("Not cancelled", failed[0].message, 403, who, s)
        raise self._headers(web.HTTPSeeOther(f"/job/{job_id}"))  # type: ignore[misc]

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The live stream of one page: ``view`` is its path and query."""
        found = self._session(request)
        if found is None:
            return self._headers(web.Response(status=401, text="sign in first\n"))
        s, who = found
        target = urlsplit(request.query.get("view", "/"))
        route = self._route(target.path)
        api = self._api()
        if route is None or api is None:
            return self._headers(web.Response(status=404 if api else 503, text="no such view\n"))
        if self.streams.get(who.uid, 0) >= MAX_STREAMS_PER_USER:
            return self._headers(web.Response(status=429, text="too many open pages\n"))
        from urllib.parse import parse_qsl

        query = dict(parse_qsl(target.query))
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        self._headers(resp)
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
