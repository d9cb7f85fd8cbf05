"""When an endpoint needs CURVE keys: every tcp address another host could reach.

A hub without keys on such an address serves the weights to, and takes samples from, anyone who
can reach the port; an actor without keys talks to whoever answers there. Both are refused
(`InsecureEndpointError`) unless the run sets `transport.insecure = true`, which is logged as a
warning. Loopback tcp (127.0.0.0/8, ::1, localhost), ipc (a private 0700 directory) and inproc stay
on this host and need no keys.

`check_address` refuses what no endpoint could bind or connect to (a scheme other than tcp, ipc or
inproc; a tcp address without host or port), so that a typo is reported before any heavy work.
"""

from __future__ import annotations

import ipaddress
import logging
import os

from atgrpo.transport.errors import AddressError, InsecureEndpointError

log = logging.getLogger("atgrpo.transport")


SCHEMES = ("tcp", "ipc", "inproc")


def check_address(address: str, role: str) -> None:
    """Raise `AddressError` unless `address` has the form of an endpoint: `tcp://host:port` (port a
    number or `*`), `ipc:///path` or `inproc://name`. Only the form: whether it binds or connects is
    the socket's to say."""
    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in SCHEMES or not rest:
        raise AddressError(f"{role} address {address!r}: expected tcp://host:port, ipc:///path or inproc://name")
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        if not host.strip("[]") or not (port == "*" or (port.isdigit() and int(port) <= 65535)):
            raise AddressError(f"{role} address {address!r}: expected tcp://host:port (port a number, or *)")


def host_of(address: str) -> str | None:
    """The host part of a `tcp://host:port` address (brackets of an IPv6 host removed); None for
    other transports."""
    if not address.startswith("tcp://"):
        return None
    rest = address[len("tcp://") :]
    host, _, _ = rest.rpartition(":")
    return host.strip("[]")


def is_local(address: str) -> bool:
    """True when only this host can use `address`: ipc, inproc, or tcp on a loopback host."""
    host = host_of(address)
    if host is None:
        return True
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "*", a host name or an interface name: assume reachable from elsewhere


def require_keys(address: str, curve_keys: str | os.PathLike[str] | None, insecure: bool, role: str) -> None:
    """Refuse to `role` ("hub" or "actor") an `address` other hosts can reach without CURVE keys."""
    if curve_keys is not None or is_local(address):
        return
    if insecure:
        log.warning(
            "%s on %s without CURVE keys (transport.insecure = true): anyone who can reach it can fetch "
            "the weights and submit samples",
            role,
            address,
        )
        return
    raise InsecureEndpointError(
        f"{role} on {address} without CURVE keys: other hosts can reach it. Make keys with "
        "`atgrpo-keys init DIR` and set transport.curve_keys = DIR (or --curve-keys DIR), or set "
        "transport.insecure = true to run unauthenticated"
    )


__all__ = ["SCHEMES", "check_address", "host_of", "is_local", "require_keys"]
