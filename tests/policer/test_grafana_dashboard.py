"""packaging/grafana/xtc.json names only metrics that XTC exports, and shows what an operator needs.

The metric names are parsed out of every PromQL expression of the dashboard (panels and template
variables).  The exported names come from real ``/metrics`` scrapes of every service: the daemon on
the sim backend, ``xtc policer serve``, the XCo controller and an XCo agent (:mod:`services`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services import metric_names, running_services, sample_names, scrape

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "packaging" / "grafana" / "xtc.json"


def _expressions(dash: dict[str, Any]) -> Iterator[tuple[str, str]]:
    def panels(ps: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dash["panels"]):
        for t in p.get("targets", []):
            yield p["title"], t["expr"]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            yield f"variable {v['name']}", v["query"]["query"] if isinstance(v["query"], dict) else v["query"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    with running_services(tmp_path_factory.mktemp("services")) as urls:
        names = {k: sample_names(text_string_to_metric_families(scrape(u))) for k, u in urls.items()}
    assert "xtc_policer_cycle_seconds_bucket" in names["policer"], sorted(names["policer"])
    assert "xtc_vr_forwarded_packets_total" in names["daemon"], sorted(names["daemon"])
    assert "xco_events_total" in names["xco_controller"] and "xco_agent_failed_open" in names["xco_agent"]
    return set().union(*names.values())


def test_the_parser_finds_metric_names() -> None:
    assert metric_names('sum by (level) (increase(xtc_policer_punishments_total{router=~"a|b"}[$__rate_interval]))') \
        == {"xtc_policer_punishments_total"}
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(xtc_period_work_seconds_bucket[5m])))') \
        == {"xtc_period_work_seconds_bucket"}
    assert metric_names("a and on(instance) b == 1") == {"a", "b"}
    assert metric_names('label_values(xtc_vr_setpoint_pps{instance=~"$host"}, vr)') == {"xtc_vr_setpoint_pps"}
    assert metric_names("label_values(instance)") == set()


def test_every_expression_names_only_exported_metrics(exported: set[str]) -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = list(_expressions(dash))
    assert len(exprs) >= 25
    used: set[str] = set()
    unknown = []
    for where, expr in exprs:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        used |= names
        unknown += [(where, n) for n in sorted(names - exported)]
    assert unknown == [], f"metrics the code does not export: {unknown}"
    # What an operator needs: per-VR setpoint, forwarded and offered rate, cap, state; per-host
    # activation; punishments; unreachable routers; policy cycle time; the services' CPU; XCo's
    # controller and agents.
    needed = {"xtc_vr_setpoint_pps", "xtc_vr_forwarded_packets_total", "xtc_vr_offered_packets_total",
              "xtc_vr_cap_ratio", "xtc_vr_state", "xtc_vr_saturation",
              "xtc_policer_router_control_on", "xtc_policer_punishments_total", "xtc_policer_router_unreachable",
              "xtc_policer_cycle_seconds_bucket", "process_cpu_seconds_total", "xtc_build_info",
              "xco_agent_failed_open", "xco_events_total", "xco_messages_dropped_total",
              "xco_agent_directive_to_gate_seconds_bucket"}
    assert needed <= used, sorted(needed - used)


def test_dashboard_is_importable_json() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
