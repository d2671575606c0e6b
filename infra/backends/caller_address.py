"""This machine's public (egress) address, as the firewalls `up` writes through will see it: what an echo service
answers (https://ifconfig.me/ip, the one docs/deploying.md has people ask with curl), or DLTRAIN_CALLER_ADDRESS when
set (a runner that knows its NAT address, or an offline test). preflight compares it with allowedIpRanges
(infra/core/preflight/caller_access.py)."""
from __future__ import annotations

import ipaddress
import os
import ssl
import urllib.request
from collections.abc import Mapping

ECHO_URL = "https://ifconfig.me/ip"
ENV = "DLTRAIN_CALLER_ADDRESS"
TIMEOUT_S = 5.0


def discover(url: str = ECHO_URL, env: Mapping[str, str] = os.environ, ca_file: str | None = None,
             timeout: float = TIMEOUT_S) -> tuple[str | None, str]:
    """(address, "") or (None, why not). Never raises: an unknown address is preflight's WARN, not its end."""
    given = (env.get(ENV) or "").strip()
    if given:
        return _valid(given, ENV)
    try:
        context = ssl.create_default_context(cafile=ca_file)
        with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "curl/8"}), timeout=timeout,
                                    context=context) as answer:
            text = answer.read(64).decode("ascii", errors="replace").strip()
    except Exception as err:  # noqa: BLE001 - no network, a proxy, a refusal: all say "unknown" in one line
        return None, f"{url} did not answer: {type(err).__name__}: {str(err)[:120]}; set {ENV} to it"
    return _valid(text, url)


def _valid(text: str, source: str) -> tuple[str | None, str]:
    try:
        return str(ipaddress.IPv4Address(text)), ""
    except ValueError:
        return None, f"{source} gave {text[:40]!r}, not an IPv4 address"
