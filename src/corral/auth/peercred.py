"""The kernel's word on who is at the other end of a Unix socket (SO_PEERCRED)."""

from __future__ import annotations

import socket
import struct

_UCRED = struct.Struct("3i")  # pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected ``sock``; OSError if not Unix."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def socket_address(path: str) -> str:
    """A configured socket path as the address bind/connect take (``@x``: abstract)."""
    return "\0" + path[1:] if path.startswith("@") else path
