"""What every answer of the web page carries, and the shapes of its JSON answers.

Every route's pages and answers belong to ctld's origin alone (scheme, host and port):
another port of the same host is another origin, which may neither frame them
(``frame-ancestors``, ``X-Frame-Options``), nor embed them (``Cross-Origin-Resource-
Policy``), nor keep a handle on a window of them (``Cross-Origin-Opener-Policy``), nor
read them (no CORS header is ever sent), and no URL of them leaves in a Referer.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ctld.web.html import el

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


class Responder:
    def __init__(self, secure: bool) -> None:
        self.secure = secure  # served over TLS: browsers are told to keep to it

    def headers(self, resp: web.StreamResponse) -> web.StreamResponse:
        h = resp.headers
        h["Content-Security-Policy"] = CSP
        h["X-Content-Type-Options"] = "nosniff"
        h["X-Frame-Options"] = "DENY"
        h["Referrer-Policy"] = "no-referrer"
        h["Cross-Origin-Opener-Policy"] = "same-origin"
        h["Cross-Origin-Resource-Policy"] = "same-origin"
        h["Origin-Agent-Cluster"] = "?1"  # no document.domain games with a sibling port
        h.setdefault("Cache-Control", "no-store")
        if self.secure:
            h["Strict-Transport-Security"] = "max-age=31536000"
        return resp

    def html(self, page: str, status: int = 200) -> web.Response:
        resp = web.Response(text=page, status=status, content_type="text/html", charset="utf-8")
        self.headers(resp)
        return resp

    def json(self, body: dict[str, Any], status: int = 200) -> web.Response:
        # never compressed: a view may hold a user's secret (her job's environment)
        # beside text others choose (job names), which compression would let an
        # observer of sizes guess (BREACH)
        resp = web.json_response(body, status=status)
        self.headers(resp)
        return resp

    def message(self, title: str, text: str, status: int, user: str = "") -> web.Response:
        """A view-shaped answer that says why there is no view."""
        body = el("div", el("h1", title), el("p", text))
        return self.json({"title": title, "html": body, "user": user}, status)

    def unauthorized(self) -> web.Response:
        resp = self.json({"error": "sign in first"}, 401)
        resp.headers["WWW-Authenticate"] = 'Bearer realm="corral"'
        return resp
