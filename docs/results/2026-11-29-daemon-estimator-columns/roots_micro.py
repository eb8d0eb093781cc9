"""CPU per call of the lag estimator's ``_roots`` (the sample's roots), on 2,000 seeded samples: the product on
``PYTHONPATH`` (``python -m xtc_lab.alternate`` gives each side its tree).  Prints JSON: us a call, best of 5."""

import json
import math
import random
import time

import xtc.control.estimate as estimate

rng = random.Random(3)
cases = []
for _ in range(2000):
    m0 = rng.uniform(1e3, 2e5)
    d1, move2, g = rng.uniform(-0.8, 0.8) * m0, rng.uniform(-1.0, 1.0), rng.uniform(0.0, 0.8)
    p = estimate.pole_of_lag(round(g * 200) / 200)
    f1 = m0 + d1 / (1.0 - g)
    m2 = f1 * ((1.0 - g) * 10.0 ** move2 + g * (1.0 - p)) + g * p * m0 + rng.gauss(0.0, 0.02) * abs(f1)
    cases.append((m0, d1, m2, move2, 0.03 * abs(m2)))
est = estimate.LagEstimator(0.3)
best = math.inf
for _ in range(5):
    t0 = time.process_time()
    roots = [est._roots(*c) for c in cases]
    best = min(best, time.process_time() - t0)
print(json.dumps({"product": estimate.__file__, "us_per_call": round(best / len(cases) * 1e6, 2),
                  "with_roots": sum(map(bool, roots)), "calls": len(cases)}))
