"""The worker's changes against main's own code: the seeded random fleets of
tests/policer/test_policer_plan_arrays.py (its ``_run``: routers added and removed, VRs appearing and vanishing,
manual setpoints, SLAs and capacities changing, every rate moving every period, punishments, ``list`` replies)
run with whichever ``xtc`` is first on PYTHONPATH; printed per seed: a digest of the commands sent (in order),
the routers' and VRs' rows at the end (after a last snapshot), the audit log, the plan inputs kept, and of the
plans that decide something (a VR's policy or wanted state, an event, or the activation state changed), with
the counts.  Plans that decide nothing are no longer saved on this branch (a router's demand goes to the
snapshot), so they are left out on both sides.  Run it with main exported by ``git archive`` first on
PYTHONPATH, then without, and compare the lines (PYTHONHASHSEED=0: the command order follows set order)."""

import hashlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "policer"))
from test_policer_plan_arrays import _run

import xtc
from xtc.policer.policy import ActivationState


def deciding(plans: list) -> list:
    """The saved plans that decide something, in order (a router's activation compared with its last one)."""
    last: dict = {}
    out = []
    for batch in plans:
        for router, act, demand, per_vr, events in batch:
            if per_vr or events or act != last.get(router, ActivationState()):
                out.append((router, act, demand, per_vr, events))
            last[router] = act
    return out


print("xtc from", Path(xtc.__file__).parent, file=sys.stderr)
for seed in range(1, 9):
    with tempfile.TemporaryDirectory() as tmp:
        out = _run(tmp, "x", seed, 40)
    out["deciding"] = deciding(out["plans"])
    digest = {k: hashlib.sha256(repr(out[k]).encode()).hexdigest()[:16]
              for k in ("deciding", "sent", "routers", "vrs", "actions", "states")}
    print(seed, out["counts"], len(out["deciding"]), len(out["sent"]), len(out["actions"]), digest)
