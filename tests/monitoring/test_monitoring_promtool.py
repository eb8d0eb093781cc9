"""The metrics of every service and the alert rules, checked with Prometheus' own tool.

- ``promtool check metrics`` on the real ``/metrics`` of the daemon (sim backend), the policer, the
  XCo controller and an XCo agent (see :mod:`services`), plus the conventions promtool does not
  check (ratios not percents, no app-computed quantiles, ``process_*`` and ``xtc_build_info``);
- ``promtool check rules`` and ``promtool test rules`` on packaging/prometheus/;
- every metric an alert reads is one the services export.
"""

from __future__ import annotations

import shutil
import sys
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services import metric_names, running_services, sample_names, scrape

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "packaging" / "prometheus" / "xtc-alerts.yml"
RULE_TESTS = ROOT / "packaging" / "prometheus" / "xtc-alerts.test.yml"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")

SERVICES = ("daemon", "policer", "xco_controller", "xco_agent")


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    with running_services(tmp_path_factory.mktemp("services")) as urls:
        return {name: scrape(url) for name, url in urls.items()}


def _promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_alert_rules_are_valid() -> None:
    r = _promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_alert_rules_pass_their_unit_tests() -> None:
    r = _promtool("test", "rules", str(RULE_TESTS))
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_flags_a_bad_exposition() -> None:
    """The check can fail: a counter without _total is a lint problem."""
    r = _promtool("check", "metrics", stdin="# HELP x_packets Packets.\n# TYPE x_packets counter\nx_packets 1\n")
    assert r.returncode != 0 and "x_packets" in (r.stdout + r.stderr)


@pytest.mark.parametrize("service", SERVICES)
def test_metrics_pass_promtool_check_metrics(scrapes: dict[str, str], service: str) -> None:
    r = _promtool("check", "metrics", stdin=scrapes[service])
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), f"{service}: {r.stdout}{r.stderr}"


@pytest.mark.parametrize("service", SERVICES)
def test_metrics_follow_the_conventions_promtool_leaves_out(scrapes: dict[str, str], service: str) -> None:
    families = list(text_string_to_metric_families(scrapes[service]))
    names = {f.name for f in families}
    for f in families:
        assert f.name.startswith(("xtc_", "xco_", "process_")), f"{service}: {f.name} has no XTC prefix"
        assert "percent" not in f.name, f"{service}: {f.name}: a ratio (0-1), not a percent"
        assert not f.name.endswith("_created"), f"{service}: {f.name}"
        assert "per_second" not in f.name, f"{service}: {f.name}: export a counter; rate() makes it per second"
        for s in f.samples:
            assert "quantile" not in s.labels, f"{service}: {f.name}: a histogram, not app-computed quantiles"
    assert "process_cpu_seconds_total" in sample_names(families) and "process_resident_memory_bytes" in names
    (info,) = [s for f in families if f.name == "xtc_build_info" for s in f.samples]
    assert info.labels["service"] == service and info.labels["version"] and info.value == 1.0


def test_the_daemon_counts_packets_and_exports_states_as_sets(scrapes: dict[str, str]) -> None:
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(scrapes["daemon"]) for s in f.samples}
    assert samples[("xtc_vr_forwarded_packets_total", (("vr", "vr1"),))] > 0
    assert samples[("xtc_vr_offered_packets_total", (("vr", "vr2"),))] > 0
    assert 0 < samples[("xtc_vr_cap_ratio", (("vr", "vr1"),))] <= 1.0
    assert ("xtc_vr_cap_ratio", (("vr", "vr2"),)) not in samples  # not XTC's: no cap of its own
    states = {(dict(k[1])["vr"], dict(k[1])["state"]): v for k, v in samples.items() if k[0] == "xtc_vr_state"}
    assert states == {("vr1", "active"): 1.0, ("vr1", "paused"): 0.0, ("vr1", "inactive"): 0.0,
                      ("vr2", "active"): 0.0, ("vr2", "paused"): 0.0, ("vr2", "inactive"): 1.0}


def test_the_policer_exports_its_cycle_time_as_a_histogram(scrapes: dict[str, str]) -> None:
    (fam,) = [f for f in text_string_to_metric_families(scrapes["policer"]) if f.name == "xtc_policer_cycle_seconds"]
    assert fam.type == "histogram"
    assert {s.labels.get("le") for s in fam.samples if s.name.endswith("_bucket")} >= {"0.5", "+Inf"}


def test_every_metric_an_alert_reads_is_exported(scrapes: dict[str, str]) -> None:
    exported = {"up"}
    for text in scrapes.values():
        exported |= sample_names(text_string_to_metric_families(text))
    rules = _alert_exprs(RULES.read_text())
    assert len(rules) >= 6, rules
    for alert, expr in rules.items():
        names = metric_names(expr)
        assert names and names <= exported, (alert, sorted(names - exported))


def _alert_exprs(text: str) -> dict[str, str]:
    """alert name -> expr of a rules file (``expr: ...`` on one line or as a ``|`` block); PyYAML is no
    dependency of XTC's."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    alert = None
    for i, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith("- alert:"):
            alert = s.split(":", 1)[1].strip()
        elif s.startswith("expr:") and alert is not None:
            value = s.split(":", 1)[1].strip()
            if value == "|":
                indent = len(ln) - len(ln.lstrip())
                block = []
                for nxt in lines[i + 1:]:
                    if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                        break
                    block.append(nxt.strip())
                value = " ".join(b for b in block if b and not b.startswith("#"))
            out[alert] = value
    return out


def test_the_metrics_reference_is_up_to_date() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_metrics_reference.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("page", ["docs/reference/metrics.md", "docs/guide/monitoring.md"])
def test_the_docs_name_every_exported_metric(scrapes: dict[str, str], page: str) -> None:
    text = (ROOT / page).read_text()
    missing = set()
    for service, scrape_text in scrapes.items():
        for f in text_string_to_metric_families(scrape_text):
            name = {"counter": f.name + "_total"}.get(f.type, f.name)
            if f"`{name}`" not in text:
                missing.add((service, name))
    assert not missing, sorted(missing)
