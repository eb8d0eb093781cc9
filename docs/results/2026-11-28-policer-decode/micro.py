"""CPU per call of the link thread's per-datagram work: decode_v3 on a moving and a repeated message."""
import json, random, sys
from xtc.daemon.api import samples_message_v3
from xtc.policer.rows import decode_v3
from xtc_lab.policer_compare import cpu_s_per_call

random.seed(1)
def rows(t):
    return [[f"vr{i}", "active", True, 10000.0 + i, random.uniform(0, 9000), random.uniform(0, 12000),
             random.uniform(1, 90), 50.0, None, None] for i in range(16)]
msgs = [samples_message_v3(1.7e9 + k, 1.0, rows(k)) for k in range(200)]
_, mem = decode_v3(msgs[0], 4096, 1 << 20)
state = {"i": 0, "mem": mem}
def moving():
    state["i"] = (state["i"] + 1) % 200
    out, state["mem"] = decode_v3(msgs[state["i"]], 4096, 1 << 20, state["mem"])
same = samples_message_v3(1.7e9, 1.0, rows(0))
_, mem2 = decode_v3(same, 4096, 1 << 20)
def steady():
    decode_v3(same, 4096, 1 << 20, mem2)
res = {}
for name, fn in (("moving", moving), ("steady", steady)):
    res[name + "_us"] = round(min(cpu_s_per_call(fn, 20000) for _ in range(5)) * 1e6, 2)
print(json.dumps(res))
