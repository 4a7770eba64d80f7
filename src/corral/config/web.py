"""``[web]``: ctld's web page on its HTTP port (docs/web.md). ``[mail]`` is
corral/mailconfig.py (ctld's mailer reads it without the rest)."""

from __future__ import annotations

from dataclasses import dataclass

from corral.config.section import Section
from corral.errors import ConfigError


@dataclass(frozen=True)
class WebConfig:
    """ctld's web page on its HTTP port (docs/web.md)."""

    enabled: bool = True
    url: str = ""  # the page's address as browsers reach it; "": http(s)://host:http_port
    session_s: int = 12 * 3600  # a browser session lasts this long
    login_ttl_s: int = 120  # a login URL is refused after this (and after its first use)
    refresh_s: float = 1.0  # an open page gets at most one live update this often


def parse_web(sec: Section) -> WebConfig:
    d = WebConfig()
    cfg = WebConfig(
        enabled=sec.get("enabled", bool, d.enabled),
        url=sec.get("url", str, d.url).rstrip("/"),
        session_s=sec.duration("session", d.session_s),
        login_ttl_s=sec.duration("login_ttl", d.login_ttl_s),
        refresh_s=sec.positive("refresh_s", d.refresh_s, allow_zero=False),
    )
    sec.done()
    if cfg.url and not cfg.url.startswith(("http://", "https://")):
        raise ConfigError(f"{sec.key('url')}: {cfg.url!r} is not an http:// or https:// URL")
    if cfg.session_s <= 0 or cfg.login_ttl_s <= 0:
        raise ConfigError(f"{sec.key('session')}, {sec.key('login_ttl')}: must be > 0")
    return cfg
