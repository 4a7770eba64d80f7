"""ctld's web page (docs/web.md): server-rendered views of the cluster, the queue, a
user's jobs, a job's story, usage and reservations, updated live, on ctld's HTTP port.

``mount`` adds its routes to the gateway's application; nothing else in ctld knows it.
"""

from __future__ import annotations

from aiohttp import web

from corral.config import ClusterConfig
from ctld.api.standby import Switch
from ctld.api.unproven import Guard
from ctld.web.site import Site

__all__ = ["Site", "mount"]


def mount(
    app: web.Application, switch: Switch, config: ClusterConfig, guard: Guard | None = None
) -> Site | None:
    """The web page's routes on ``app``; None when ``web.enabled`` is false. A request
    with a valid session proves its connection to ``guard`` (the gateway's places of
    unproven connections), as a command's credential does: a live stream is not cut."""
    if not config.web.enabled:
        return None
    site = Site(config, switch, guard)
    r = app.router
    r.add_get("/livez", site.livez)
    r.add_get("/readyz", site.readyz)
    r.add_get("/static/{name}", site.static_file)
    # the pages: a shell for anyone, whose script fetches the rest with the session
    for path in ("/", "/queue", "/mine", "/usage", "/reservations", "/job/{job_id:[0-9]{1,19}}"):
        r.add_get(path, site.page)
    r.add_get("/login", site.page)
    # what needs a session token (Authorization: Bearer), or a login token
    r.add_post("/login/who", site.signin.who)
    r.add_post("/login", site.signin.login)
    r.add_post("/logout", site.signin.logout)
    r.add_get("/view/{path:.*}", site.view)
    r.add_get("/events", site.events)
    r.add_post("/job/{job_id:[0-9]{1,19}}/cancel", site.cancel)
    return site
