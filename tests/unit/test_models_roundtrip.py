"""Model files: whatever :func:`xtc.models.dumps_model` writes, :func:`xtc.models.loads_model` reads back
as the same model; each table refuses unknown keys by their full name."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xtc.models
from xtc.models import CapBounds, Gains, LogCapModel, ModelError, ModelFile, loads_model

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
toml_scalar = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), finite, text)
toml_table = st.recursive(
    st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True), toml_scalar, max_size=4),
    lambda inner: st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True),
                                  st.one_of(toml_scalar, inner, st.lists(toml_scalar, max_size=3)), max_size=4),
    max_leaves=8,
)


@st.composite
def model_files(draw: st.DrawFn) -> ModelFile:
    lo = draw(st.floats(1.0, 100.0))
    gains = st.none() | st.builds(Gains, kp=finite, ki=finite)
    return ModelFile(
        name=draw(text.filter(bool)),
        model=LogCapModel(
            a=draw(st.floats(0.0, 1.0, exclude_max=True)),
            b_kpps_per_decade=draw(finite.filter(lambda b: b != 0)),
            ybar_kpps=draw(st.floats(1e-6, 1e9)),
            ubar_log10_cap=draw(st.floats(0.0, 2.0)),
            period_s=draw(st.floats(0.01, 60.0)),
        ),
        caps=CapBounds(lo, draw(st.floats(lo, 100.0))),
        pi=draw(gains),
        deadbeat=draw(gains),
        dead_zone_fraction=draw(st.floats(0.0, 1.0, exclude_max=True)),
        r_squared=draw(st.none() | st.floats(-1e6, 1.0)),
        cap_threshold_percent=draw(st.none() | st.floats(1.0, 100.0)),
        fitted_on=draw(toml_table),
        description=draw(text),
        extra=draw(toml_table),
    )


@settings(max_examples=150, deadline=None)
@given(mf=model_files())
def test_write_then_load_gives_the_same_model(mf: ModelFile) -> None:
    assert loads_model(xtc.models.dumps_model(mf)) == mf


def test_save_then_load_the_paper_model(tmp_path) -> None:  # noqa: ANN001
    p = tmp_path / "paper.toml"
    xtc.models.save_model(xtc.models.PAPER_MODEL, p)
    assert xtc.models.load_model(p) == xtc.models.PAPER_MODEL
    assert p.read_text().startswith("# XTC model file (xtc-model/1).")


BASE = 'schema = "xtc-model/1"\nname = "t"\n[model]\na = 0.5\nb_kpps_per_decade = 10\nybar_kpps = 50\nubar_log10_cap = 1\n'


@pytest.mark.parametrize(
    "extra, field, words",
    [
        ("zz = 1\n", "model.zz", "unknown key (allowed: a, b_kpps_per_decade, cap_threshold_percent, period_s, "
                                 "r_squared, ubar_log10_cap, ybar_kpps)"),
        ("[caps]\nzz = 1\n", "caps.zz", "unknown key (allowed: min_percent, max_percent; deprecated"),
        ("[controller]\nzz = 1\n", "controller.zz",
         "unknown key (allowed: cap_max_percent, cap_min_percent, dead_zone_fraction, deadbeat, pi)"),
        ("[controller.deadbeat]\nki = 1\n", "controller.deadbeat.ki", "did you mean 'ki_decades_per_kpps'"),
        ("[controller.pi]\nkp_decades_per_kpps = 1\nki_decades_per_kpps = \"x\"\n",
         "controller.pi.ki_decades_per_kpps", "must be a number, got str 'x'"),
        ("[caps]\nmax_percent = inf\n", "controller.cap_max_percent", "must be finite"),
        ("[controller]\npi = 3\n", "controller.pi", "must be a table"),
        ("[model.sub]\nx = 1\n", "model.sub", "unknown key"),
    ],
)
def test_each_table_names_the_bad_field(extra: str, field: str, words: str) -> None:
    with pytest.raises(ModelError) as ei:
        loads_model(BASE + extra, source="m.toml")
    assert ei.value.field == field
    assert words in ei.value.problem
    assert str(ei.value).startswith("m.toml: ")


def test_an_empty_gains_table_means_no_gains() -> None:
    assert loads_model(BASE + "[controller.pi]\n").pi is None
    assert loads_model(BASE).model.b_kpps_per_decade == 10.0
    assert isinstance(loads_model(BASE).model.b_kpps_per_decade, float)
