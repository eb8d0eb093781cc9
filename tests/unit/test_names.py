"""One name per thing (issue 47 item 5, docs/design/names.md): one spelling per controller variant."""

from __future__ import annotations

import pytest

from xtc_lab.sim.experiments import CONTROLLER_ALIASES, PAPER_CONTROLLERS, controller_spec


def test_one_spelling_per_controller_variant_and_the_old_one_still_accepted() -> None:
    assert "deadbeat-capmin3" in PAPER_CONTROLLERS and "deadbeat+capmin3" not in PAPER_CONTROLLERS
    assert controller_spec("deadbeat+capmin3") is PAPER_CONTROLLERS["deadbeat-capmin3"]
    assert set(CONTROLLER_ALIASES.values()) <= set(PAPER_CONTROLLERS)
    with pytest.raises(ValueError, match="unknown controller 'deadbeat capmin3'"):
        controller_spec("deadbeat capmin3")


#: Public class names deliberately defined twice, each with its reason (keep it tiny; empty today).
TWICE_ALLOWED: dict[str, str] = {}


def _public_classes() -> dict[str, list[str]]:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    where: dict[str, list[str]] = {}
    for top in (root / "xtc", root / "lab" / "xtc_lab"):
        for path in sorted(top.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                # A name with a leading underscore is its module's own (never imported elsewhere: ruff's
                # PLC2701 checks that), so two modules may each have a private _Document.
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    where.setdefault(node.name, []).append(f"{path.relative_to(root)}:{node.lineno}")
    return where


def test_no_public_class_name_means_two_things() -> None:
    where = _public_classes()
    assert len(where) > 200, "the scan found too few classes: is it looking in the right folders?"
    twice = {name: places for name, places in where.items() if len(places) > 1 and name not in TWICE_ALLOWED}
    assert not twice, "a class name defined in two places (rename the less public one, docs/design/names.md): " + "; ".join(
        f"{name} in {', '.join(places)}" for name, places in sorted(twice.items()))
    stale = [name for name in TWICE_ALLOWED if len(where.get(name, ())) < 2]
    assert not stale, f"allowed twice but defined once or not at all now (remove from TWICE_ALLOWED): {stale}"


def test_the_policer_reads_an_older_daemons_measured_pps_as_forwarded_pps() -> None:
    import json

    from xtc.daemon import api
    from xtc.policer.link import BadReply, parse_vr_list
    from xtc.policer.samples import parse_samples

    old_fields = [{"forwarded_pps": "measured_pps"}.get(f, f) for f in api.SAMPLE_FIELDS]
    row = ["vr0", "active", True, 1000.0, 900.0, 1200.0, 1.5, None, None, None]
    want = [{"vr": "vr0", "state": "active", "present": True, "setpoint_pps": 1000.0, "forwarded_pps": 900.0,
             "offered_pps": 1200.0, "cap_percent": 1.5, "saturated": None}]

    def body(schema: str, fields: list[str]) -> bytes:
        return json.dumps({"schema": schema, "t_unix_s": 1.0, "period_s": 1.0, "fields": fields, "vrs": [row]}).encode()

    assert api.SAMPLES_SCHEMA == "xtc-samples/2" and "forwarded_pps" in api.SAMPLE_FIELDS
    assert parse_samples([b"samples", body("xtc-samples/2", list(api.SAMPLE_FIELDS))], 8) == want
    assert parse_samples([b"samples", body("xtc-samples/1", old_fields)], 8) == want
    with pytest.raises(BadReply):  # the old name in the new format: refused
        parse_samples([b"samples", body("xtc-samples/2", old_fields)], 8)
    assert parse_vr_list({"vrs": [dict(zip(old_fields, row))]}, 8) == want
