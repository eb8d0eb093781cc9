"""The receive-floor tool (xtc_lab.policer_floor): its consumers over a small real fleet."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from xtc_lab.policer_floor import floor


def test_an_unknown_consumer_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="consumer must be one of raw, none, streams, engine"):
        floor(routers=2, consumer="everything")


@pytest.mark.parametrize("consumer, threads", [("none", {"policer-links"}), ("raw", {"raw-recv", "ZMQbg/IO/0"})])
def test_the_floor_counts_each_message_and_charges_it_to_its_threads(consumer: str, threads: set[str]) -> None:
    # 6 daemons of 4 VRs, one dead: 5 messages a second, every one counted, their CPU in the receiving
    # thread (and libzmq's I/O thread for the raw SUB sockets; the link pool speaks ZMTP itself: none).
    # The tool charges every thread of its process, so it runs in one of its own, as an operator runs it: in a
    # test worker, another test's ZeroMQ context (its I/O thread) would be charged too.
    run = subprocess.run([sys.executable, "-m", "xtc_lab.policer_floor", "--routers", "6", "--vrs", "4", "--dead", "0.2",
                          "--window", "1.5", "--warmup", "1.5", "--consumer", consumer],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert 3.0 <= out["per_s"] <= 7.0, out
    assert out["cpu_ms_per_message"] > 0 and out["refused"] == 0
    seen = set(out["thread_cpu_ms_per_message"])
    assert threads <= seen, out
    assert consumer == "raw" or "ZMQbg/IO/0" not in seen, out
