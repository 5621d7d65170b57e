"""The listening socket(s): one shared by every worker, or one each with SO_REUSEPORT.

SO_REUSEPORT lets any process of the same user bind a port already served,
and the kernel then splits connections between the two servers without a
word.  So before the supervisor takes a port in ``reuseport`` mode it binds
it once without that option, which fails the way the default mode does when
something already listens there.
"""

from __future__ import annotations

import socket

LISTEN_BACKLOG = 1024


def _new_socket(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def make_listen_socket(host: str, port: int, reuseport: bool, listen: bool = True) -> socket.socket:
    sock = _new_socket(host)
    try:
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen:
            sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def claim_reuseport(host: str, port: int) -> socket.socket:
    """A bound, not listening, SO_REUSEPORT socket that reserves the port for
    this server's workers; OSError (EADDRINUSE) if anything else has the port."""
    if port:
        probe = _new_socket(host)
        try:
            probe.bind((host, port))  # without SO_REUSEPORT: refused if the port is served
        finally:
            probe.close()
    return make_listen_socket(host, port, reuseport=True, listen=False)


def reuseport_available() -> bool:
    return hasattr(socket, "SO_REUSEPORT")
