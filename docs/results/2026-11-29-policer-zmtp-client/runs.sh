#!/bin/sh
# From the repository's top: a daemon connection's memory and CPU on the policer's side, libzmq's DEALER against
# a client that speaks ZMTP 3.0 by hand on asyncio (python -m xtc_lab.zmq_memory --mode zmtp), issue 50's "cheaper
# connection than libzmq".  No root needed.  The zmtp mode was the lab's _ZmtpDealer at commit 8e71c2d (run
# `git show 8e71c2d:lab/xtc_lab/zmq_memory.py`); since 2026-11-29-policer-zmtp-link it runs the product's connection.
set -u
cd docs/results/2026-11-29-policer-zmtp-client || exit 1
ALT="../../../.venv/bin/python -m xtc_lab.alternate"
MEM="../../../.venv/bin/python -m xtc_lab.zmq_memory --messages 300 --mode dealers --mode zmtp"
# 1,000 connections that carried 300 samples each, over ipc and tcp.
$ALT --each transport=ipc,tcp "zmq-{transport}-1000-m300" -- $MEM --n 1000 --transport {transport}
# 5,000 (issue 50's fleet), over ipc.
$ALT "zmq-ipc-5000-m300" -- $MEM --n 5000 --transport ipc
# CurveZMQ's per-message cost in Python (PyNaCl on PYTHONPATH, not a dependency), three runs.
for i in 1 2 3; do PYTHONPATH=/tmp/nacl ../../../.venv/bin/python curve_micro.py; done > curve-micro.jsonl
