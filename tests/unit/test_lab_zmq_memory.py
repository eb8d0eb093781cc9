"""The libzmq memory tool's clients (``python -m xtc_lab.zmq_memory``), on real sockets: each mode's every
connection answered and every sample received, the policer's own ZMTP connections' included (with CURVE too)."""

from __future__ import annotations

import json

import pytest

from xtc_lab.zmq_memory import main, measure


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_each_client_gets_every_reply_and_sample(transport: str) -> None:
    got = measure(20, transport, messages=5, modes=("dealers", "zmtp"))
    for mode in ("dealers", "zmtp"):
        m = got[mode]
        assert m["unanswered"] == 0 and m["samples_received"] == m["samples_sent"] == 100, m
        assert m["client_cpu_us_per_sample"] is not None and m["client_cpu_us_per_sample"] > 0
    assert got["dealers"]["fds_per_connection"] == 2.0  # a pyzmq socket's own descriptor, and its connection
    assert got["zmtp"]["fds_per_connection"] == 1.0


def test_the_zmtp_client_with_curve(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--curve", "--mode", "zmtp", "--mode", "dealers", "--n", "10", "--messages", "3"]) == 0
    got = json.loads(capsys.readouterr().out)
    for mode in ("dealers", "zmtp"):
        assert got[mode]["unanswered"] == 0 and got[mode]["samples_received"] == 30, got[mode]
