#!/bin/sh
# libzmq's memory per daemon connection on the policer's side (python -m xtc_lab.zmq_memory): N DEALER
# sockets of one connection each (today's link pool) against ONE ROUTER socket of N connections, after
# 3 samples a connection (just connected) and after 300 (one a round: a connection that has run a while).
# Run from this folder with the worktree's venv first on PATH.
set -e
python -m xtc_lab.alternate --log zmq.log --each "transport=ipc,tcp" --each "n=1000,5000" --each "messages=3,300" \
  "zmq-{transport}-{n}-m{messages}" -- python -m xtc_lab.zmq_memory --transport "{transport}" --n "{n}" --messages "{messages}"
python -m xtc_lab.alternate --log zmq.log --each "n=1000" "zmq-curve-ipc-{n}-m300" -- \
  python -m xtc_lab.zmq_memory --transport ipc --n "{n}" --messages 300 --curve
