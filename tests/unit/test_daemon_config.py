"""The daemon's TOML configuration: defaults, validation, unknown keys, reload rules."""

from __future__ import annotations

import dataclasses
import re

import pytest
from configerrors import refused

from xtc.daemon import config as C
from xtc.daemon.config import ConfigError, loads_config, load_config, reload_diff

SIM = '[[sim.vr]]\nname = "vr1"\n'


def S(text: str) -> str:
    """``text`` on the simulated backend (``backend = "sim"`` added to its [daemon] table)."""
    if "backend =" in text or text.startswith("daemon = "):
        return text
    if "[daemon]\n" in text:
        return text.replace("[daemon]\n", '[daemon]\nbackend = "sim"\n', 1)
    return text + '\n[daemon]\nbackend = "sim"\n'


def test_docstring_example_is_a_valid_config():
    doc = C.__doc__
    example = doc.split("::", 1)[1].split("\n:func:")[0]
    text = "\n".join(line[4:] for line in example.splitlines())
    cfg = loads_config(text)
    assert cfg.daemon.backend == "libvirt" and cfg.libvirt.uri == "lxc:///"
    assert cfg.backend_options is None
    assert cfg.controller.cap_min_percent is None


def test_a_backend_beside_the_product_validates_its_own_table():
    from xtc_lab.sim.host import SimSection

    cfg = loads_config(S(SIM))
    assert cfg.daemon.backend == "sim"
    assert isinstance(cfg.backend_options, SimSection) and cfg.backend_options.vr[0].name == "vr1"
    assert loads_config("").daemon.backend == "libvirt"  # the default: no [sim] in the product's schema
    with pytest.raises(ConfigError) as ei:
        loads_config(SIM)
    assert (ei.value.key, ei.value.problem) == ("sim", "only meaningful with backend 'sim' (backend is 'libvirt')")


