#!/bin/sh
# An experiment, not the product: libzmq 4.3.5 built with smaller pipe chunks (message_pipe_granularity 16
# instead of 256) and smaller stream-engine buffers (in_batch_size and out_batch_size 2,048 instead of 8,192),
# put in place of pyzmq's own in a copy of pyzmq (/tmp/pyzmq-small, first on PYTHONPATH), without CURVE
# (built without libsodium).  The libzmq source: the zeromq/libzmq repository at tag v4.3.5.
#   git archive v4.3.5 | tar -x -C /tmp/libzmq-src; cd /tmp/libzmq-src
#   sed -i 's/message_pipe_granularity = 256,/message_pipe_granularity = 16,/' src/config.hpp
#   sed -i 's/    in_batch_size (8192),/    in_batch_size (2048),/; s/    out_batch_size (8192),/    out_batch_size (2048),/' src/options.cpp
#   mkdir /tmp/libzmq-build; cd /tmp/libzmq-build
#   cmake /tmp/libzmq-src -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTS=OFF -DWITH_DOCS=OFF -DBUILD_STATIC=OFF -DWITH_LIBSODIUM=OFF
#   make -j2 libzmq
#   SP=<the venv's site-packages>; mkdir /tmp/pyzmq-small; cp -r $SP/zmq $SP/pyzmq.libs /tmp/pyzmq-small/
#   cp lib/libzmq.so.5.2.5 /tmp/pyzmq-small/pyzmq.libs/libzmq-2f02442c.so.5.2.5
set -e
python -m xtc_lab.alternate --log zmq.log --before /tmp/pyzmq-small --each side=before --each "transport=ipc,tcp" \
  --each "n=1000,5000" "zmq-small-{transport}-{n}-m300" -- python -m xtc_lab.zmq_memory --transport "{transport}" --n "{n}" --messages 300
# The engine with it (this branch's product; the stand-in fleet takes it too), as after2.sh's runs
python -m xtc_lab.alternate --before /tmp/pyzmq-small --each side=before --each "routers=250,1000" "sizes-small-{routers}" -- \
  python -m xtc_lab.policer_profile --routers "{routers}" --window 5 --jitter 0.05 --sample-link \
  --no-profile --census --sizes --trim --warmup 40 --top 40
