"""Fleet bench runs, one after the other: python run.py OUT.json ROUTERS:MODE ...  (MODE: link or sub)

`xtc policer bench --fleet ROUTERS --duration 20 --rate 200` (SQLite, 16 VRs, 10% dead, samples on),
with `--no-sample-link` for `sub` (the samples on a SUB socket per router, the way before this
branch); the load average before and after each run is recorded with it."""
import json, subprocess, sys, time

dest = sys.argv[1]
out = []
for arg in sys.argv[2:]:
    n, mode = arg.split(":")
    cmd = ["/work/wt/links/.venv/bin/xtc", "policer", "bench", "--fleet", n, "--duration", "20", "--rate", "200"]
    if mode == "sub":
        cmd.append("--no-sample-link")
    la0 = open("/proc/loadavg").read().split()[:3]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd="/work/wt/links")
    try:
        res = json.loads(r.stdout)
    except ValueError:
        res = {"error": r.stderr[-3000:]}
    res.update(command="xtc " + " ".join(cmd[1:]), loadavg_before=la0,
               loadavg_after=open("/proc/loadavg").read().split()[:3], wall_s=round(time.time() - t0, 1))
    out.append(res)
    print(n, mode, res.get("rss_mb"), res.get("engine_fds"), res.get("engine_cpu_ms_per_measurement"),
          res.get("measured_per_s"), la0, res["loadavg_after"], res["wall_s"], flush=True)
    with open(dest, "w") as f:
        json.dump(out, f, indent=1)
