"""Fault injection and request accounting: the rules both control planes apply to API requests.

The emulator's API server applies them itself (:mod:`gangq.sandbox.server`); on the real control
plane a proxy in front of kube-apiserver does (:mod:`gangq.controlplane.faultproxy`), so the same
rules fail the same requests on both.

Rules match requests by verb (get, list, watch, create, update, patch, delete, deletecollection,
or "*") and resource ("pods", "jobs.batch", "widgets.example.com", "pods/status", or "*"), and
add latency and/or fail a fraction of them with 500, 429 (with Retry-After) or any other code.
Watch streams can be dropped (closed without an error, like a broken connection) or ended with an
ERROR 410 after a lifetime, and every request is counted by verb × resource × status code.

Configure from Python (`Faults.add_rule`, `Faults.configure`) or over HTTP (`POST /debug/faults`
with the JSON that `Faults.configure` takes; `GET /debug/faults`, `DELETE /debug/faults`).
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["FaultRule", "Faults", "FaultsError"]

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"})
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class FaultsError(ValueError):
    """A fault configuration that does not make sense (names the field)."""


class FaultRule:
    """Fail `error_rate` of the matching requests with `code` and/or delay them by `latency` seconds."""

    __slots__ = ("code", "error_rate", "latency", "namespace", "resource", "retry_after", "verb")

    def __init__(
        self,
        verb: str = "*",
        resource: str = "*",
        *,
        error_rate: float = 0.0,
        code: int = 500,
        retry_after: float | None = None,
        latency: float = 0.0,
        namespace: str | None = None,
    ) -> None:
        if verb not in VERBS:
            raise FaultsError(f"fault rule: verb {verb!r} is not one of {sorted(VERBS)}")
        if not 0.0 <= error_rate <= 1.0:
            raise FaultsError(f"fault rule {verb} {resource}: errorRate {error_rate} must be within [0, 1]")
        if not 400 <= int(code) <= 599:
            raise FaultsError(f"fault rule {verb} {resource}: code {code} must be an HTTP error code (400-599)")
        if latency < 0:
            raise FaultsError(f"fault rule {verb} {resource}: latency {latency} must be >= 0")
        self.verb = verb
        self.resource = resource
        self.error_rate = float(error_rate)
        self.code = int(code)
        self.retry_after = retry_after if retry_after is not None else (1.0 if self.code == 429 else None)
        self.latency = float(latency)
        self.namespace = namespace

    def matches(self, verb: str, resource: str, namespace: str | None) -> bool:
        if self.verb != "*" and self.verb != verb:
            return False
        if self.namespace is not None and self.namespace != namespace:
            return False
        r = self.resource
        return r in ("*", resource) or (r.endswith("/*") and resource.startswith(r[:-1]))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "verb": self.verb,
            "resource": self.resource,
            "errorRate": self.error_rate,
            "code": self.code,
            "latencySeconds": self.latency,
        }
        if self.retry_after is not None:
            d["retryAfterSeconds"] = self.retry_after
        if self.namespace is not None:
            d["namespace"] = self.namespace
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FaultRule:
        if not isinstance(d, dict):
            raise FaultsError(f"fault rule must be an object, got {d!r}")
        known = {"verb", "resource", "errorRate", "code", "retryAfterSeconds", "latencySeconds", "latencyMs",
                 "namespace"}
        unknown = set(d) - known
        if unknown:
            raise FaultsError(f"fault rule: unknown field(s) {sorted(unknown)}; known: {sorted(known)}")
        latency = float(d.get("latencySeconds", 0.0)) + float(d.get("latencyMs", 0.0)) / 1000.0
        try:
            return cls(
                str(d.get("verb", "*")),
                str(d.get("resource", "*")),
                error_rate=float(d.get("errorRate", 0.0)),
                code=int(d.get("code", 500)),
                retry_after=None if d.get("retryAfterSeconds") is None else float(d["retryAfterSeconds"]),
                latency=latency,
                namespace=d.get("namespace"),
            )
        except (TypeError, ValueError) as e:
            if isinstance(e, FaultsError):
                raise
            raise FaultsError(f"fault rule {d!r}: {e}") from None


class Faults:
    """The fault rules and request counters of one API server."""

    def __init__(self, *, seed: int | None = None) -> None:
        self.rules: list[FaultRule] = []
        self.watch_lifetime: float | None = None  # end every watch stream after this many seconds
        self.watch_lifetime_error: bool = False  # ... with an ERROR 410 instead of a silent close
        self.counters: dict[tuple[str, str, int], int] = {}
        self._rng = random.Random(seed)

    # ------------------------------------------------------------------ rules
    def add_rule(self, rule: FaultRule | None = None, /, **kwargs: Any) -> FaultRule:
        """Add a rule: `faults.add_rule(verb="create", resource="pods", error_rate=0.5, code=429)`."""
        r = rule if rule is not None else FaultRule(**kwargs)
        self.rules.append(r)
        return r

    def clear(self) -> None:
        self.rules.clear()
        self.watch_lifetime = None
        self.watch_lifetime_error = False

    def configure(self, config: dict[str, Any]) -> None:
        """Replace the configuration: {"rules": [...], "watchLifetimeSeconds": s, "watchLifetimeError": bool}."""
        if not isinstance(config, dict):
            raise FaultsError("fault configuration must be a JSON object")
        rules = [FaultRule.from_dict(r) for r in config.get("rules") or []]
        lifetime = config.get("watchLifetimeSeconds")
        if lifetime is not None and float(lifetime) <= 0:
            raise FaultsError(f"watchLifetimeSeconds {lifetime} must be > 0")
        self.rules = rules
        self.watch_lifetime = None if lifetime is None else float(lifetime)
        self.watch_lifetime_error = bool(config.get("watchLifetimeError", False))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rules": [r.to_dict() for r in self.rules],
            "watchLifetimeSeconds": self.watch_lifetime,
            "watchLifetimeError": self.watch_lifetime_error,
        }

    def decide(self, verb: str, resource: str, namespace: str | None) -> tuple[float, FaultRule | None]:
        """(added latency in seconds, the rule whose error to return or None) for one request."""
        if not self.rules:
            return 0.0, None
        latency = 0.0
        failing = None
        for r in self.rules:
            if r.matches(verb, resource, namespace):
                latency += r.latency
                if failing is None and r.error_rate > 0 and self._rng.random() < r.error_rate:
                    failing = r
        return latency, failing

    @staticmethod
    def error_body(rule: FaultRule, verb: str, resource: str) -> dict[str, Any]:
        reason = _REASONS.get(rule.code, "InternalError")
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"injected fault: {verb} {resource} failed with {rule.code}",
            "reason": reason,
            "code": rule.code,
        }
        if rule.retry_after is not None:
            body["details"] = {"retryAfterSeconds": int(max(1, round(rule.retry_after)))}
        return body

    # ------------------------------------------------------------------ counters
    def count(self, verb: str, resource: str, code: int) -> None:
        key = (verb, resource, code)
        self.counters[key] = self.counters.get(key, 0) + 1

    def requests(self) -> dict[str, Any]:
        """Counters as JSON: a flat list, and totals per verb and writes in all."""
        items = [
            {"verb": v, "resource": r, "code": c, "count": n} for (v, r, c), n in sorted(self.counters.items())
        ]
        by_verb: dict[str, int] = {}
        for (v, _r, _c), n in self.counters.items():
            by_verb[v] = by_verb.get(v, 0) + n
        writes = sum(n for v, n in by_verb.items() if v in ("create", "update", "patch", "delete", "deletecollection"))
        return {"requests": items, "byVerb": by_verb, "total": sum(by_verb.values()), "writes": writes}

    def reset_counters(self) -> None:
        self.counters.clear()
