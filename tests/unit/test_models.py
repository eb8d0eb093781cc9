"""The model file format: the paper's model, round trips, and refusal of bad files."""

import math

import pytest

import xtc.models
from xtc.models import ModelError, dumps_model, load_model, loads_model


def test_paper_model_holds_the_papers_numbers():
    m = xtc.models.PAPER_MODEL
    assert m.model.a == 0.0915
    assert m.model.b_kpps_per_decade == 63.0051
    assert m.model.ybar_kpps == 78.14
    assert m.model.ubar_log10_cap == 1.39
    assert m.pi.kp == -1.747e-3 and m.pi.ki == 11.311e-3
    assert m.deadbeat.kp == 1.452e-3 and m.deadbeat.ki == 14.419e-3
    assert m.caps.cap_min_percent == 1 and m.caps.cap_max_percent == 100
    assert m.dead_zone_fraction == 0.10
    assert m.fitted_on["offered_pps"] == 100000


def test_round_trip(tmp_path):
    p = tmp_path / "m.toml"
    xtc.models.save_model(xtc.models.PAPER_MODEL, p)
    back = load_model(p)
    assert back == xtc.models.PAPER_MODEL


def test_steady_state_is_consistent():
    m = xtc.models.PAPER_MODEL.model
    cap = m.cap_for_kpps(50.0)
    assert math.isclose(m.steady_state_kpps(cap), 50.0)
    assert math.isclose(m.steady_state_kpps(10 ** m.ubar_log10_cap), m.ybar_kpps)


def _text(**model):
    base = {"a": "0.0915", "b_kpps_per_decade": "63.0", "ybar_kpps": "78.14", "ubar_log10_cap": "1.39"}
    base.update(model)
    lines = [f"{k} = {v}" for k, v in base.items() if v is not None]
    return 'schema = "xtc-model/1"\nname = "t"\n[model]\n' + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text, field",
    [
        (_text(a=None), "model.a"),
        (_text(b_kpps_per_decade=None), "model.b_kpps_per_decade"),
        (_text(a="nan"), "model.a"),
        (_text(a="-0.1"), "model.a"),
        (_text(a="1.0"), "model.a"),
        (_text(a="1.5"), "model.a"),
        (_text(b_kpps_per_decade="0.0"), "model.b_kpps_per_decade"),
        (_text(b_kpps_per_decade="inf"), "model.b_kpps_per_decade"),
        (_text(ybar_kpps='"78"'), "model.ybar_kpps"),
        (_text(ubar_log10_cap="24.5"), "model.ubar_log10_cap"),
        (_text(ybar_pps="78140"), "model.ybar_pps"),
        (_text() + "[controller]\ncap_min_percent = 0.0\n", "controller.cap_min_percent"),
        (_text() + "[controller]\ncap_max_percent = 150\n", "controller.cap_max_percent"),
        (_text() + "[controller]\ncap_min_percent = 50\ncap_max_percent = 20\n", "controller.cap_min_percent"),
        (_text() + "[caps]\nmin_percent = 0.0\n", "controller.cap_min_percent"),  # the deprecated table, moved
        (_text() + "[caps]\nmin_percent = 2.0\n[controller]\ncap_min_percent = 3.0\n", "caps.min_percent"),  # twice
        ("caps = 3\n" + _text(), "caps"),
        (_text() + "[controller.pi]\nkp_decades_per_kpps = 0.1\n", "controller.pi.ki_decades_per_kpps"),
        (_text() + "[controller]\ndead_zone_fraction = nan\n", "controller.dead_zone_fraction"),
        (_text().replace('schema = "xtc-model/1"', 'schema = "xtc-model/9"'), "schema"),
        (_text().replace('name = "t"\n', ""), "name"),
        ('schema = "xtc-model/1"\nname = "t"\n', "model"),
        ("not toml [", "<file>"),
    ],
)
def test_bad_files_are_refused_naming_the_field(text, field):
    with pytest.raises(ModelError) as exc:
        loads_model(text, source="bad.toml")
    assert exc.value.field == field
    assert field in str(exc.value) and "bad.toml" in str(exc.value)


def test_unit_mistake_gets_a_hint():
    with pytest.raises(ModelError, match="ybar_kpps"):
        loads_model(_text(ybar="78.14"))


def test_missing_file_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="cannot read"):
        load_model(tmp_path / "nope.toml")


def test_failed_save_leaves_old_file(tmp_path):
    p = tmp_path / "m.toml"
    xtc.models.save_model(xtc.models.PAPER_MODEL, p)
    before = p.read_text()
    bad = xtc.models.ModelFile.__new__(xtc.models.ModelFile)
    object.__setattr__(bad, "__dict__", {})
    with pytest.raises(Exception):
        xtc.models.save_model(bad, p)
    assert p.read_text() == before


def test_the_deprecated_caps_table_still_reads_with_a_warning(caplog) -> None:
    new = _text() + "[controller]\ncap_min_percent = 3.0\ncap_max_percent = 80.0\n"
    old = _text() + "[caps]\nmin_percent = 3.0\nmax_percent = 80.0\n"
    with caplog.at_level("WARNING", logger="xtc.models"):
        assert loads_model(new) == loads_model(old, source="old.toml")
    assert [r.getMessage() for r in caplog.records] == [
        "old.toml: [caps] min_percent/max_percent are deprecated; write [controller] cap_min_percent and "
        "cap_max_percent (read as those for now)"]
    assert "[caps]" not in dumps_model(loads_model(old)) and "cap_min_percent = 3.0" in dumps_model(loads_model(old))
