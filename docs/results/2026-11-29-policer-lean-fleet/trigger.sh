#!/bin/sh
# Run one command (the profile tool: "$@") and, STOP_AT seconds after its start, stop its process for STOP_S
# seconds (SIGSTOP, then SIGCONT): the engine's every thread stands still while the stand-in fleet, a process of
# its own, goes on sending. What the engine measures after the warm-up says whether it came back.
"$@" &
pid=$!
sleep "${STOP_AT:-60}"
kill -STOP "$pid"
sleep "${STOP_S:-5}"
kill -CONT "$pid"
wait "$pid"
