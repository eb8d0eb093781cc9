"""The stand-in fleet ends the subscription of a peer that is gone, as the daemon does.

The fleet's sockets are pyzmq's asyncio ones, whose ``send_multipart`` puts a send's error on the
future it returns instead of raising it: its ``EHOSTUNREACH`` handling never ran, every later
samples message to a gone policer failed again and was logged as "Future exception was never
retrieved" (478 tracebacks in a 40 s profile), and the fleet's CPU, which the profiles report,
included them.
"""

from __future__ import annotations

import gc
import logging

import zmq
from procs import wait_for
from xtc_lab.policer_fleet import Fleet

from xtc.daemon import api


def test_a_gone_subscriber_ends_its_subscription_without_unretrieved_errors(caplog) -> None:
    fleet = Fleet(1, vrs_per_router=2, dead_fraction=0.0, publish=True, period_s=0.05).start()
    ctx = zmq.Context()
    try:
        d = fleet.daemons[0]
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(d.endpoint)
        s.send_multipart([b"", api.encode({"v": 1, "cmd": "subscribe", "id": 1})])
        assert s.poll(5000), "no reply to subscribe"
        assert b'"subscribed":true' in s.recv_multipart()[-1].replace(b" ", b"")
        assert s.poll(5000), "no samples over the subscription"
        assert len(d.link_peers) == 1
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            s.close(0)  # gone without unsubscribing
            wait_for(lambda: not d.link_peers, 5, "the gone peer's subscription ended")
            gc.collect()
        assert "never retrieved" not in caplog.text
    finally:
        ctx.destroy(0)
        fleet.stop()
