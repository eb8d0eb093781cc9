"""The real demo: two LXC VRs forwarding real packets, held by the real daemon at two setpoints.

``xtc demo`` runs this when the host can run the lab (root, libvirt with the LXC driver;
see :func:`xtc_lab.lab.harness.lab_host_problem`), else it says why and runs the simulated demo.

Two VRs ("red" = VR 1, "blue" = VR 2) each forward a steady stream of 64-byte UDP packets
(``offered_pps`` each).  After measuring what each forwards unlimited, an ``xtc daemon``
process (libvirt backend, XTC's controller) holds red at 25% and blue at 60% of that rate;
half-way the setpoints swap.  Every second a table line shows setpoint, forwarded rate (read
here from the host-side counters, not from the daemon) and the cap read back from libvirt.
At the end the daemon is stopped (it restores the VRs' original caps), the lab removed, and
``demo.json`` and ``demo.png`` written.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from xtc_lab.lab.harness import (CapReader, LabDaemon, Recorder, lab_session, measure_pps, measurement_lock,
                             json_safe, mean)
from xtc_lab.lab.traffic import start_udp_stream

VR_LABELS = ("red", "blue")
FRACTIONS = ((0.25, 0.60), (0.60, 0.25))  # setpoint / unlimited rate per phase, per VR


def phase_errors(t_s: list[float], rate_pps: list[float], phases: list[tuple[float, float, float]]) -> list[float]:
    """Relative error of the mean rate over the second half of each (t0, t1, setpoint) phase."""
    out = []
    for t0, t1, sp in phases:
        xs = [r for t, r in zip(t_s, rate_pps) if t0 + (t1 - t0) / 2 <= t <= t1]
        out.append((mean(xs) - sp) / sp if xs else float("nan"))
    return out


#: How the demo names the VRs of each kind.
KIND_WORDS = {"lxc": "LXC VRs", "netns": "netns VRs", "qemu": "QEMU VRs (forwarding in their own kernel)"}


def run_lab_demo(out: Path, duration_s: float = 40.0, offered_pps: float = 80_000.0,
                 say: Callable[[str], None] = print, kind: str = "lxc") -> dict[str, Any]:
    """Run the demo on a fresh lab of two ``kind`` VRs ("lxc", "netns" or "qemu"); returns the result
    written to ``out/demo.json``."""
    phase_s = duration_s / 2
    with measurement_lock(say=say), lab_session(2, mode=kind, say=say) as lab, \
            tempfile.TemporaryDirectory(prefix="xtc-demo-") as tmp:
        vrs = list(lab.vrs)  # the lab empties its list on teardown
        names = {vr.name: label for vr, label in zip(vrs, VR_LABELS)}
        say(f"lab {lab.prefix}: VRs {', '.join(f'{l} = {v.name} (vifs {v.vifs[0]}, {v.vifs[1]})' for v, l in zip(vrs, VR_LABELS))}")
        streams = [start_udp_stream(lab, vr, offered_pps, duration_s=duration_s + 20) for vr in vrs]
        try:
            time.sleep(2.0)
            free = measure_pps(vrs, 3.0)
            say("unlimited: " + ", ".join(f"{names[n]} forwards {f:.0f} of {o:.0f} pps offered" for n, (f, o) in free.items()))
            base = min(min(f, o) for f, o in free.values())
            caps = CapReader(lab.uri, "qemu" if kind == "qemu" else "lxc")
            header = (f"{'t(s)':>5} | {'red set':>8} {'red kp/s':>8} {'red cap%':>8} | "
                      f"{'blue set':>8} {'blue kp/s':>9} {'blue cap%':>9}")
            phases: list[list[tuple[float, float, float]]] = [[], []]
            with LabDaemon(Path(tmp) / "xtcd", lab.uri, [v if kind == "netns" else v.name for v in vrs], kind="xtc") as d, \
                    Recorder(vrs, dt_s=1.0, caps=caps) as rec:
                say(header)
                say("-" * len(header))
                for p, fr in enumerate(FRACTIONS):
                    sps = [round(f * base, -2) for f in fr]
                    t0 = rec.mark(f"phase {p + 1}: setpoints {sps}")
                    for vr, sp in zip(vrs, sps):
                        (d.activate if p == 0 else d.setpoint)(vr.name, sp)
                    shown = 0
                    while rec.now() < t0 + phase_s:
                        time.sleep(0.25)
                        s = [rec.series[v.name] for v in vrs]
                        n = min(len(x.cap_percent) for x in s)  # the list the recorder appends last
                        while shown < n:
                            if s[0].t_s[shown] > t0:
                                cells = []
                                for x, sp in zip(s, sps):
                                    cap = x.cap_percent[shown]
                                    cells.append(f"{sp / 1000:8.1f} {x.forwarded_pps[shown] / 1000:8.1f} "
                                                 f"{'unlim' if cap is None else f'{cap:.2f}':>8}")
                                say(f"{s[0].t_s[shown]:5.0f} | {cells[0]} | {cells[1]}")
                            shown += 1
                    for i, sp in enumerate(sps):
                        phases[i].append((t0, rec.now(), sp))
            caps.close()
        finally:
            for s in streams:
                s.stop()
    result: dict[str, Any] = {"kind": "lab", "vr_kind": kind, "controller": "xtc", "lab_prefix": lab.prefix, "offered_pps": offered_pps,
                              "unlimited_pps": {names[n]: f for n, (f, _o) in free.items()},
                              "recording": rec.to_json(), "labels": names, "vrs": {}}
    for vr, label in zip(vrs, VR_LABELS):
        s = rec.series[vr.name]
        errs = phase_errors(s.t_s, s.forwarded_pps, phases[VR_LABELS.index(label)])
        result["vrs"][label] = {"domain": vr.name, "phases": [
            {"setpoint_pps": sp, "rel_error": e} for (_a, _b, sp), e in zip(phases[VR_LABELS.index(label)], errs)]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.json").write_text(json.dumps(json_safe(result), indent=1) + "\n")
    plot_lab_demo(result, out / "demo.png")
    return result


def plot_lab_demo(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = result["recording"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for (dom, s), colour in zip(rec["series"].items(), ("tab:red", "tab:blue")):
        label = result["labels"][dom]
        ax1.plot(s["t_s"], [r / 1000 for r in s["forwarded_pps"]], color=colour, label=f"{label} forwarded")
        ph = result["vrs"][label]["phases"]
        marks = [m["t_s"] for m in rec["marks"]]
        if marks and s["t_s"]:
            xs = marks + [s["t_s"][-1]]
            ax1.step(xs, [p["setpoint_pps"] / 1000 for p in ph] + [ph[-1]["setpoint_pps"] / 1000], where="post",
                     color=colour, ls="--", label=f"{label} setpoint")
        ax2.plot(s["t_s"], [float("nan") if c is None else c for c in s["cap_percent"]], color=colour, label=f"{label} cap")
    ax1.set_ylabel("forwarded (kp/s)")
    ax2.set_ylabel("cap (% of one CPU)")
    ax2.set_xlabel("time (s)")
    ax1.legend(fontsize=8, ncol=2)
    ax2.legend(fontsize=8)
    ax1.set_title(f"XTC demo on the host lab: two {KIND_WORDS.get(result.get('vr_kind', 'lxc'), 'VRs')}, real packets, "
                  "the real daemon", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(out: Path, duration_s: float, offered_pps: float, kind: str = "lxc") -> int:
    def say(msg: str) -> None:
        print(msg, flush=True)

    print(f"XTC demo on the host lab: two {KIND_WORDS[kind]} forward real 64-byte UDP packets; the XTC daemon holds\n"
          "red at 25% and blue at 60% of their unlimited rate, then swaps the setpoints.\n", flush=True)
    result = run_lab_demo(out, duration_s, offered_pps, say, kind)
    print()
    for label, v in result["vrs"].items():
        errs = ", ".join(f"{p['setpoint_pps'] / 1000:.1f} kp/s: {100 * p['rel_error']:+.1f}%" for p in v["phases"])
        print(f"{label}: mean error over the second half of each phase: {errs}")
    print(f"wrote {out / 'demo.json'} and {out / 'demo.png'}; the lab is removed and the VRs' caps were restored")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(Path("out/demo"), 40.0, 80_000.0))
