"""The load client's requests out, as the kernel sees them: the TCP connections its processes hold
to a server, open or opening (Linux: ``/proc/PID/fd`` and ``/proc/PID/net/tcp``, ``tcp6``;
elsewhere none are seen).

vLLM's benchmark client sends each request on a connection of its own and reads the answer on it,
so a connection to the server while a run is out is a request the server has not answered: the
stall watch counts them, where the server's own gauges may show nothing (an API front end that
took the requests and handed none to its engine)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import Iterable
from urllib.parse import urlsplit

# /proc/net/tcp's states (include/net/tcp_states.h): a request on it, or on its way
ESTABLISHED, SYN_SENT = "01", "02"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _socket_inodes(pids: Iterable[int]) -> set[str]:
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # ended, or not ours to read
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[len("socket:[") : -1])
    return inodes


def _address(hex_address: str) -> Address:
    """An address as /proc/net/tcp writes it: 32-bit words in the host's byte order."""
    raw = bytes.fromhex(hex_address)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


_RESOLVED: dict[tuple[str, int], frozenset[Address]] = {}  # a host's addresses, once found


def _resolved(host: str, port: int) -> frozenset[Address]:
    """``host``'s addresses (an empty set, asked again next time, when it cannot be resolved)."""
    if (host, port) in _RESOLVED:
        return _RESOLVED[(host, port)]
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset()
    out: set[Address] = set()
    for *_, sockaddr in found:
        with contextlib.suppress(ValueError):
            out.add(_address_of(str(sockaddr[0])))
    _RESOLVED[(host, port)] = frozenset(out)
    return _RESOLVED[(host, port)]


def _address_of(text: str) -> Address:
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def to_server(pids: list[int], url: str) -> int:
    """How many TCP connections the processes ``pids`` hold to ``url``'s host and port, open or
    opening; 0 where that cannot be read."""
    try:
        split = urlsplit(url)
        host, port = split.hostname, split.port or (443 if split.scheme == "https" else 80)
    except ValueError:
        return 0
    if not pids or host is None:
        return 0
    addresses = _resolved(host, port)
    inodes = _socket_inodes(pids)
    if not addresses or not inodes:
        return 0
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pids[0]}/net/{table}") as f:  # the client's network namespace
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] not in (ESTABLISHED, SYN_SENT):
                continue
            remote, _, remote_port = fields[2].partition(":")
            with contextlib.suppress(ValueError):
                if (
                    fields[9] in inodes
                    and int(remote_port, 16) == port
                    and _address(remote) in addresses
                ):
                    count += 1
    return count
