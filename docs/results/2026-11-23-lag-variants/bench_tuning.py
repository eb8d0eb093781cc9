"""``xtc bench control`` (XTC only) with ``XtcTuning`` overrides, for the variants of
docs/control-settling.md, "2026-11-23: the lag plants, variants measured" (apply variants.patch first).

Usage (from the repository root, PYTHONPATH=.)::

    python docs/results/lag-variants/bench_tuning.py SEED OUT.json [field=value ...]

``field=value`` sets an ``XtcTuning`` field (True/False or a number); ``le.field=value`` a field of its
``LagTuning``.  Environment (module switches of the patch): PROV=min|mean|max (the provisional lag
among pending candidates), DLH_SCALE=x, REST_LIMITED=1, SMALL_FOLLOW=x, PLANTS=a,b (subset).
"""
import json
import os
import sys

import xtc.control as xc
import xtc.control.estimate as est
import xtc.control.laws as laws
from xtc.control.estimate import LagTuning
from xtc.control.laws import XtcTuning


def apply_overrides(args: list[str]) -> None:
    """The patch's module switches from the environment, and ``field=value`` overrides of
    ``XtcTuning`` (``le.field=value``: its ``LagTuning``) as make_controller's default tuning."""
    if os.environ.get("PROV"):
        est._PROV = os.environ["PROV"]
    if os.environ.get("REST_LIMITED"):
        est._REST_LIMITED = True
    if os.environ.get("SMALL_FOLLOW"):
        est._SMALL_FOLLOW = float(os.environ["SMALL_FOLLOW"])
    if os.environ.get("DLH_SCALE"):
        laws._DLH_SCALE = float(os.environ["DLH_SCALE"])
    over = {}
    for a in args:
        k, v = a.split("=")
        over[k] = (v == "True") if v in ("True", "False") else float(v)
    le = {k[3:]: v for k, v in over.items() if k.startswith("le.")}
    over = {k: v for k, v in over.items() if not k.startswith("le.")}
    if le:
        over["lag_estimator"] = LagTuning(**le)
    xc.XtcTuning = lambda **kw: XtcTuning(**{**over, **kw})  # make_controller's default tuning


if __name__ == "__main__":
    apply_overrides(sys.argv[3:])
    from xtc_lab.bench.control_bench import run_control_bench  # noqa: E402
    from xtc_lab.sim.experiments import _jsonable  # noqa: E402

    plants = os.environ.get("PLANTS")
    kw = {"plants": plants.split(",")} if plants else {}
    data = _jsonable(run_control_bench(seed=int(sys.argv[1]), controllers=["xtc"], **kw))
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
