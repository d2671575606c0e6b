"""A preflight check's verdict: `ok`, `FAIL` (it would stop `pulumi up` or the first job: the line says what and the
exact fix) or `warn` (worth knowing, stops nothing, or cannot be known before `up`); and Azure RBAC's rule for
whether an action is allowed, which the role and registry checks share. Pure.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OK, FAIL, WARN = "ok", "FAIL", "warn"


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str  # OK | FAIL | WARN
    text: str

    def line(self) -> str:
        return f"{self.verdict:<4} {self.name}: {self.text}"


def failed(checks: Iterable[Check]) -> bool:
    return any(c.verdict == FAIL for c in checks)


def allowed(action: str, permissions: Sequence[Mapping[str, Any]]) -> bool:
    """Azure RBAC's rule: an action is allowed if one permission's actions match it and that permission's
    notActions do not (https://learn.microsoft.com/azure/role-based-access-control/role-definitions#notactions);
    `*` matches any characters, case-insensitively."""
    def match(patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(action.lower(), p.lower().replace("[", "[[]").replace("?", "[?]"))
                   for p in patterns)

    return any(match(p.get("actions") or []) and not match(p.get("notActions") or []) for p in permissions)
