"""Schemathesis against the OpenAPI document: no server errors, responses as documented, bad input 4xx."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from xtc.policer.api import create_app
from xtc.policer.config import PolicerConfig
from xtc.policer.store import Store

TOKEN = "schemathesis-token-0123456789"

store = Store("sqlite://")
app = create_app(PolicerConfig(tokens=frozenset({TOKEN})), store)
# Some objects to find, so that reads and writes also reach their 200 paths.
store.add_router("r1", "tcp://127.0.0.1:1", 100000.0, "off", None, "test")
store.add_network("n1", "", "test")
store.record_poll("r1", [{"vr": "v1", "state": "inactive", "forwarded_pps": 5.0, "offered_pps": 6.0}])

schema = schemathesis.openapi.from_asgi("/openapi.json", app)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=25)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_with_token(case: schemathesis.Case) -> None:
    resp = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    case.validate_response(resp, checks=CHECKS)
    if 400 <= resp.status_code < 500:
        detail = resp.json()["detail"]
        assert detail, "a refusal says why"


@schema.parametrize()
@settings(deadline=None, max_examples=5, suppress_health_check=list(HealthCheck))
def test_writes_without_token_are_401(case: schemathesis.Case) -> None:
    resp = case.call(headers={"Authorization": ""})
    case.validate_response(resp, checks=[not_a_server_error, status_code_conformance])
    if case.method.upper() == case.operation.method.upper() != "GET":
        assert resp.status_code == 401, (case.method, case.path, resp.text)
