"""corral certs and corral token: the credentials an administrator hands out.

``corral certs`` makes the cluster CA (once) and a certificate for ctld and for each
node of the config: copy ``ca.crt`` plus a daemon's own ``.crt``/``.key`` to its host.
``corral certs --revoke NAME`` adds that certificate's serial to ``revoked``.
``corral token`` mints a JWT for a user (Slurm's ``scontrol token``); it needs the key
file, which only its owner can read, so only an administrator can run it.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from corral.errors import InvalidOption

_LIFETIME = re.compile(r"^(\d+)([smhdw]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_LIFETIME_S = 366 * 86400


def parse_lifetime(text: str) -> int:
    """``3600``, ``90m``, ``12h``, ``7d``, ``2w`` -> seconds."""
    match = _LIFETIME.match(text.strip().lower())
    if not match:
        raise InvalidOption(f"--lifetime {text!r}: a number of seconds or N[smhdw] (like 7d)")
    seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    if not 0 < seconds <= MAX_LIFETIME_S:
        raise InvalidOption(f"--lifetime {text!r}: must be between 1s and 366d")
    return seconds


def certs(args: argparse.Namespace) -> int:
    from corral import hostlist
    from corral.auth.tls import create_cluster_certs
    from corral.config import load_config

    config = load_config(args.config)
    directory = args.dir or config.tls.dir or "/etc/corral/tls"
    if args.revoke:
        from corral.auth.tls import revoke

        names = hostlist.expand(",".join(args.revoke))
        serials = revoke(directory, names)
        done = ", ".join(f"{n} (serial {s:x})" for n, s in zip(names, serials, strict=True))
        print(f"corral: revoked {done} in {directory}/revoked")
        print("copy that file to tls.dir on ctld's and every node's host: read within a call")
        return 0
    nodes = hostlist.expand(args.nodes) if args.nodes else config.node_names
    hosts = [c.host for c in config.controller.controllers] + list(args.controller_host or [])
    issued, kept = create_cluster_certs(
        directory, config.cluster_name, nodes, hosts, renew=args.renew
    )
    print(f"corral: certificates in {directory}: ca.crt (CA), {', '.join(issued) or 'none new'}")
    if kept:
        print(f"kept (valid, naming what was asked; --renew replaces them): {', '.join(kept)}")
    if issued:
        print("copy ca.crt and each new NAME.crt/NAME.key to its host; keep ca.key here")
    return 0


def token(args: argparse.Namespace) -> int:
    from corral.auth.tokens import issue, read_key
    from corral.config import load_config

    config = load_config(args.config)
    if not config.auth.jwt_key:
        raise InvalidOption("the cluster has no auth.jwt_key: tokens are not enabled")
    user = args.user or os.environ.get("USER", "")
    if not user:
        raise InvalidOption("--user is required")
    key = read_key(config.auth.jwt_key)  # fails for anyone but the key's owner
    print(f"SLURM_JWT={issue(key, user, parse_lifetime(args.lifetime))}")
    return 0


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    c = sub.add_parser("certs", help="make the cluster CA and the daemons' certificates")
    c.add_argument("-f", "--config", default=None)
    c.add_argument("--dir", default="", help="where (default tls.dir, else /etc/corral/tls)")
    c.add_argument("--nodes", default="", help="hostlist (default: every node of the config)")
    c.add_argument("--controller-host", action="append", help="another name or IP of ctld")
    c.add_argument(
        "--renew",
        action="store_true",
        help="issue every asked certificate anew (default: keep the valid ones)",
    )
    c.add_argument(
        "--revoke",
        action="append",
        metavar="NAME",
        help="revoke the certificate of daemon NAME (a hostlist; repeatable)",
    )
    t = sub.add_parser("token", help="a JWT for a user (administrators: needs the key)")
    t.add_argument("-f", "--config", default=None)
    t.add_argument("--user", default="")
    t.add_argument("--lifetime", default="1d", help="like 3600, 12h, 7d (default 1d)")
