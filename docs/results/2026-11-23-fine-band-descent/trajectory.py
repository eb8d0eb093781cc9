"""One VR of a scenario of ``xtc bench control`` (hold, hog or step), period by period: measured rate,
clean rate (kp/s) and cap in force (%).  FBD=0 runs it with ``fine_band_descent=False``.

Usage: [FBD=0] python docs/results/fine-band-descent/trajectory.py hold|hog|step PLANT SETPOINT_KPPS [SEED [FROM:TO]]
"""
import sys, os, dataclasses, numpy as np, xtc.models
from xtc.control import laws
OFF = os.environ.get("FBD") == "0"
_init = laws.XtcController.__init__
def init(self, model, caps, tuning=None):
    _init(self, model, caps, tuning)
    if OFF:
        self.tuning = dataclasses.replace(self.tuning, fine_band_descent=False)
laws.XtcController.__init__ = init
from xtc_lab.bench import control_bench as cb
from xtc_lab.sim.experiments import controller_spec
scen, plant, sp = sys.argv[1], sys.argv[2], float(sys.argv[3])
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
rows = sys.argv[5] if len(sys.argv) > 5 else "0:120"
bp = cb.BENCH_PLANTS[plant]
tm = cb.ScenarioTimes()
sps = np.array([sp*1000.0])
f = {"hold": cb._hold, "hog": cb._hog, "step": cb._steps}[scen]
tr = f(controller_spec("xtc"), bp, sps, seed, tm, xtc.models.PAPER_MODEL, lambda f: None)
a, b = map(int, rows.split(":"))
for k in range(a, b):
    print(k, round(tr.forwarded_pps[k,0]/1000,2), round(tr.clean_pps[k,0]/1000,2), round(tr.cap_percent[k,0],3))
print("cap for sp", bp.vr.curve.cap_for_pps(sp*1000, 100000, bp.vr.speed_factor, bp.vr.hog_fraction))
