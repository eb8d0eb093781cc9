"""The RTT-through-a-limiter report (xtc_lab.lab.rtt_limiter.rtt_report): each condition over all its samples."""

from __future__ import annotations

import pytest
from xtc_lab.lab.rtt_limiter import FRAME_BYTES, OFFERED_PPS, rtt_report


def test_each_condition_is_summarised_over_all_its_samples_and_per_rep() -> None:
    runs = [{"phase": "absent", "rtt_ms": [1.0, 2.0, 3.0], "median_ms": 2.0, "p99_ms": 3.0, "loss_ratio": 0.0,
             "limiter_dropped": None},
            {"phase": "present", "rtt_ms": [2.0, 4.0], "median_ms": 3.0, "p99_ms": 4.0, "loss_ratio": 0.5,
             "limiter_dropped": 0},
            {"phase": "present", "rtt_ms": [6.0], "median_ms": 6.0, "p99_ms": 6.0, "loss_ratio": 0.0,
             "limiter_dropped": 2}]
    doc = rtt_report("t", {"limiter": "bpf"}, runs, 2, 1.0)
    assert (doc["title"], doc["limit"], doc["offered_pps"], doc["frame_bytes"], doc["runs"]) == \
        ("t", {"limiter": "bpf"}, OFFERED_PPS, FRAME_BYTES, runs)
    present = doc["summary"]["present"]
    assert (present["samples"], present["median_ms"], present["mean_ms"]) == (3, 4.0, 4.0)
    assert present["p99_ms"] == pytest.approx(5.96)
    assert (present["per_rep_median_ms"], present["loss_ratio"], present["limiter_dropped"]) == ([3.0, 6.0], 0.25, 2)
    assert doc["summary"]["absent"]["limiter_dropped"] == 0
