"""The hold scenario of ``xtc bench control`` with 10% rate noise (``VRConfig.noise_rel`` 0.10 instead
of 0.01; ``noise_drop_rel`` stays 0.08), setpoints 5-90 kp/s, seeds 1-3, eight plants: worst steady
error over reachable setpoints, mean relative RMSE, mean |change of log10 cap| per period (60..120 s).

Usage: [GRID=80,85,90,95] python docs/results/lag-variants/noise_hold.py OUT.json [field=value ...] (as bench_tuning.py;
GRID: other setpoints, kp/s).
"""
import json
import os
import sys
from dataclasses import replace

import numpy as np

from bench_tuning import apply_overrides  # this script's folder is first on sys.path

apply_overrides(sys.argv[2:])

import xtc.models  # noqa: E402
from xtc_lab.bench import control_bench as cb  # noqa: E402
from xtc_lab.sim.experiments import controller_spec  # noqa: E402
from xtc_lab.sim.metrics import relative_error, relative_rmse  # noqa: E402

grid = np.array([float(g) for g in os.environ.get("GRID", "5,8,10,12,16,20,25,30,40,50,60,70,80,90").split(",")]) * 1000
spec, tm, model = controller_spec("xtc"), cb.ScenarioTimes(), xtc.models.PAPER_MODEL
out = {}
for p in ["nominal", "fast2x", "lag4x", "laghalf", "gradual", "grad-fast2x", "grad-laghalf", "slow2x"]:
    bp = cb.BENCH_PLANTS[p]
    bp = replace(bp, vr=replace(bp.vr, noise_rel=0.10))
    reach = cb._reachable(bp, grid)
    for seed in (1, 2, 3):
        tr = cb._hold(spec, bp, grid, seed, tm, model, lambda f: None)
        y = tr.forwarded_pps[60:120]
        errs = [relative_error(y[:, i].mean(keepdims=True), grid[i]) for i in range(grid.size)]
        rr = [relative_rmse(y[:, i]) for i in range(grid.size)]
        mv = np.mean(np.abs(np.diff(np.log10(tr.cap_percent[60:120]), axis=0)))
        out[f"{p} s{seed}"] = dict(worst_err=max(e for e, r in zip(errs, reach) if r), mean_rmse=float(np.mean(rr)),
                                   mean_move_dec=float(mv), errs=[float(e) for e in errs], rmse=[float(r) for r in rr])
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(out, f, indent=1)
for k, v in out.items():
    print(f"{k:16s} err {v['worst_err'] * 100:7.3f}%  rmse {v['mean_rmse']:.5f}  move {v['mean_move_dec']:.5f}")
