# Measurement only (not the product): each Python process's garbage-collector passes by generation, their CPU on the
# collecting thread, written every second to /tmp/s63/gc/PID.json with the process's argv and CPU.
import gc, json, os, sys, threading, time
_acc = {}
_t0 = [0.0]
def _cb(phase, info):
    if phase == "start":
        _t0[0] = time.thread_time()
    else:
        a = _acc.setdefault(info["generation"], [0, 0.0, 0])
        a[0] += 1; a[1] += time.thread_time() - _t0[0]; a[2] += info["collected"]
gc.callbacks.append(_cb)
def _dump():
    while True:
        time.sleep(1)
        try:
            t = os.times()
            with open(f"/tmp/s63/gc/{os.getpid()}.json", "w") as f:
                json.dump({"argv": sys.argv, "gc": _acc, "cpu_s": t[0] + t[1], "threshold": gc.get_threshold(),
                           "frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects()) if False else None}, f)
        except Exception:
            pass
threading.Thread(target=_dump, daemon=True, name="gc-dump").start()
