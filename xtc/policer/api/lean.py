"""The lean read path: the API's common reads answered without FastAPI's per-request machinery.

FastAPI spends most of a small read's CPU outside the route's own code: its middleware stack, the
match against every route, solving the dependencies and validating each query parameter through
pydantic (about 0.2 ms of the 0.25-0.45 ms a read cost, measured in
docs/results/2026-11-26-policer-api/).  :class:`LeanReads` answers a ``GET`` of a registered route
before all of that, calling the very function the FastAPI route calls, when the request is plainly
valid: its path matches, every query parameter is known, given once, not percent-encoded and valid
by the same rule as the route's declaration (the bounds of a page, the name patterns, the
literals), no body, and (with ``protect_reads``) an ``Authorization`` header that is exactly
``Bearer <a configured token>``.  Anything else (an invalid or unusual request, a read that fails,
a database busy with another thread) goes to FastAPI unchanged, which gives it the answer and the
error body it always did: the lean path only ever answers what FastAPI would answer with the same
200 and the same bytes (tests/policer/test_policer_lean.py compares the two request by request).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Iterable
from typing import Any

from fastapi.responses import Response

__all__ = ["LeanReads", "digits", "matching", "one_of", "boolean"]

#: A parser of one query value: the value, or :data:`INVALID`.
Parser = Callable[[str], Any]
INVALID = object()


def digits(lo: int, hi: int) -> Parser:
    """A whole number written in decimal digits (at most 19), ``lo`` <= n <= ``hi`` (``QueryInt``)."""

    def parse(v: str) -> Any:
        if not (v.isascii() and v.isdigit() and len(v) <= 19):
            return INVALID
        n = int(v)
        return n if lo <= n <= hi else INVALID

    return parse


def matching(pattern: str) -> Parser:
    """A text that the whole of ``pattern`` matches (the routes' patterns are anchored; ``$`` does not
    admit a final newline here, as it does not for pydantic)."""
    rx = re.compile(pattern)

    def parse(v: str) -> Any:
        return v if rx.fullmatch(v) else INVALID

    return parse


def one_of(*values: str) -> Parser:
    """One of the literals ``values``."""
    allowed = frozenset(values)
    return lambda v: v if v in allowed else INVALID


def boolean(v: str) -> Any:
    """``true`` or ``false`` exactly (FastAPI takes more spellings: those go to it)."""
    return True if v == "true" else False if v == "false" else INVALID


class _Route:
    __slots__ = ("path", "params", "query", "fn")

    def __init__(self, path: re.Pattern[str], params: dict[str, Parser], query: dict[str, Parser],
                 fn: Callable[..., Response]):
        self.path, self.params, self.query, self.fn = path, params, query, fn


class LeanReads:
    """The registered reads; :meth:`__call__` answers one or returns False (the caller passes the
    request on to FastAPI).

    ``tokens``: with reads protected, the bearer tokens (else None: reads are open); ``inline_lock``:
    the store's lock for a read on the event loop (:attr:`xtc.policer.db.Database.inline_lock`), taken
    without waiting; None: no read is answered here (the store's reads belong in a worker thread).
    """

    def __init__(self, tokens: Iterable[str] | None, inline_lock: Any):
        self._auth = None if tokens is None else [b"Bearer " + t.encode() for t in tokens]
        self._lock = inline_lock
        self._routes: list[_Route] = []

    def get(self, path: str, params: dict[str, Parser] | None = None,
            **query: Parser) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
        """Register the decorated function (it returns a :class:`Response`) for ``GET path``: ``path`` a
        regular expression with a named group per path parameter, ``params`` their parsers, ``query``
        the query parameters' parsers (those not given take the function's defaults)."""

        def register(fn: Callable[..., Response]) -> Callable[..., Response]:
            self._routes.append(_Route(re.compile(path), params or {}, query, fn))
            return fn

        return register

    def _authorised(self, headers: list[tuple[bytes, bytes]]) -> bool:
        if self._auth is None:
            return True
        given = next((v for k, v in headers if k == b"authorization"), None)
        if given is None:
            return False
        ok = False
        for a in self._auth:  # compare with every token in constant time
            ok |= hmac.compare_digest(given, a)
        return ok

    def answer(self, scope: dict[str, Any]) -> Response | None:
        """The response to ``scope``'s request, or None: FastAPI answers it."""
        if scope["method"] != "GET" or self._lock is None:
            return None
        path = scope["path"]
        route = kw = None
        for r in self._routes:
            m = r.path.fullmatch(path)
            if m is not None:
                route, kw = r, {}
                for name, value in m.groupdict().items():
                    v = r.params[name](value)
                    if v is INVALID:
                        return None
                    kw[name] = v
                break
        if route is None or kw is None:
            return None
        qs = scope["query_string"]
        if qs:
            if b"%" in qs or b"+" in qs:
                return None
            for part in qs.split(b"&"):
                name, eq, raw = part.partition(b"=")
                key = name.decode("latin-1")
                parse = route.query.get(key)
                if parse is None or not eq or key in kw:
                    return None
                v = parse(raw.decode("latin-1"))
                if v is INVALID:
                    return None
                kw[key] = v
        headers = scope["headers"]
        for k, v in headers:
            if (k == b"content-length" and v != b"0") or k == b"transfer-encoding":
                return None
        if not self._authorised(headers):
            return None
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return route.fn(_a=None, **kw)
        except Exception:  # noqa: BLE001 - FastAPI answers it again, with its error
            return None
        finally:
            self._lock.release()
