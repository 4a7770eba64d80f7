"""Signing in and out of the web page, and who a request is (docs/web.md, "Signing in").

The login URL carries its one-time token in the fragment (``/login#token=...``), which
a browser sends to no server and puts in no Referer. The page's script takes it out of
the address bar at once, asks whose it is (``POST /login/who``, which does not use it)
to show "Sign in as alice", and on the click trades it (``POST /login``) for a session
token, which it keeps in its origin's localStorage and sends as ``Authorization:
Bearer`` with every request that needs a session. No cookie plays a part: a browser
sends a host's cookies to every port of it, where any local user may listen.
"""

from __future__ import annotations

import asyncio
import json
import os
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from corral.auth.users import identity_of
from corral.config import ClusterConfig
from corral.errors import CorralError
from corral.identity import Identity
from ctld.api.unproven import Guard
from ctld.web.responses import Responder
from ctld.web.session import Logins, Session, Sessions, load_key
from ctld.web.signouts import SIGNOUTS_FILE, SignOuts

log = structlog.get_logger("ctld.web")

MAX_BODY_BYTES = 4096  # a sign-in's body is a token
OLD_COOKIE = "corral_session"  # the previous version's session cookie: cleared at sign-in
USED = "This login link has expired or was used: run corral web-login again."


class SignIn:
    def __init__(self, config: ClusterConfig, respond: Responder, guard: Guard | None) -> None:
        web_cfg, state_dir = config.web, config.controller.state_dir
        self.signouts = SignOuts(os.path.join(state_dir, SIGNOUTS_FILE), web_cfg.session_s)
        self.sessions = Sessions(load_key(state_dir), web_cfg.session_s, self.signouts)
        self.logins = Logins(web_cfg.login_ttl_s)
        self.respond = respond
        self.guard = guard
        self._writing = asyncio.Lock()  # one sign-out written at a time, off the loop

    def session(self, request: web.Request) -> tuple[Session, Identity] | None:
        """Who sent ``request``: its ``Authorization: Bearer`` session token, checked.
        Cookies are never read."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        s = self.sessions.check(token.strip())
        if s is None:
            return None
        try:
            found = s, identity_of(s.uid)
        except CorralError:  # the user is gone from the user database
            return None
        if self.guard is not None:  # a signed-in browser's connection holds no place
            self.guard.proven(request.transport)
        return found

    @staticmethod
    def origin_ok(request: web.Request) -> bool:
        """A POST's Origin, when the browser sends one, must be this origin: the page's
        own fetch() sends it; another origin's page gets nothing from here anyway."""
        origin = request.headers.get("Origin")
        return origin is None or urlsplit(origin).netloc == request.host

    async def _token(self, request: web.Request) -> str:
        """The login token a sign-in's JSON body carries; "" when it carries none."""
        size = request.content_length
        if size is None or size > MAX_BODY_BYTES or not self.origin_ok(request):
            return ""
        try:
            body = json.loads(await request.read())
        except ValueError:
            return ""
        token = body.get("token") if isinstance(body, dict) else None
        return token if isinstance(token, str) else ""

    # ------------------------------------------------------------ routes

    async def who(self, request: web.Request) -> web.Response:
        """POST /login/who: whose a login token is, without using it up."""
        uid = self.logins.peek(await self._token(request))
        if uid is None:
            return self.respond.json({"error": USED}, 403)
        try:
            return self.respond.json({"user": identity_of(uid).user})
        except CorralError:
            return self.respond.json({"error": "This login link's user is unknown here."}, 403)

    async def login(self, request: web.Request) -> web.Response:
        """POST /login: a login token, used up, for a session token."""
        uid = self.logins.use(await self._token(request))
        if uid is None:
            return self.respond.json({"error": USED}, 403)
        try:
            user = identity_of(uid).user
        except CorralError:
            return self.respond.json({"error": "This login link's user is unknown here."}, 403)
        token, s = self.sessions.issue(uid)
        resp = self.respond.json({"session": token, "user": user, "expires": s.expires})
        resp.del_cookie(OLD_COOKIE, path="/")  # grants nothing; no longer sent anywhere
        log.info("web session started", uid=uid)
        return resp

    async def logout(self, request: web.Request) -> web.Response:
        """POST /logout: this session and the user's others end, durably."""
        found = self.session(request)
        if found is None:
            return self.respond.unauthorized()
        if not self.origin_ok(request):
            return self.respond.message("Not signed out", "This came from another site.", 403)
        try:
            async with self._writing:
                await asyncio.to_thread(self.sessions.sign_out, found[0])
        except OSError as exc:  # the state dir is full or read-only: the page says so
            log.error("web sign-out not kept", uid=found[0].uid, error=str(exc))
            text = f"ctld could not keep the sign-out: {exc.strerror or exc}"
            return self.respond.message("Not signed out", text, 503, found[1].user)
        log.info("web sign-out", uid=found[0].uid)
        return self.respond.json({"ok": True})
