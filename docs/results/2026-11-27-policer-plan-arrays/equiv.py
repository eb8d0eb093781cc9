"""The new engine against the code of main itself (not rebuilt from the branch's): run the seeded random fleets
of tests/policer/test_policer_plan_arrays.py (``_run``) with whichever ``xtc`` is first on PYTHONPATH and print a
digest of what was planned, sent, written and audited per seed, with the counts.  Run it twice (before: main
exported with ``git archive`` to a directory first on PYTHONPATH; after: this branch) and compare the lines."""

import hashlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "policer"))
import xtc  # noqa: E402
from test_policer_plan_arrays import _run  # noqa: E402

print("xtc from", Path(xtc.__file__).parent, file=sys.stderr)
for seed in range(1, 9):
    with tempfile.TemporaryDirectory() as tmp:
        out = _run(tmp, "x", seed, 40)
    digest = {k: hashlib.sha256(repr(out[k]).encode()).hexdigest()[:16]
              for k in ("plans", "sent", "routers", "vrs", "actions", "states")}
    print(seed, out["counts"], len(out["sent"]), len(out["actions"]), digest)
