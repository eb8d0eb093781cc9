"""The writes alone, before and after alternated: 3,000 requests of each write kind (and a read), twice a side, the
API process CPU ms per request (the best of 2).  ``PYTHONPATH=/tmp/api-before python writes.py before; python writes.py after``,
twice; its output, copied from the terminal (14:34 UTC, load about 1.5-2), is writes.txt."""
import asyncio, secrets, sys, tempfile, json, psutil
from xtc_lab.policer_bench import start_policer, seed_policer
from xtc_lab.policer_api_cpu import KINDS, measure
kinds = [k for k in KINDS if k[1] in ("PUT", "PATCH", "POST")] + [k for k in KINDS if k[0].startswith("GET /networks/net0")]
token = secrets.token_urlsafe(24)
with tempfile.TemporaryDirectory() as tmp:
    proc, url = start_policer(tmp, token)
    try:
        asyncio.run(seed_policer(url, token))
        res = [asyncio.run(measure(url, token, 3000, psutil.Process(proc.pid), kinds)) for _ in range(2)]
    finally:
        proc.terminate(); proc.wait(10)
print(sys.argv[1], json.dumps({k: min(r[k] for r in res) for k in res[0]}))
