"""The daemon configuration's declared schema: every table refuses unknown keys and wrong types
by name, objects built in code are validated too, and configs stay frozen and comparable."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from xtc.daemon import config as C
from xtc.daemon.config import ConfigError
from xtc.daemon.config import loads_config as _loads_config
from xtc_lab.sim.host import SimSection, SimVr

SIM = '[[sim.vr]]\nname = "vr1"\n'


def loads_config(text: str, source: str | None = None) -> C.DaemonConfig:
    """``text`` on the simulated backend (``backend = "sim"`` added to its [daemon] table)."""
    if "backend =" not in text and not text.startswith("daemon = "):
        if "[daemon]\n" in text:
            text = text.replace("[daemon]\n", '[daemon]\nbackend = "sim"\n', 1)
        else:
            text += '\n[daemon]\nbackend = "sim"\n'
    return _loads_config(text, source)
SECTIONS = {"daemon": C.DaemonSection, "controller": C.ControllerSection, "manager": C.ManagerSection,
            "metrics": C.MetricsSection, "log": C.LogSection, "libvirt": C.LibvirtSection, "sim": SimSection}


@pytest.mark.parametrize("section", SECTIONS)
def test_every_section_refuses_an_unknown_key_listing_the_allowed_ones(section: str) -> None:
    with pytest.raises(ConfigError) as ei:
        loads_config(f"[{section}]\nzz_unknown = 1\n" + SIM)
    assert ei.value.key == f"{section}.zz_unknown"
    allowed = sorted(f.name for f in dataclasses.fields(SECTIONS[section]))
    assert ei.value.problem == f"unknown key (allowed: {', '.join(allowed)})"


@pytest.mark.parametrize("section", [*SECTIONS, "cgroup"])
def test_every_section_must_be_a_table(section: str) -> None:
    with pytest.raises(ConfigError) as ei:
        loads_config(f"{section} = 3\n" + ("" if section == "sim" else SIM))
    assert (ei.value.key, ei.value.problem) == (section, "must be a table, got int")


SCALARS = {
    "daemon.control_period_s": "must be a number",
    "daemon.state_dir": "must be a string",
    "daemon.backend": "must be a string",
    "manager.max_message_bytes": "must be an integer",
    "manager.endpoint": "must be a string",
    "metrics.enabled": "must be true or false",
    "metrics.port": "must be an integer",
    "log.level": "must be a string",
    "sim.seed": "must be an integer",
}


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(sorted(SCALARS)), value=st.sampled_from(['"x"', "true", "[1]", "{a = 1}", "1.5", "2"]))
def test_a_value_of_the_wrong_type_is_refused_by_name(key: str, value: str) -> None:
    section, name = key.split(".")
    text = f"[{section}]\n{name} = {value}\n" + SIM
    expected = SCALARS[key]
    accepted = {"must be a number": ("1.5", "2"), "must be a string": ('"x"',), "must be an integer": ("2",),
                "must be true or false": ("true",)}[expected]
    if value in accepted:
        return
    with pytest.raises(ConfigError) as ei:
        loads_config(text)
    assert ei.value.key == key
    assert ei.value.problem.startswith(expected), ei.value.problem


def test_objects_built_in_code_are_validated_and_frozen() -> None:
    with pytest.raises(ValidationError):
        SimVr(name="a b")
    with pytest.raises(ValidationError):
        SimVr(name="a", traffic="icmp")
    with pytest.raises(ValidationError):
        C.CgroupVr("vr1", "relative", ("eth0",))
    vr = C.CgroupVr("vr1", "/a//b/", ["eth0"])
    assert vr == C.CgroupVr(name="vr1", path="/a/b", interfaces=("eth0",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        vr.path = "/c"  # type: ignore[misc]


def test_replace_keeps_validating_and_source_is_not_a_file_key() -> None:
    cfg = loads_config(SIM, source="a.toml")
    assert dataclasses.replace(cfg, source="b.toml").source == "b.toml"
    with pytest.raises(ValidationError):
        dataclasses.replace(cfg.daemon, control_period_s=0.0)
    with pytest.raises(ConfigError) as ei:
        loads_config('source = "x"\n' + SIM)
    assert ei.value.key == "source" and "unknown key" in ei.value.problem
