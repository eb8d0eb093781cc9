"""The REST API (FastAPI): routers, VRs, virtual networks and their SLAs, setpoints, policies, actions.

:func:`create_app` builds the application around a :class:`~xtc.policer.store.Store` and, when serving,
an :class:`~xtc.policer.engine.Engine` that runs the policies in the background.  Every write needs a
bearer token (``Authorization: Bearer <token>``); reads need one only when the configuration says
``protect_reads``.  Bad requests are answered 4xx with a message: 401 (no or wrong token), 404 (no
such object), 409 (conflicts with the current state), 422 (the body, path or query is invalid; the
FastAPI validation format, a list of ``{loc, msg, type}``, which never repeats the input), 413
(the body is larger than :data:`MAX_BODY_BYTES`).  A body must be strict JSON: no duplicate keys,
no NaN or Infinity, no number that overflows.

The package: :mod:`.schemas` (the request and response models), :mod:`.middlewares` (body limit,
authentication first, strict JSON, the 422 body), :mod:`.metrics` (the Prometheus collector),
:mod:`.pages` (the offline ``/docs`` and ``/redoc``) and :mod:`.routes` (the application).
"""

from .metrics import PolicerCollector
from .routes import API_DESCRIPTION, MAX_BODY_BYTES, create_app, openapi_document

__all__ = ["create_app", "openapi_document", "API_DESCRIPTION", "MAX_BODY_BYTES", "PolicerCollector"]
