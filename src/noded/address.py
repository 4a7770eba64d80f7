"""The address noded advertises to ctld (and srun), and the loopback mistake.

Without ``--address``, the node's ``address`` key or a ``listen`` address, noded is
known by this host's FQDN. A host whose name resolves to loopback (a hostname of
``localhost``, or Debian's ``127.0.1.1 HOST`` line in /etc/hosts) then advertises an
address that only this host can dial: ctld elsewhere, and srun on a login node, reach
their own loopback instead. That is refused at start when ctld is on another host;
an address the operator gave explicitly is only warned about.
"""

from __future__ import annotations

import ipaddress
import socket

WILDCARDS = ("0.0.0.0", "::", "")


def advertised_host(address: str, node_address: str, listen: str) -> tuple[str, bool]:
    """(the host ctld and srun dial, whether it was given rather than guessed): --address,
    the node's address, a listen address that is not a wildcard, else the FQDN."""
    if address or node_address:
        return address or node_address, True
    if listen not in WILDCARDS:
        return listen, True
    return socket.getfqdn(), False


def resolve(host: str) -> list[str]:
    """The addresses ``host`` resolves to (none when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]).split("%")[0] for info in infos})


def is_loopback(host: str) -> bool:
    """Every address ``host`` resolves to is a loopback one (unresolvable: False)."""
    addresses = resolve(host)
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def loopback_problem(host: str, controller_hosts: list[str]) -> str:
    """Why ``host`` cannot be this node's address ("" when it can): it is loopback
    while some controller is not, so that controller dials itself, not this node."""
    if not is_loopback(host):
        return ""
    remote = [c for c in controller_hosts if not is_loopback(c)]
    if not remote:
        return ""  # ctld on this host's loopback too: a one-machine cluster
    return (
        f"this node would advertise {host} ({', '.join(resolve(host))}), a loopback "
        f"address, but ctld is at {remote[0]}, not on loopback: ctld and srun on other "
        "hosts would reach themselves, not this node. Set the node's address in the config "
        "([[nodes]] address = ...), or noded --address HOST, or make this host's name "
        "resolve to its network address (not 127.0.x.x in /etc/hosts)"
    )