def test_defaults_and_frozen():
    cfg = loads_config(S(SIM))
    assert cfg.daemon.control_period_s == 1.0
    assert cfg.controller.kind == "xtc"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.daemon.control_period_s = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("bogus = 1\n" + SIM, "bogus", "unknown key"),
        ("[daemon]\nperiod_ms = 5\n" + SIM, "daemon.period_ms", "unknown key"),
        ("[daemon]\ncontrol_period_ms = 500\n" + SIM, "daemon.control_period_ms", "control_period_s"),
        ("[daemon]\ncontrol_period_s = 0.01\n" + SIM, "daemon.control_period_s", "0.1..60"),
        ("[daemon]\ncontrol_period_s = \"1\"\n" + SIM, "daemon.control_period_s", "number"),
        ("[daemon]\ncontrol_period_s = nan\n" + SIM, "daemon.control_period_s", "finite"),
        ("[daemon]\nmeter_samples_per_s = 2\n" + SIM, "daemon.meter_samples_per_s", "once per control period"),
        ("[daemon]\nbackend = \"xen\"\n" + SIM, "daemon.backend", "backend 'xen' is not installed"),
        ("[daemon]\nbackend = \"Xen!\"\n", "daemon.backend", "lowercase"),
        ("[daemon]\nbackend = \"log\"\n", "daemon.backend", "a section of the configuration"),
        ("[controller]\nkind = \"pid\"\n" + SIM, "controller.kind", "one of"),
        ("[controller]\ncap_min_percent = 0\n" + SIM, "controller.cap_min_percent", "1..100"),
        ("[controller]\ncap_min_percent = 50\ncap_max_percent = 10\n" + SIM, "controller.cap_min_percent", "exceed"),
        ("[controller]\nmodel = \"/nonexistent/model.toml\"\n" + SIM, "controller.model", "cannot read"),
        ("[controller]\nlag_probe = \"yes\"\n" + SIM, "controller.lag_probe", "true or false"),
        ("[controller]\nkind = \"pi\"\nlag_probe = true\n" + SIM, "controller.lag_probe", "xtc"),
        ("[manager]\nendpoint = \"http://x\"\n" + SIM, "manager.endpoint", "ZeroMQ endpoint"),
        ("[manager]\nendpoint = \"tcp://127.0.0.1:1\"\npub_endpoint = \"tcp://127.0.0.1:1\"\n" + SIM, "manager.pub_endpoint", "differ"),
        ("[manager]\nmax_message_bytes = 10\n" + SIM, "manager.max_message_bytes", "256"),
        ("[metrics]\nport = 70000\n" + SIM, "metrics.port", "0..65535"),
        ("[metrics]\nenabled = 1\n" + SIM, "metrics.enabled", "true or false"),
        ("[log]\nlevel = \"loud\"\n" + SIM, "log.level", "one of"),
        ("[daemon]\nbackend = \"sim\"\nearly_drop_limiter = \"htb\"\n" + SIM, "daemon.early_drop_limiter", "'bpf', 'tbf'"),
        ("[daemon]\nbackend = \"sim\"\nearly_drop_credit_s = 5\n" + SIM, "daemon.early_drop_credit_s", "0.001..1"),
        ("[daemon]\nbackend = \"sim\"\nearly_drop_loss_bound_fraction = 1.5\n" + SIM,
         "daemon.early_drop_loss_bound_fraction", "0..1"),
        ("", "sim.vr", "at least one"),
        ("[[sim.vr]]\noffered_pps = 5\n", "sim.vr[0].name", "missing"),
        ("[[sim.vr]]\nname = \"a b\"\n", "sim.vr[0].name", "letters"),
        ("[[sim.vr]]\nname = \"a\"\n[[sim.vr]]\nname = \"a\"\n", "sim.vr", "twice"),
        ("[[sim.vr]]\nname = \"a\"\ninitial_cap_percent = 0\n", "sim.vr[0].initial_cap_percent", "1..100"),
        ("[[sim.vr]]\nname = \"a\"\noffered_kpps = 5\n", "sim.vr[0].offered_kpps", "offered_pps"),
        ("[daemon]\nbackend = \"libvirt\"\n" + SIM, "sim", "only meaningful with backend 'sim'"),
        ("[daemon]\nbackend = \"sim\"\n[sim]\nseed = -1\n" + SIM, "sim.seed", "0.."),
        ("schema = \"xtc-daemon/9\"\n" + SIM, "schema", "xtc-daemon/1"),
        ("[daemon\n", "<file>", "not valid TOML"),
        ("daemon = 3\n", "daemon", "table"),
    ],
)
def test_bad_configs_name_the_key(text, key, words):
    e = refused(lambda: loads_config(S(text), source="x.toml"), ConfigError, key, words)
    assert str(e).startswith("x.toml: ")


def test_load_config_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def test_load_config_reads_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('schema = "xtc-daemon/1"\n' + S("[daemon]\ncontrol_period_s = 0.5\n" + SIM))
    cfg = load_config(p)
    assert cfg.daemon.control_period_s == 0.5
    assert cfg.source == str(p)
    assert cfg.state_path == cfg.state_path.parent / "state.json"


@pytest.mark.parametrize("text, words", [("", "the file is empty"), ("# all commented out\n", "the file is empty"),
                                         (S(SIM), "missing")])
def test_a_file_needs_its_schema_line(tmp_path, text, words):
    p = tmp_path / "c.toml"
    p.write_text(text)
    assert str(p) in str(refused(lambda: load_config(p), ConfigError, "schema", words))


def test_reload_diff_separates_reloadable_keys():
    a = loads_config(S(SIM))
    b = loads_config(S("[daemon]\ncontrol_period_s = 0.5\n[controller]\nkind = \"pi\"\n[log]\nlevel = \"debug\"\n" + SIM))
    assert reload_diff(a, b) == []
    c = loads_config(S("[manager]\nendpoint = \"tcp://127.0.0.1:9999\"\n[metrics]\nport = 1234\n" + SIM))
    assert reload_diff(a, c) == ["manager.endpoint", "metrics.port"]
    d = loads_config(S('[[sim.vr]]\nname = "vr2"\n'))
    assert reload_diff(a, d) == ["sim.vr"]
    # Keys only one side has (a plug-in backend's table) count, both ways; the backend comes first.
    e = loads_config("")
    assert reload_diff(a, e) == ["daemon.backend", "sim.seed", "sim.vr"]
    assert reload_diff(e, a) == ["daemon.backend", "sim.seed", "sim.vr"]
    f = loads_config(S('[daemon]\nstate_dir = "/tmp/other"\n[metrics]\nport = 1\n' + SIM))
    assert reload_diff(a, f) == ["daemon.state_dir", "metrics.port"]


