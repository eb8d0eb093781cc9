"""The figure of this session: what the host hands the capped UDP VR and what it forwards, over its
setpoint, window by window, in each run given (issue 48's two goals: handed within 10%, forwarding
within 3%): ``.venv/bin/python docs/results/2026-11-27-early-drop-loss/figure.py OUT.png LABEL=RUN.json ...``;
``LABEL=RUN.json@before``: a run made before this rule, whose ``xtc+early-drop`` is the rule before."""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PHASES = (("xtc+early-drop-noloss", "the rule before (loss bound 0)", "tab:gray"),
          ("xtc+early-drop", "with the VR's own losses (default)", "tab:red"))


def main() -> None:
    out, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    fig, axes = plt.subplots(1, len(runs), figsize=(6.2 * len(runs), 4.6), squeeze=False)
    for ax, (label, path) in zip(axes[0], runs):
        before = path.endswith("@before")
        with open(path.removesuffix("@before")) as fh:
            d = json.load(fh)
        xs: list[float] = [0.98, 1.3]
        ys: list[float] = [0.85, 1.08]
        for phase, name, color in PHASES:
            if before:
                phase = {"xtc+early-drop-noloss": "xtc+early-drop", "xtc+early-drop": ""}[phase]
            ws = [w for w in d["windows"] if w["phase"] == phase]
            if not ws:
                continue
            x = [w["udp_handed_kpps"] / w["udp_setpoint_kpps"] for w in ws]
            y = [w["udp_forwarded_kpps"] / w["udp_setpoint_kpps"] for w in ws]
            xs += x
            ys += y
            ax.scatter(x, y, color=color, label=f"{name} ({len(ws)} windows)", s=36, alpha=0.85)
            ax.scatter([sum(x) / len(x)], [sum(y) / len(y)], color=color, marker="X", s=160, edgecolor="black")
        ax.axvspan(0.0, 1.10, color="tab:green", alpha=0.06)
        ax.axhspan(0.97, 1.03, color="tab:blue", alpha=0.08)
        ax.axvline(1.10, color="tab:green", ls="--", lw=1, label="handed within 10% of the setpoint")
        ax.axhline(0.97, color="tab:blue", ls="--", lw=1, label="forwarding within 3% of the setpoint")
        ax.axvline(1.25, color="black", ls=":", lw=1, label="the runaway guard (1.25x)")
        ax.set_xlim(min(xs) - 0.01, max(xs) + 0.01)
        ax.set_ylim(min(ys) - 0.01, max(ys) + 0.01)
        ax.set_xlabel("UDP VR handed / setpoint")
        ax.set_ylabel("UDP VR forwarded / setpoint")
        ax.set_title(f"{label}: setpoint {d['setpoints_pps']['udp'] / 1e3:.1f} kp/s (X: mean)", fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
