"""packaging/grafana/xtc.json names only metrics that XTC exports, and shows what an operator needs.

The metric names are parsed out of every PromQL expression of the dashboard (panels and template
variables).  The exported names come from a real ``/metrics`` scrape of ``xtc policer serve`` and from
the daemon's registry (:class:`xtc.daemon.metrics.DaemonMetrics`, what its HTTP endpoint serves).
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any, Iterable, Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client import generate_latest

from procs import stop_process
from xtc.daemon.metrics import DaemonMetrics
from xtc_lab.policer_bench import start_policer

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "packaging" / "grafana" / "xtc.json"

#: PromQL words that are not metric names (functions and aggregations are recognised by their "(").
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "summary": ("_sum", "_count", "_created"), "gauge": ("",), "info": ("_info",), "unknown": ("",)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana ``label_values(...)`` query) reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range selectors ([5m], [$__rate_interval])
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)  # label lists
    m = re.match(r"\s*label_values\s*\(\s*([A-Za-z_:][A-Za-z0-9_:]*)?", e)
    if m:  # label_values(metric, label) or label_values(label)
        return {m.group(1)} if m.group(1) and "," in e else set()
    names = set()
    for tok in re.finditer(r"(?<![\w$.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", e):
        word, call = tok.group(1), tok.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


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


def _sample_names(families: Iterable[Any]) -> set[str]:
    return {f.name + s for f in families for s in _SUFFIXES[f.type]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    proc, url = start_policer(tmp_path_factory.mktemp("metrics"), secrets.token_urlsafe(24))
    try:
        text = httpx.get(url + "/metrics", timeout=10).text
    finally:
        stop_process(proc)
    policer = _sample_names(text_string_to_metric_families(text))
    assert "xtc_policer_cycle_seconds" in policer and "xtc_policer_punishments_total" in policer, sorted(policer)
    daemon = _sample_names(text_string_to_metric_families(generate_latest(DaemonMetrics().registry).decode()))
    assert "xtc_vr_setpoint_pps" in daemon, sorted(daemon)
    return policer | daemon


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
    assert len(exprs) >= 15
    used: set[str] = set()
    unknown = []
    for where, expr in exprs:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        used |= names
        unknown += [(where, n) for n in sorted(names - exported)]
    assert unknown == [], f"metrics the code does not export: {unknown}"
    # What an operator needs: per-VR setpoint, forwarded and offered rate, cap; per-host activation;
    # punishments; unreachable routers; policy cycle time.
    needed = {"xtc_vr_setpoint_pps", "xtc_vr_measured_pps", "xtc_vr_offered_pps", "xtc_vr_cap_percent",
              "xtc_policer_router_control_on", "xtc_policer_punishments_total", "xtc_policer_router_unreachable",
              "xtc_policer_cycle_seconds"}
    assert needed <= used, sorted(needed - used)


def test_dashboard_is_importable_json() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
