#!/bin/bash
# Early-drop mechanism measurement: gen ns -> host ns (bridge) -> capped VR ns (AF_PACKET forwarder).
# Phases: none | tbf | htb | ifb ; prints one JSON line per phase.
set -u
P=edm
H=$P-host; G=$P-gen; V=$P-vr
CG=/sys/fs/cgroup/cpu/$P-vr
RATE=${RATE:-100000}; HOLD=${HOLD:-8}; LIMIT_PPS=${LIMIT_PPS:-25000}; QUOTA=${QUOTA:-8000}
setup() {
  for n in $H $G $V; do ip netns add $n; done
  ip -n $H link add br0 type bridge; ip -n $H link set br0 up
  ip link add g0 netns $G type veth peer name gp netns $H
  ip link add v0 netns $V type veth peer name vif1 netns $H
  ip link add v1 netns $V type veth peer name vif2 netns $H
  ip -n $H link set gp master br0; ip -n $H link set vif1 master br0
  for l in gp vif1 vif2; do ip -n $H link set $l up; done
  ip -n $G link set g0 up; ip -n $G link set lo up
  ip -n $G addr add 198.18.10.1/24 dev g0
  ip netns exec $G ethtool -K g0 gso off tso off gro off >/dev/null 2>&1
  MAC=$(ip -n $V -br link show v0 | awk '{print $3}')
  ip -n $G neigh add 198.18.10.2 lladdr $MAC dev g0 nud permanent
  mkdir -p $CG; echo 100000 > $CG/cpu.cfs_period_us; echo $QUOTA > $CG/cpu.cfs_quota_us
  ip netns exec $V /tmp/ed/forwarder v0 v1 2>/tmp/ed/fwd.log >/dev/null </dev/null &
  FWD=$!
  echo $FWD > $CG/cgroup.procs
  sleep 1
}
teardown() {
  [ -n "${FWD:-}" ] && kill $FWD; sleep 0.3
  for n in $H $G $V; do ip netns del $n 2>/dev/null; done
  rmdir $CG 2>/dev/null
}
limiter() { # $1 phase ; MEANB mean bytes per packet
  ip -n $H link del ifb0 2>/dev/null; tc -n $H qdisc del dev vif1 root 2>/dev/null; tc -n $H qdisc del dev gp clsact 2>/dev/null
  local Bps=$(( LIMIT_PPS * MEANB ))
  local burst=$(( Bps / 50 ))
  case $1 in
   none) ;;
   tbf) tc -n $H qdisc add dev vif1 root tbf rate ${Bps}bps burst $burst limit $(( MEANB * 128 )) ;;
   htb) tc -n $H qdisc add dev vif1 root handle 1: htb default 1; tc -n $H class add dev vif1 parent 1: classid 1:1 htb rate ${Bps}bps burst $burst
        tc -n $H qdisc add dev vif1 parent 1:1 handle 10: pfifo limit 128 ;;
   ifb) ip -n $H link add ifb0 type ifb; ip -n $H link set ifb0 up
        tc -n $H qdisc add dev ifb0 root tbf rate ${Bps}bps burst $burst limit $(( MEANB * 128 ))
        tc -n $H qdisc add dev gp clsact
        tc -n $H filter add dev gp ingress protocol ip u32 match ip dst 198.18.10.2/32 action mirred egress redirect dev ifb0 ;;
  esac
}
dev() { ip netns exec $H cat /proc/net/dev | awk -v d="$1:" '$1==d {print $2, $3, $10, $11}'; } # rxB rxP txB txP
stat() { awk '$1=="cpu"{print $2+$3, $4, $5, $7, $8}' /proc/stat; } # user sys idle irq softirq
run_phase() {
  limiter $1
  ip netns exec $G /tmp/ed/udpsend -r $RATE -t $((HOLD+2)) -l 482 198.18.10.2 >/dev/null &
  local sp=$!
  sleep 1.5
  read a_vif1 _ a_tx1B a_tx1P <<<"$(dev vif1 | awk '{print 0,0,$3,$4}')"
  read a_rx2B a_rx2P _ _ <<<"$(dev vif2)"
  read a_gpB a_gpP _ _ <<<"$(dev gp)"
  read au as ai aq asi <<<"$(stat)"; a_f=$(awk '{print $14+$15}' /proc/$FWD/stat)
  a_fwd=$(cat $CG/cpuacct.usage 2>/dev/null || echo 0)
  sleep $HOLD
  read b_vif1 _ b_tx1B b_tx1P <<<"$(dev vif1 | awk '{print 0,0,$3,$4}')"
  read b_rx2B b_rx2P _ _ <<<"$(dev vif2)"
  read b_gpB b_gpP _ _ <<<"$(dev gp)"
  read bu bs bi bq bsi <<<"$(stat)"; b_f=$(awk '{print $14+$15}' /proc/$FWD/stat)
  wait $sp
  local load=$(cut -d' ' -f1 /proc/loadavg)
  python3 -c "
h=$HOLD; t=($bu+$bs+$bi+$bq+$bsi)-($au+$as+$ai+$aq+$asi)
print('{\"phase\":\"$1\",\"offered_kpps\":%.1f,\"handed_kpps\":%.1f,\"forwarded_kpps\":%.1f,\"softirq_pct\":%.1f,\"system_pct\":%.1f,\"user_pct\":%.1f,\"vr_cpu_pct\":%.1f,\"mean_bytes\":$MEANB,\"limit_kpps\":%.1f,\"load1\":$load}' % (
 ($b_gpP-$a_gpP)/h/1e3, ($b_tx1P-$a_tx1P)/h/1e3, ($b_rx2P-$a_rx2P)/h/1e3,
 200*($bsi-$asi)/t, 200*($bs-$as)/t, 200*($bu-$au)/t, ($b_f-$a_f)/h, $LIMIT_PPS/1e3))"
}
trap teardown EXIT
teardown 2>/dev/null
setup
MEANB=510
# learn mean packet size on vif1 with no limiter
limiter none
ip netns exec $G /tmp/ed/udpsend -r 10000 -t 1 -l 482 198.18.10.2 >/dev/null
read _ _ B P <<<"$(dev vif1)"; MEANB=$(( B / P )); echo "mean bytes/packet on vif1: $MEANB" >&2
for r in $(seq ${REPS:-2}); do for ph in ${PHASES:-none tbf htb ifb}; do run_phase $ph; done; done
