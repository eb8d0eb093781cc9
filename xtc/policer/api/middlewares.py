"""The API's guards on the request path, before a route's code: ASGI middlewares and the route class.

:class:`BodyLimit` refuses a body over ``max_bytes`` (413) before more of it is read; :class:`AuthFirst`
refuses a write without a valid bearer token (401) before its body is even parsed (so no 422 either);
:class:`StrictJsonRoute` parses a JSON body strictly (no duplicate keys, NaN, Infinity or numbers that
overflow: :func:`xtc.policer.link.strict_json`); :func:`validation_problems` is the 422 body, which
never repeats the input.
"""

import json
from typing import Any

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials

from ..link import strict_json

__all__ = ["AuthFirst", "BodyLimit", "StrictJsonRoute", "validation_problems", "WRITE_METHODS", "MAX_BODY_BYTES"]

#: Largest request body accepted, bytes (the largest valid one is well under 2 KiB).
MAX_BODY_BYTES = 64 * 1024
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class AuthFirst:
    """ASGI middleware: a write (POST, PUT, PATCH, DELETE) without a valid bearer token gets 401 at once."""

    def __init__(self, app: Any, check: Any):
        self.app = app
        self.check = check

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] in WRITE_METHODS:
            cred = None
            for k, v in scope["headers"]:
                if k == b"authorization":
                    scheme, _, tok = v.decode("latin-1").partition(" ")
                    cred = HTTPAuthorizationCredentials(scheme=scheme, credentials=tok.strip())
                    break
            try:
                self.check(cred)
            except HTTPException as e:
                await JSONResponse({"detail": e.detail}, status_code=401, headers=e.headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _BodyTooLarge(HTTPException):
    def __init__(self) -> None:
        super().__init__(413, f"the request body exceeds {MAX_BODY_BYTES} bytes")


class BodyLimit:
    """ASGI middleware: a body announced or streamed beyond ``max_bytes`` gets 413; no more of it is read."""

    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = False
        for k, v in scope["headers"]:
            if k == b"content-length":
                if not v.isdigit() or len(v) > 18 or int(v) > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
                body = body or int(v) > 0
            elif k == b"transfer-encoding":
                body = True
        if not body:  # no body to count (most reads): nothing to wrap
            await self.app(scope, receive, send)
            return
        received = 0
        started = False
        too_large = False

        async def limited_receive() -> Any:
            nonlocal received, too_large
            msg = await receive()
            if msg["type"] == "http.request":
                received += len(msg.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _BodyTooLarge()
            return msg

        async def watched_send(msg: Any) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                if too_large:  # the rest of the body is not read: the connection is closed after the 413
                    msg = {**msg, "headers": [*msg.get("headers", []), (b"connection", b"close")]}
            await send(msg)

        try:
            await self.app(scope, limited_receive, watched_send)
        except _BodyTooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Any, receive: Any, send: Any) -> None:
        e = _BodyTooLarge()
        await JSONResponse({"detail": e.detail}, status_code=413, headers={"Connection": "close"})(scope, receive, send)


class _StrictJsonRequest(Request):
    """A request whose JSON body is parsed strictly (:func:`xtc.policer.link.strict_json`)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = strict_json(await self.body())
            except (ValueError, UnicodeDecodeError) as e:
                raise json.JSONDecodeError(str(e)[:200], "", 0) from None
        return self._json


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Any:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict_handler


def validation_problems(e: RequestValidationError) -> list[dict[str, Any]]:
    """The validation errors without their ``input`` (a body is never echoed), loc and msg bounded."""
    out = []
    for err in e.errors()[:20]:
        msg = str(err.get("msg", ""))
        if err.get("type") == "json_invalid" and isinstance(err.get("ctx"), dict):
            msg = f"{msg}: {err['ctx'].get('error')}"
        loc = [p if isinstance(p, int) else str(p)[:64] for p in err.get("loc", ())]
        out.append({"loc": loc, "msg": msg[:300], "type": str(err.get("type"))})
    return out
