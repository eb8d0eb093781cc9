"""The hold scenario of ``xtc bench control`` (noise on, seeds 1-3) with the cap fixed at exactly the cap
whose steady rate is the setpoint on each plant (``CapacityCurve.cap_for_pps``; open loop): the plant's
own relative RMSE and measured mean at that operating point, the floor a controller holding it adds to.

Usage: python docs/results/fine-band-descent/oracle_hold.py [SETPOINT_KPPS]   (default 95)
"""
import sys, numpy as np, xtc.models
from xtc.control.laws import FixedCap
from xtc_lab.bench import control_bench as cb
from xtc_lab.sim.experiments import controller_spec
from xtc_lab.sim.metrics import relative_rmse
from xtc_lab.sim.run import run_loop
model = xtc.models.PAPER_MODEL
tm = cb.ScenarioTimes()
sp = float(sys.argv[1]) if len(sys.argv) > 1 else 95.0
for p in ["nominal", "fast2x", "slow2x", "hog15", "gradual", "grad-fast2x"]:
    bp = cb.BENCH_PLANTS[p]
    c = bp.vr.curve.cap_for_pps(sp * 1000, 100000, bp.vr.speed_factor, bp.vr.hog_fraction)
    caps = controller_spec("xtc").make(model).caps
    row = []
    for seed in (1, 2, 3):
        tr = run_loop(cb._plant(bp, 1, seed, True), lambda: FixedCap(caps, table=((1.0, c), (99.0, c))),
                      np.array([sp * 1000]), tm.disturb_at_s, warmup_s=tm.settle_plant_s)
        y = tr.forwarded_pps[60:120, 0]
        row.append(f"s{seed} mean {y.mean()/1000:.2f} rmse {relative_rmse(y):.5f}")
    print(f"{p:12s} cap {c:6.2f}  " + "  ".join(row))
