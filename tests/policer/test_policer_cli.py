"""The client CLI against a running policer, keygen, check-config and openapi."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import TOKEN
from xtc.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    rc = main(list(argv))
    out = capsys.readouterr().out
    return rc, (json.loads(out) if out.strip() else None)


def test_client_commands(make_policer: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                         tmp_path: Path) -> None:
    pol = make_policer()
    monkeypatch.setenv("XTC_POLICER_URL", pol.url)
    monkeypatch.delenv("XTC_POLICER_TOKEN", raising=False)
    # Without a token a write is refused, and the CLI says so with a non-zero status.
    rc, out = run(capsys, "policer", "network-add", "gold")
    assert rc == 1 and "Bearer" in out["detail"]
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    t = ["--token-file", str(tf)]
    assert run(capsys, "policer", "network-add", *t, "gold")[0] == 0
    rc, out = run(capsys, "policer", "sla", *t, "gold", "--min", "1000", "--max", "5000", "--weight", "3")
    assert rc == 0 and out["sla"] == {"min_pps": 1000.0, "max_pps": 5000.0, "weight": 3.0}
    rc, out = run(capsys, "policer", "router-add", *t, "r1", "tcp://127.0.0.1:1", "50000", "--mode", "off")
    assert rc == 0 and out["control_mode"] == "off"
    rc, out = run(capsys, "policer", "policy", *t, "misbehaviour", "enabled=false", "hold_s=7")
    assert rc == 0 and out["enabled"] is False and out["hold_s"] == 7 and out["ratio"] == 1.5
    rc, out = run(capsys, "policer", "policy", *t, "activation", "on_fraction=0.1")
    assert rc == 1 and "off_fraction" in out["detail"][0]["msg"]
    rc, out = run(capsys, "policer", "actions", "--kind", "sla_set")
    assert rc == 0 and [a["detail"]["network"] for a in out] == ["gold"]
    rc, out = run(capsys, "policer", "routers")
    assert [r["name"] for r in out] == ["r1"]
    assert run(capsys, "policer", "router-rm", *t, "r1")[1]["status"] == "removed"


def test_keygen_openapi_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(capsys, "policer", "keygen", str(tmp_path), "p")
    assert rc == 0 and len(out["public_key"]) == 40 and Path(out["secret"]).exists()
    rc, doc = run(capsys, "policer", "openapi")
    assert rc == 0 and "/routers" in doc["paths"]
    cfg = tmp_path / "p.toml"
    cfg.write_text("[engine]\nperiod_s = -1\n")
    assert main(["policer", "check-config", str(cfg)]) == 1
    assert "engine.period_s" in capsys.readouterr().err
