"""The manager API's pydantic models: docs/manager-api.schema.json is generated from them, and
what the daemon really sends (replies, samples) and accepts (requests) fits them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from xtc.daemon import api
from xtc.daemon.config import loads_config
from xtc.daemon.service import DaemonService
from xtc_lab.sim.host import SimHost

from fakes.daemon import daemon_toml

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_schema_file_is_exactly_what_the_models_generate() -> None:
    assert api.SCHEMA_PATH == ROOT / "docs" / "manager-api.schema.json"
    assert api.SCHEMA_PATH.read_text(encoding="utf-8") == api.schema_text()


def test_the_module_prints_the_schema_and_refuses_other_arguments() -> None:
    env_path = {"PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "xtc.daemon.api"], capture_output=True, text=True, env=env_path, timeout=60)
    assert out.returncode == 0 and out.stdout == api.schema_text()
    bad = subprocess.run([sys.executable, "-m", "xtc.daemon.api", "--bogus"], capture_output=True, text=True,
                         env=env_path, timeout=60)
    assert bad.returncode != 0 and "usage" in bad.stderr


def test_every_command_has_a_model_with_its_fields() -> None:
    assert list(api.REQUEST_MODELS) == list(api.COMMANDS)
    for cmd, model in api.REQUEST_MODELS.items():
        # (by their names on the wire: a field named as an attribute of BaseModel has it as its alias)
        assert {f.alias or n for n, f in model.model_fields.items()} == {"v", "id", "cmd", *api.COMMANDS[cmd]}
        assert model.model_config["extra"] == "forbid" and model.model_config["frozen"]


@pytest.fixture()
def service(tmp_path: Path):  # noqa: ANN201
    cfg = loads_config(daemon_toml(tmp_path, daemon='backend = "sim"', tables='[[sim.vr]]\nname = "vr1"'))
    t = [1000.0]
    clock = lambda: t[0]  # noqa: E731
    svc = DaemonService(cfg, SimHost.from_config(cfg, clock=clock), clock=clock, wall_clock=lambda: 5.0)
    svc.open()
    try:
        for _ in range(3):
            t[0] += 1.0
            svc.run_period(t[0], 1.0)
        yield svc
    finally:
        svc.close()


def test_real_replies_and_samples_fit_the_models(service: DaemonService) -> None:
    def ask(doc: dict) -> bytes:
        return service.handle_message([json.dumps({"v": 1, **doc}).encode()])

    ok = api.OkReply.model_validate_json(ask({"cmd": "activate", "vr": "vr1", "setpoint_pps": 30000, "id": "a"}))
    assert ok.id == "a"
    status = api.OkReply.model_validate_json(ask({"cmd": "status", "vr": "vr1"}))
    api.Instance.model_validate(status.result)
    err = api.ErrorReply.model_validate_json(ask({"cmd": "status", "vr": "nope"}))
    assert err.error.code == "unknown_vr"
    err = api.ErrorReply.model_validate_json(ask({"cmd": "activate", "vr": "vr1", "setpoint_pps": "x", "id": 3}))
    assert (err.id, err.error.code) == (3, "bad_field") and "setpoint_pps" in err.error.message
    topic, body = api.samples_message(5.0, 1.0, service.core.sample_rows())
    assert topic == b"samples"
    msg = api.Samples.model_validate_json(body)
    assert msg.fields == list(api.SAMPLE_FIELDS) and msg.vrs
    for sample in api.decode_samples(body):
        api.Sample.model_validate(sample)
