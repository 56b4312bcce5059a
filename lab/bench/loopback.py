"""The load generator talks to this machine only.

A load test is a flood of requests; pointed at someone else's server by a typo it is an
attack. So a URL is refused before any socket opens unless its host is a loopback address
(127.0.0.0/8, ::1) or `localhost` resolving only to such addresses. Spellings the resolver
would also take (`127.1`, a bare integer) are refused too: the guard accepts what it can
read at a glance, nothing cleverer. The client it builds also ignores proxy variables and
never follows redirects, either of which could carry the traffic to another host.
"""

from __future__ import annotations

import ipaddress
import socket

import httpx

LOCALHOST = "localhost"


class NotLoopback(ValueError):
    """The URL would send traffic off this machine."""


def loopback_url(url: str) -> httpx.URL:
    """`url` parsed, or NotLoopback (a ValueError) naming what is wrong with it."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as err:
        raise NotLoopback(f"cannot read {url!r} as a URL: {err}") from err
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise NotLoopback(f"{url!r} is not an http(s) URL with a host, e.g. "
                          "http://127.0.0.1:8000")
    if not is_loopback_host(parsed.host):
        raise NotLoopback(f"refusing {url!r}: host {parsed.host!r} is not a loopback address "
                          "(127.0.0.0/8, ::1 or localhost); the load generator only sends "
                          "traffic to this machine")
    return parsed


def is_loopback_host(host: str) -> bool:
    """True for a loopback IP literal, or `localhost` when every address it resolves to is."""
    if host.lower().rstrip(".") == LOCALHOST:
        addresses = _resolve(LOCALHOST)
        return bool(addresses) and all(_is_loopback_ip(ip) for ip in addresses)
    try:
        return _is_loopback_ip(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return False


def _is_loopback_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _resolve(name: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address `name` resolves to; none when it does not resolve."""
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        return []
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]


def loopback_client(timeout_s: float) -> httpx.AsyncClient:
    """An async client that cannot be diverted: no proxies from the environment, no
    redirects, and no pool limit (a pool that queues requests would turn open-loop load
    into closed-loop load without saying so)."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        trust_env=False,
        follow_redirects=False,
    )
