"""The lean request path: the API's common requests answered without FastAPI's per-request machinery.

FastAPI spends most of a small request's CPU outside the route's own code: its middleware stack, the
match against every route, solving the dependencies and validating each parameter through pydantic
(about half of the 0.24-0.43 ms a read cost, measured in docs/results/2026-11-26-policer-api/).
:class:`LeanPath` answers a registered route before all of that, calling the very function the
FastAPI route calls, when the request is plainly valid:

* a read (``GET``): its path matches, every query parameter is known, given once, not
  percent-encoded and valid by the same rule as the route's declaration (the bounds of a page, the
  name patterns, the literals), no body, and (with ``protect_reads``) an ``Authorization`` header
  that is exactly ``Bearer <a configured token>``; it runs on the event loop when the store's read
  connection is free at once, else in the threadpool (as the FastAPI route does);
* a delete (``DELETE``): its path matches, no query, no body, an ``Authorization`` header exactly
  ``Bearer <a configured token>``; it runs in the threadpool, and a refusal of the store (404, 409) is
  answered as FastAPI's handlers answer it;
* a write (``POST``, ``PUT``, ``PATCH`` with a JSON body): its path matches, no query, an
  ``Authorization`` header exactly ``Bearer <a configured token>``, ``Content-Type:
  application/json``, a ``Content-Length`` within the body limit, a body that is strict JSON and
  valid for the route's request model; it runs in the threadpool, as FastAPI runs it, and a refusal
  of the store (404, 409) or of the route (422) is answered as FastAPI's handlers answer it.

Anything else (an invalid or unusual request, a read that fails) goes to FastAPI unchanged (a write's body, once read, is handed on to it), which gives it
the answer and the error body it always did: the lean path only answers what FastAPI would answer
the same way, with the same bytes (tests/policer/test_policer_lean.py compares the two request by
request).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import HTTPException
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from ..db import WouldWait
from ..link import strict_json
from ..store import Conflict, NotFound

__all__ = ["LeanPath", "digits", "matching", "one_of", "boolean"]

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
    __slots__ = ("path", "params", "query", "fn", "body")

    def __init__(self, path: re.Pattern[str], params: dict[str, Parser], query: dict[str, Parser],
                 fn: Callable[..., Response], body: type[BaseModel] | None = None):
        self.path, self.params, self.query, self.fn, self.body = path, params, query, fn, body


Receive = Callable[[], Awaitable[dict[str, Any]]]


class LeanPath:
    """The registered reads (:meth:`get`) and writes (:meth:`write`): :meth:`answer` answers a read,
    :meth:`answer_write` a write, or they leave it to FastAPI.

    ``tokens``: the bearer tokens; ``actor``: a token's name in the audit log (the FastAPI routes'
    own); ``protect_reads``: reads need a token too; ``inline_lock``: the store's lock for a read on
    the event loop (:attr:`xtc.policer.db.Database.inline_lock`), taken without waiting (else, and when
    None, the read runs in the threadpool); ``max_body_bytes``: the body limit; ``no_wait``: the database's
    :meth:`~xtc.policer.db.SqliteDatabase.no_wait` (None: every write in the threadpool), under which a
    write runs on the event loop when its transaction can begin at once, else in the threadpool.
    """

    def __init__(self, tokens: Iterable[str], actor: Callable[[bytes], str], protect_reads: bool, inline_lock: Any,
                 max_body_bytes: int, no_wait: Callable[[], Any] | None = None):
        #: "Bearer <token>" -> the token's actor name (tokens of printable ASCII only, as the configuration
        #: takes them: the header's bytes are then the token's, as FastAPI reads them)
        self._actors = [(b"Bearer " + t.encode(), actor(t.encode())) for t in tokens
                        if t.isascii() and t.isprintable() and not any(c.isspace() for c in t)]
        self._protect_reads = protect_reads
        self._lock = inline_lock
        self._max_body = max_body_bytes
        self._no_wait = no_wait
        self._routes: list[_Route] = []
        self._writes: dict[str, list[_Route]] = {"POST": [], "PUT": [], "PATCH": [], "DELETE": []}

    def get(self, path: str, params: dict[str, Parser] | None = None,
            **query: Parser) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
        """Register the decorated function (it returns a :class:`Response`) for ``GET path``: ``path`` a
        regular expression with a named group per path parameter, ``params`` their parsers, ``query``
        the query parameters' parsers (those not given take the function's defaults)."""

        def register(fn: Callable[..., Response]) -> Callable[..., Response]:
            self._routes.append(_Route(re.compile(path), params or {}, query, fn))
            return fn

        return register

    def write(self, method: str, path: str, body: type[BaseModel],
              params: dict[str, Parser] | None = None) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
        """Register the decorated function (called with ``body``, the request model, ``actor`` and the
        path parameters; it returns a :class:`Response`) for ``method path``."""

        def register(fn: Callable[..., Response]) -> Callable[..., Response]:
            self._writes[method].append(_Route(re.compile(path), params or {}, {}, fn, body))
            return fn

        return register

    def delete(self, path: str, params: dict[str, Parser] | None = None) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
        """Register the decorated function (called with ``actor`` and the path parameters; it returns a
        :class:`Response`) for ``DELETE path``."""

        def register(fn: Callable[..., Response]) -> Callable[..., Response]:
            self._writes["DELETE"].append(_Route(re.compile(path), params or {}, {}, fn))
            return fn

        return register

    def _actor(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """The actor of the request's ``Authorization: Bearer <token>``; None: not exactly that."""
        given = next((v for k, v in headers if k == b"authorization"), None)
        if given is None:
            return None
        found = None
        for a, actor in self._actors:  # compare with every token in constant time
            if hmac.compare_digest(given, a):
                found = actor
        return found

    @staticmethod
    def _match(routes: list[_Route], path: str) -> tuple[_Route, dict[str, Any]] | None:
        for r in routes:
            m = r.path.fullmatch(path)
            if m is not None:
                kw = {}
                for name, value in m.groupdict().items():
                    v = r.params[name](value)
                    if v is INVALID:
                        return None
                    kw[name] = v
                return r, kw
        return None

    async def answer_write(self, scope: dict[str, Any], receive: Receive) -> tuple[Response | None, Receive]:
        """The response to ``scope``'s write, or None and the ``receive`` to hand FastAPI (the body
        this has read, then the connection's)."""
        routes = self._writes.get(scope["method"])
        found = self._match(routes, scope["path"]) if routes else None
        if found is None or scope["query_string"]:
            return None, receive
        route, kw = found
        if route.body is None:  # a delete: no body
            for k, v in scope["headers"]:
                if (k == b"content-length" and v != b"0") or k == b"transfer-encoding":
                    return None, receive
            actor = self._actor(scope["headers"])
            if actor is None:
                return None, receive
            return await self._run(route, {"actor": actor, **kw}), receive
        length = -1
        content_type = None
        for k, v in scope["headers"]:
            if k == b"content-length":
                if length >= 0 or not (v.isdigit() and len(v) <= 18):
                    return None, receive
                length = int(v)
            elif k == b"transfer-encoding":
                return None, receive
            elif k == b"content-type":
                if content_type is not None:  # given twice: FastAPI reads the first one
                    return None, receive
                content_type = v
        if not (0 < length <= self._max_body) or content_type != b"application/json":
            return None, receive
        actor = self._actor(scope["headers"])
        if actor is None:
            return None, receive
        messages = []
        chunks = []
        while True:
            msg = await receive()
            messages.append(msg)
            if msg["type"] != "http.request":
                return None, _replay(messages, receive)
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body", False):
                break
        try:
            model = route.body.model_validate(strict_json(b"".join(chunks)))  # type: ignore[union-attr]
        except (ValueError, UnicodeDecodeError, ValidationError):
            return None, _replay(messages, receive)
        return await self._run(route, {"body": model, "actor": actor, **kw}), receive

    async def _run(self, route: _Route, kw: dict[str, Any]) -> Response:
        """A write's answer: its function on the event loop when its transaction begins at once (SQLite's
        write lock free: the store's own work is about 0.05 ms, a hand-over to a thread and back more, and
        under load the hand-overs made the writes' tail), else in the threadpool, as FastAPI runs it; a
        refusal as FastAPI's handlers answer it."""
        try:
            if self._no_wait is not None:
                try:
                    with self._no_wait():
                        return route.fn(**kw)
                except WouldWait:
                    pass  # another writer holds the lock: wait for it in a thread, not on the loop
            return await run_in_threadpool(route.fn, **kw)
        except NotFound as e:
            return JSONResponse({"detail": str(e)}, status_code=404)
        except Conflict as e:
            return JSONResponse({"detail": str(e)}, status_code=409)
        except HTTPException as e:
            return await http_exception_handler(None, e)  # type: ignore[arg-type]

    async def answer(self, scope: dict[str, Any]) -> Response | None:
        """The response to ``scope``'s read, or None: FastAPI answers it."""
        if scope["method"] != "GET":
            return None
        found = self._match(self._routes, scope["path"])
        if found is None:
            return None
        route, kw = found
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
        if self._protect_reads and self._actor(headers) is None:
            return None
        try:
            if self._lock is not None and self._lock.acquire(blocking=False):
                try:
                    return route.fn(_a=None, **kw)
                finally:
                    self._lock.release()
            return await run_in_threadpool(route.fn, _a=None, **kw)
        except NotFound as e:  # as the app's handler answers it
            return JSONResponse({"detail": str(e)}, status_code=404)
        except Exception:  # noqa: BLE001 - FastAPI answers it again, with its error
            return None


def _replay(messages: list[dict[str, Any]], receive: Receive) -> Receive:
    """``receive`` that gives ``messages`` first, then the connection's."""
    pending = list(messages)

    async def replayed() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
