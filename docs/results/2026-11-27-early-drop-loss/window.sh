#!/bin/bash
# The quiet window 14:50-15:20 UTC (branch loss): the two runs of issue 48's evidence, then a diagnostic.
cd /work/wt/loss
now=$(date -u +%s); start=$(date -u -d "14:50:00" +%s)
if [ "$now" -lt "$start" ]; then sleep $((start - now)); fi
log() { echo "$(date -u +%T) $*" >> /tmp/loss-runs/window.log; }
log "start: $(uptime)"
mkdir -p /tmp/loss-runs/dom0 /tmp/loss-runs/plain /tmp/loss-runs/rcvbuf
log "dom0 before: $(uptime)"
.venv/bin/xtc lab run tcpudp --kind netns --tcpudp-hold 12 --tcpudp-alternate 7 \
    --tcpudp-phases without,xtc,xtc+early-drop,xtc+early-drop-noloss --host-delivery-cost-us 3 \
    --out /tmp/loss-runs/dom0 > /tmp/loss-runs/dom0/run.log 2>&1
log "dom0 rc=$? after: $(uptime)"
log "plain before: $(uptime)"
.venv/bin/xtc lab run tcpudp --kind netns --tcpudp-hold 12 --tcpudp-alternate 7 \
    --tcpudp-phases without,xtc,xtc+early-drop \
    --out /tmp/loss-runs/plain > /tmp/loss-runs/plain/run.log 2>&1
log "plain rc=$? after: $(uptime)"
end=$(date -u -d "15:15:30" +%s)
if [ "$(date -u +%s)" -lt "$end" ]; then
  log "rcvbuf before: $(uptime)"
  timeout 240 .venv/bin/xtc lab run tcpudp --kind netns --quick --tcpudp-alternate 2 \
      --tcpudp-phases without,xtc+early-drop-noloss --host-delivery-cost-us 3 --tcpudp-rcvbuf 1703936 \
      --out /tmp/loss-runs/rcvbuf > /tmp/loss-runs/rcvbuf/run.log 2>&1
  log "rcvbuf rc=$? after: $(uptime)"
else
  log "rcvbuf skipped: no time left"
fi
log "done"
