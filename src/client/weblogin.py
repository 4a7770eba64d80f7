"""corral web-login: a one-time URL that signs the calling user in to ctld's web page.

It authenticates like every other command (ctld's Unix socket, MUNGE or a token), so
the browser session is the user who ran it, and sees what that user's squeue, sacct
and sreport would. The URL works once, within ``web.login_ttl`` (default 2 minutes),
like Jupyter's token URL; the session it opens lasts ``web.session`` (docs/web.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import NoReturn

from client.common import client
from client.fmt import Reported, call
from corral.errors import InvalidOption

PROG = "corral web-login"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise InvalidOption(f"{message} (usage: {PROG})")


def main_args(argv: list[str]) -> int:
    parser = _Parser(
        prog=PROG,
        description="Print a one-time URL that signs you in to the cluster's web page "
        "(ctld's HTTP port) as the user running this command.",
    )
    parser.add_argument("--url-only", action="store_true", help="print only the URL (for scripts)")
    args = parser.parse_args(argv)
    try:
        reply = call(lambda: client().create_web_login({}), PROG)
    except Reported as exc:
        sys.stderr.write(exc.message + "\n")
        return 1
    url = reply.get("url", "")
    if args.url_only:
        print(url)
        return 0
    left = max(0, int(float(reply.get("expires") or 0) - time.time()))
    print(
        f"Open this URL in a browser within {left} s to sign in as {reply.get('user', '')} "
        "(it works once):"
    )
    print(f"    {url}")
    return 0