def test_every_reloadable_key_exists():
    keys = set(loads_config(S(SIM)).flat())
    assert C.RELOADABLE <= keys
    assert all(re.fullmatch(r"[a-z_]+\.[a-z_]+", k) for k in keys)


def test_lag_probe_reaches_the_daemons_controllers():
    from xtc.daemon.service import controller_factory

    for text in ("[controller]\nlag_probe = true\n", ""):  # on by default
        c = controller_factory(loads_config(S(text + SIM), source="x.toml"))()
        assert c.tuning.lag_probe
    off = controller_factory(loads_config(S("[controller]\nlag_probe = false\n" + SIM), source="x.toml"))()
    assert not off.tuning.lag_probe
    # The paper's controllers have no lag probe; false is accepted for them, true is refused (above).
    pi = controller_factory(loads_config(S("[controller]\nkind = \"pi\"\nlag_probe = false\n" + SIM), source="x.toml"))()
    assert pi.kind == "pi"


# ----------------------------------------------------------------- the manager API's endpoints


def test_the_manager_api_defaults_to_unix_sockets_under_run_xtc():
    cfg = loads_config(S(SIM))
    assert cfg.manager.endpoint == "ipc:///run/xtc/manager.sock"
    assert cfg.manager.pub_endpoint == "ipc:///run/xtc/samples.sock"
    assert cfg.manager.curve_secret_key_file is None and cfg.manager.ctl_curve_secret_key_file is None


CURVE = 'curve_secret_key_file = "/etc/xtc/curve/daemon.key_secret"\ncurve_clients_dir = "/etc/xtc/curve/clients"\n'


@pytest.mark.parametrize("key, endpoint, why", [
    ("endpoint", "tcp://0.0.0.0:7700", "beyond loopback"),
    ("endpoint", "tcp://*:7700", "beyond loopback"),
    ("endpoint", "tcp://10.0.0.1:7700", "beyond loopback"),
    ("endpoint", "tcp://eth0:7700", "beyond loopback"),
    ("endpoint", "tcp://[::]:7700", "beyond loopback"),
    ("endpoint", "tcp://router1.example:7700", "beyond loopback"),
    ("pub_endpoint", "tcp://0.0.0.0:7701", "beyond loopback"),
    ("endpoint", "ipc://@xtc-manager", "abstract Unix socket"),
])
def test_an_endpoint_others_can_reach_is_refused_without_curve(key, endpoint, why):
    msg = str(refused(lambda: loads_config(S(f'[manager]\n{key} = "{endpoint}"\n' + SIM), source="x.toml"),
                      ConfigError, f"manager.{key}", why))
    assert msg.startswith(f"x.toml: 'manager.{key}': {endpoint} ")
    assert "manager.curve_secret_key_file" in msg and "\n" not in msg
    # The same endpoint with CURVE is taken (the policer on another host reaches it so).
    cfg = loads_config(S(f'[manager]\n{key} = "{endpoint}"\n{CURVE}' + SIM))
    assert getattr(cfg.manager, key) == endpoint


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:7700", "tcp://127.1.2.3:7700", "tcp://[::1]:7700",
                                      "tcp://localhost:7700", "ipc:///run/xtc/m.sock", "ipc://relative.sock",
                                      "inproc://m"])
def test_loopback_and_path_sockets_need_no_curve(endpoint):
    assert loads_config(S(f'[manager]\nendpoint = "{endpoint}"\n' + SIM)).manager.endpoint == endpoint


def test_the_ctl_key_needs_curve():
    with pytest.raises(ConfigError) as ei:
        loads_config(S('[manager]\nctl_curve_secret_key_file = "/k"\n' + SIM))
    assert ei.value.key == "manager.ctl_curve_secret_key_file"
    cfg = loads_config(S(f'[manager]\n{CURVE}ctl_curve_secret_key_file = "/k"\n' + SIM))
    assert cfg.manager.ctl_curve_secret_key_file == "/k"
