#!/usr/bin/env bash
# make test-netfaults: the RL loop across a real network, with faults.
#
#  1. Three hosts: network namespaces joined to this one by veth pairs
#     (10.231.N.1 here, 10.231.N.2 there, N picked free), each running a
#     `confclip serve` worker on its own address. Worker C serves one
#     sequence at a time, so that its queue holds requests for a while.
#  2. A local run (no workers) of a 6-step loop on a generated model and
#     task gives the reference: its last adapter's sha256.
#  3. The same run from this namespace on the three workers, once under
#     each fault, one at a time:
#       delay      100 ms ± 50 ms on every packet, both ways, on every host
#                  (tc netem where the kernel has it; else scripts/netdelay.go
#                  on an NFQUEUE: the same delay and jitter, in user space);
#       loss       5% of the packets dropped, both ways, on every host
#                  (iptables' statistic match);
#       partition  C cut off (iptables DROP, both ways, its process left
#                  running) for 30 s, from a moment of step 2 or later when
#                  it holds requests (asked from inside C once it is cut);
#       restart    C killed while it holds requests of step 3 or later
#                  (cut off first, and asked from inside), started again at
#                  once with an older adapter (the first one this run sent
#                  it), and joined again once the pool has seen it down;
#       upload     C's link slowed (tbf, 64 kbit/s) so an adapter upload
#                  takes seconds, and cut (TCP resets both ways, 2 s) when
#                  half of it has arrived.
#     After each: scripts/netfaults-check.go checks every step and record
#     (none lost), workers.json (every group and retry accounted for) and
#     the last adapter (the local run's sha256); the partition's loss must
#     be detected, and its groups sent elsewhere, within DETECT_BOUND_S
#     (10 s: the pool's bound is 7.5 s, server/pool.go); the upload's
#     half file must be gone, and C must never have loaded it.
#  4. Everything started is stopped, and the namespaces deleted, by a trap,
#     whatever happened. All fault rules live inside the namespaces; this
#     namespace only gets the veths' host ends.
#
# Prints one line per fault (docs/scale.md's table) and the time taken.
# Needs root, iproute2, iptables and curl (installed from Debian's packages when
# missing). CONFCLIP (default bin/confclip) is the binary; KEEP=1 keeps the
# temp folder.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CONFCLIP=${CONFCLIP:-$ROOT/bin/confclip}
GO=${GO:-go}
STEPS=6 PROMPTS=12 GROUP=8
DETECT_BOUND_S=${DETECT_BOUND_S:-10}
PARTITION_S=30
RUN_TIMEOUT_S=300
start=$(date +%s)

fail() { echo "test-netfaults: FAIL: $*" >&2; exit 1; }
note() { echo "test-netfaults: $*" >&2; }

[ -x "$CONFCLIP" ] || fail "$CONFCLIP is missing: run make first"
[ "$(id -u)" = 0 ] || fail "network namespaces, veths and iptables need root"
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || fail "missing ${need[*]}: install them"
  note "installing ${need[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null || fail "apt-get install ${need[*]} failed"
fi

T=$(mktemp -d /tmp/confclip-netfaults.XXXXXX)
tag=$$
NS=() HOSTIF=() ADDR=() PEER=()
pids=()
cleanup() {
  rc=$?
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
  # Deleting a namespace deletes its veth pair (the host end too) and its
  # iptables rules; its processes were stopped above.
  for ns in "${NS[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  for i in "${HOSTIF[@]}"; do ip link del "$i" 2>/dev/null; done
  # A run still going (its command line names the temp folder).
  for c in /proc/[0-9]*/cmdline; do
    p=${c#/proc/}; p=${p%/cmdline}
    [ "$p" = $$ ] && continue
    tr '\0' ' ' <"$c" 2>/dev/null | grep -qF "$T/" && kill -9 "$p" 2>/dev/null
  done
  if [ $rc -ne 0 ]; then
    for f in "$T"/*.log; do
      [ -f "$f" ] || continue
      echo "---- $f (last 15 lines)" >&2; tail -15 "$f" >&2
    done
  fi
  if [ "${KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then note "files kept in $T"; else rm -rf "$T"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Helpers: NFQUEUE delay and the checks, built once.
$GO build -o "$T/netdelay" scripts/netdelay.go
$GO build -o "$T/check" scripts/netfaults-check.go

# 1. the hosts: a free 10.231.N.0/24 for each, N = BASE..BASE+2.
used=$(ip -4 -o addr show | grep -o '10\.231\.[0-9]*\.' || true)
base=
for b in $(seq 0 4 252); do
  free=1
  for k in 0 1 2; do grep -qx "10\.231\.$((b + k))\." <<<"$used" && free=0; done
  [ $free = 1 ] && { base=$b; break; }
done
[ -n "$base" ] || fail "no free 10.231.N.0/24 for three hosts"
for k in 0 1 2; do
  n=$((base + k))
  ns=confclip-nf$tag-$k hif=cnf$((tag % 100000))h$k pif=cnf$((tag % 100000))w$k
  ip netns add "$ns"
  NS+=("$ns")
  ip link add "$hif" type veth peer name "$pif"
  HOSTIF+=("$hif")
  ip link set "$pif" netns "$ns"
  ip addr add "10.231.$n.1/24" dev "$hif"
  ip link set "$hif" up
  ip -n "$ns" addr add "10.231.$n.2/24" dev "$pif"
  ip -n "$ns" link set "$pif" up
  ip -n "$ns" link set lo up
  ADDR+=("10.231.$n.2") PEER+=("$pif")
done
note "hosts A, B, C at ${ADDR[*]} (namespaces ${NS[*]})"
in_ns() { local k=$1; shift; ip netns exec "${NS[$k]}" "$@"; }
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY # the workers are ours, direct

# The model, the prompts and the config. The format verifier (a letter
# first) rewards about half of the generated model's samples, so every step
# trains and the adapter changes (the task's math prompts would all fail).
"$CONFCLIP" gen-model --out "$T/model.gguf" --seed 1 >/dev/null
for i in $(seq 0 199); do printf '{"id":"p%d","prompt":"Say %d:","answer":"x"}\n' "$i" "$i"; done >"$T/prompts.jsonl"
cat >"$T/run.toml" <<TOML
[model]
path = "$T/model.gguf"
ctx = 256
[data]
train = "$T/prompts.jsonl"
[rollout]
group = $GROUP
max_tokens = 32
temperature = 1.0
seed = 1
stop = ["\n"]
[verifier]
name = "format"
pattern = '^\s*[a-m]'
[train]
lora_rank = 4
lr = 2e-2
[run]
steps = $STEPS
prompts_per_step = $PROMPTS
eval_every = 0
TOML

# Worker k in its namespace, its adapters in $T/adapters-k; C serves one
# sequence at a time. Extra arguments (--lora) go to serve.
WPID=()
start_worker() {
  local k=$1; shift
  local par=4
  [ "$k" = 2 ] && par=1
  mkdir -p "$T/adapters-$k"
  : >"$T/worker-$k.log"
  # ip netns exec runs serve in its own process (no shell between): $! is
  # serve's pid.
  ip netns exec "${NS[$k]}" "$CONFCLIP" serve -m "$T/model.gguf" --host "${ADDR[$k]}" --port 8080 --ctx-size 256 \
    --parallel $par --threads 1 --adapter-dir "$T/adapters-$k" --quiet "$@" >>"$T/worker-$k.log" 2>&1 &
  WPID[$k]=$!
  pids+=($!)
  disown # no note from bash when the restart fault kills it
  for _ in $(seq 300); do grep -q '^serving' "$T/worker-$k.log" && return; sleep 0.1; done
  fail "worker $k did not start: $(tail -3 "$T/worker-$k.log")"
}
for k in 0 1 2; do start_worker $k; done
URLS=() ENDPOINTS=()
for k in 0 1 2; do URLS+=("http://${ADDR[$k]}:8080"); ENDPOINTS+=(--endpoint "http://${ADDR[$k]}:8080/v1"); done

# busy K: worker K's /health says it holds requests (the run's).
busy() {
  local h
  h=$(curl -s -m 1 "${URLS[$1]}/health" 2>/dev/null) || return 1
  ! grep -q '"queued":0,"running":0' <<<"$h" && grep -q '"running":' <<<"$h"
}
# now: seconds since the epoch, to the millisecond.
now() { date +%s.%3N; }

# 2. the local reference.
s=$(date +%s)
"$CONFCLIP" run "$T/run.toml" --out "$T/local" >"$T/local.log" 2>&1 || fail "the local run failed"
note "local run: $(($(date +%s) - s)) s"

# run_faulted NAME: the run on the workers, in the background; its lines
# (the pool's notes among them) are stamped with the time they came.
RUN_PID=
run_faulted() {
  local name=$1
  (timeout $RUN_TIMEOUT_S "$CONFCLIP" run "$T/run.toml" --out "$T/run-$name" "${ENDPOINTS[@]}" 2>&1 \
    | while IFS= read -r l; do printf '%s %s\n' "$(now)" "$l"; done >"$T/$name.log"
   exit "${PIPESTATUS[0]}") &
  RUN_PID=$!
  pids+=($RUN_PID)
}
# wait_run NAME: its exit status must be 0.
wait_run() {
  wait "$RUN_PID" || fail "$1: the run failed (status $?): $(grep -v '^[0-9.]* step' "$T/$1.log" | tail -5)"
}
# wait_step NAME K: the run has started step K (or finished).
wait_step() {
  for _ in $(seq $((RUN_TIMEOUT_S * 50))); do
    [ -d "$T/run-$1/steps/$(printf %04d "$2")" ] && return 0
    kill -0 "$RUN_PID" 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}
# wait_busy K: until worker K holds requests; 1 if the run ended first.
wait_busy() {
  while kill -0 "$RUN_PID" 2>/dev/null; do
    busy "$1" && return 0
    sleep 0.02
  done
  return 1
}
# first_line NAME PATTERN: the time stamp of the run's first line matching.
first_line() { { grep -E "$2" "$T/$1.log" || true; } | head -1 | cut -d' ' -f1; }
# secs EXPR: the expression's value, to a tenth; le A B: A <= B.
secs() { awk "BEGIN { printf \"%.1f\", $1 }"; }
le() { awk "BEGIN { exit !($1 <= $2) }"; }

ROWS=()
check() {
  local name=$1 what=$2 detect=$3
  out=$("$T/check" -run "$T/run-$name" -local "$T/local" -steps $STEPS -prompts $PROMPTS -group $GROUP -names A,B,C) \
    || fail "$name: $out"
  note "$name: $out"
  local steps lost equal
  steps=$(sed -n 's/^steps \([0-9/]*\);.*/\1/p' <<<"$out")
  lost=$(sed -n 's/.*records lost \([0-9]*\);.*/\1/p' <<<"$out")
  equal=$(sed -n 's/.*adapter sha256 equal: \([a-z]*\).*/\1/p' <<<"$out")
  local retries
  retries=$(sed -n 's/.*; \(retries [0-9]* (failures: [^)]*)\);.*/\1/p' <<<"$out")
  ROWS+=("| $name | $what; $retries | $detect | $steps | $lost | $equal |")
}

# 3a. delay, both ways, on every host.
f=delay
if in_ns 0 tc qdisc add dev "${PEER[0]}" root netem delay 100ms 50ms 2>/dev/null; then
  how="tc netem"
  in_ns 0 tc qdisc del dev "${PEER[0]}" root
  for k in 0 1 2; do
    in_ns $k tc qdisc add dev "${PEER[$k]}" root netem delay 100ms 50ms
    tc qdisc add dev "${HOSTIF[$k]}" root netem delay 100ms 50ms
  done
else
  how="NFQUEUE delay (no netem in this kernel)"
  for k in 0 1 2; do
    in_ns $k iptables -A OUTPUT -o "${PEER[$k]}" -j NFQUEUE --queue-num 7 --queue-bypass
    in_ns $k iptables -A INPUT -i "${PEER[$k]}" -j NFQUEUE --queue-num 7 --queue-bypass
    ip netns exec "${NS[$k]}" "$T/netdelay" -queue 7 -delay 100ms -jitter 50ms >"$T/netdelay-$k.log" 2>&1 &
    pids+=($!)
    DPID[$k]=$!
  done
fi
sleep 0.5
rtt=$(curl -s -o /dev/null -w '%{time_connect}' "${URLS[0]}/health")
note "delay: $how; a TCP connect to A takes $(secs "$rtt * 1000") ms"
le 0.1 "$rtt" || fail "delay: a connect took $rtt s: the delay is not there"
s=$(date +%s)
run_faulted $f
wait_run $f
el=$(($(date +%s) - s))
for k in 0 1 2; do
  if [ "$how" = "tc netem" ]; then
    in_ns $k tc qdisc del dev "${PEER[$k]}" root; tc qdisc del dev "${HOSTIF[$k]}" root
  else
    kill "${DPID[$k]}"; in_ns $k iptables -F
  fi
done
check $f "100 ms ± 50 ms each way on every packet ($how), run took $el s" "—"

# 3b. 5% loss, both ways, on every host.
f=loss
for k in 0 1 2; do
  in_ns $k iptables -A OUTPUT -o "${PEER[$k]}" -m statistic --mode random --probability 0.05 -j DROP
  in_ns $k iptables -A INPUT -i "${PEER[$k]}" -m statistic --mode random --probability 0.05 -j DROP
done
s=$(date +%s)
run_faulted $f
wait_run $f
el=$(($(date +%s) - s))
dropped=0
for k in 0 1 2; do
  d=$(in_ns $k iptables -L -v -x -n | awk '/statistic/ { n += $1 } END { print n + 0 }')
  dropped=$((dropped + d))
  in_ns $k iptables -F
done
[ "$dropped" -gt 0 ] || fail "loss: no packet was dropped"
check $f "5% of packets dropped each way on every host ($dropped dropped), run took $el s" "—"

# cut_holding LAST: at C's next busy moment, up to step LAST of run $f,
# cut C off (DROP both ways) and ask it from inside its namespace what it
# holds; holding nothing, it is joined again and the next busy moment is
# tried. Returns 0 with C cut off and holding requests (CUT_AT: when it was
# cut), 1 when the run passed step LAST or ended first.
cut_holding() {
  local h
  while wait_busy 2; do
    [ $((10#$(ls "$T/run-$f/steps" | tail -1))) -le "$1" ] || return 1
    in_ns 2 iptables -I INPUT -i "${PEER[2]}" -j DROP
    in_ns 2 iptables -I OUTPUT -o "${PEER[2]}" -j DROP
    CUT_AT=$(now)
    h=$(in_ns 2 curl -s -m 1 "${URLS[2]}/health" 2>/dev/null || true)
    if ! grep -q '"queued":0,"running":0' <<<"$h" && grep -q '"running":' <<<"$h"; then return 0; fi
    in_ns 2 iptables -F
    note "$f: C held nothing once cut; joined again"
  done
  return 1
}

# 3c. C partitioned for 30 s while it holds requests of step 2 or later.
f=partition
run_faulted $f
wait_step $f 2 || fail "$f: the run ended before step 2"
# C may finish its last request between a look at its /health and the cut
# (a tiny model's request takes milliseconds), so cut first and look after:
# from inside C's namespace (over its loopback, which the rules leave open)
# /health then tells what C holds while nothing can leave it. Holding
# nothing, C is joined again at once (TCP resends what the short cut
# dropped) and the next busy moment is tried.
cut_holding $STEPS || fail "$f: C held no request, once cut, from step 2 to the end"
t0=$CUT_AT
cut_step=$(ls "$T/run-$f/steps" | tail -1)
note "$f: C cut off in step $((10#$cut_step))"
sleep $PARTITION_S
in_ns 2 iptables -F
wait_run $f
lost_at=$(first_line $f "workers: ${URLS[2]}/v1 lost")
[ -n "$lost_at" ] || fail "$f: the pool never gave C's requests up: $(grep workers: "$T/$f.log" | head -5)"
detect=$(secs "$lost_at - $t0")
le "$detect" "$DETECT_BOUND_S" || fail "$f: C's loss found after $detect s, over the bound of $DETECT_BOUND_S s"
held=$(grep -m1 "workers: ${URLS[2]}/v1 lost" "$T/$f.log" | sed -n 's/.*its \([0-9]*\) requests.*/\1/p')
check $f "C cut off (DROP both ways) for ${PARTITION_S} s in step $((10#$cut_step)), holding $held requests, which went to A and B" "$detect s"

# 3d. C killed while it holds requests of step 3 or later, started again at
# once with the first adapter this run sent it.
f=restart
# C's folder lists this run's uploads only, the first one first (every run
# sends the same adapters under the same names, so an earlier run's files
# would say nothing of when this run sent them); C keeps serving the one it
# has loaded.
rm -f "$T"/adapters-2/run-*.gguf
run_faulted $f
wait_step $f 3 || fail "$f: the run ended before step 3"
# As for the partition: C may finish its last request between a look at
# its /health and the kill (on a quiet machine a step takes 0.2 s, and a
# kill of an idle C went unnoticed), so C is cut off first, asked from
# inside its namespace what it holds, and killed only holding something;
# holding nothing, it is joined again and the next busy moment is tried.
# The kill has to come before the last step: the pool notices the restart
# through a later step's requests (refused until C gets that step's adapter).
cut_holding $((STEPS - 1)) || fail "$f: C held no request, once cut, from step 3 to the one before the last"
old=$(ls -tr "$T/adapters-2"/run-*.gguf | head -1)
kill -9 "${WPID[2]}"
t0=$(now)
while kill -0 "${WPID[2]}" 2>/dev/null; do sleep 0.05; done
kill_step=$(ls "$T/run-$f/steps" | tail -1)
start_worker 2 --lora "$old"
back=$(secs "$(now) - $t0")
# C stays cut off until the pool has marked it down (its /health
# unanswered: within HealthTimeout + Poll, 2.5 s). C keeps computing once
# cut, so what it held may have been answered in the moment before the
# kill: the answer then sits in the dead process's socket, resent once the
# cut ends, and the pool would see nothing of the restart (two clean-clone
# runs: no failure, no down, no adapter line). Held until the pool has
# seen C down, the restart is noticed whatever those sockets held; the
# requests come back answered, reset, or found dead by keepalive (5 s).
for _ in $(seq $((DETECT_BOUND_S * 20))); do
  [ -n "$(first_line $f "workers: ${URLS[2]}/v1 (failed|is down)")" ] && break
  sleep 0.05
done
in_ns 2 iptables -F
note "$f: C killed in step $((10#$kill_step)) holding requests, serving again at $back s with $(basename "$old"), joined again at $(secs "$(now) - $t0") s"
wait_run $f
seen_at=$(first_line $f "workers: ${URLS[2]}/v1 (failed|is down)")
[ -n "$seen_at" ] || fail "$f: the pool never noticed C's restart: $(grep workers: "$T/$f.log" | head -5)"
detect=$(secs "$seen_at - $t0")
le "$detect" "$DETECT_BOUND_S" || fail "$f: C's restart found after $detect s, over the bound of $DETECT_BOUND_S s"
# Back with an older adapter, C is refused (its /health says so, or its
# requests get 409) until a step sends it the step's.
refused=$(grep -cE "workers: ${URLS[2]}/v1 (reports adapter|failed prompt .*another adapter)" "$T/$f.log" || true)
# C ends on the run's last adapter (sent to every worker after the last step).
last=$(sha256sum "$T/run-$f/checkpoints/step-$(printf %04d $STEPS)/adapter.gguf" | cut -d' ' -f1)
curl -s "${URLS[2]}/health" | grep -q "\"adapter_sha256\":\"$last\"" || fail "$f: C did not end on the run's last adapter"
check $f "C killed in step $((10#$kill_step)) holding requests, serving again at once with its first adapter of the run, cut off until the pool saw it down; refused $refused times until a later step sent it the step's" "$detect s"

# 3e. an adapter upload to C cut off halfway.
f=upload
size=$(stat -c %s "$T/local/checkpoints/step-$(printf %04d $STEPS)/adapter.gguf")
before=$(ls "$T/adapters-2")
tc qdisc add dev "${HOSTIF[2]}" root tbf rate 64kbit burst 4kb latency 10s
run_faulted $f
tmp=
while kill -0 "$RUN_PID" 2>/dev/null; do
  for x in "$T"/adapters-2/.run-*.tmp-*; do
    [ -f "$x" ] && [ "$(stat -c %s "$x" 2>/dev/null || echo 0)" -ge $((size / 2)) ] && { tmp=$x; break 2; }
  done
  sleep 0.01
done
[ -n "$tmp" ] || fail "$f: no upload to C was seen halfway"
# Resets both ways: what reaches C is answered with a reset (the run's
# side), and what C sends is turned into a reset to C itself (the
# server's side); the resets themselves pass.
in_ns 2 iptables -I INPUT -i "${PEER[2]}" -p tcp -j REJECT --reject-with tcp-reset
in_ns 2 iptables -I OUTPUT -o "${PEER[2]}" -p tcp ! --tcp-flags RST RST -j REJECT --reject-with tcp-reset
t0=$(now)
got=$(stat -c %s "$tmp" 2>/dev/null || echo gone)
note "$f: upload to C cut at $got of $size bytes ($(basename "$tmp"))"
sleep 2
in_ns 2 iptables -F
for _ in $(seq 200); do [ -e "$tmp" ] || break; sleep 0.1; done
[ ! -e "$tmp" ] || fail "$f: the half upload's file $tmp is still there"
cut_sha=${tmp##*/.run-}; cut_sha=${cut_sha%%.gguf.tmp-*}
curl -s "${URLS[2]}/health" | grep -q "\"adapter_sha256\":\"$cut_sha" && fail "$f: C loaded the adapter whose upload was cut"
tc qdisc del dev "${HOSTIF[2]}" root
wait_run $f
seen_at=$(first_line $f "workers: ${URLS[2]}/v1 left out: adapter upload")
[ -n "$seen_at" ] || fail "$f: the pool did not leave C out after the cut upload: $(grep workers: "$T/$f.log" | head -5)"
detect=$(secs "$seen_at - $t0")
# No half file, and every adapter C holds is whole (its name is its hash's start).
for a in $(ls -A "$T/adapters-2"); do
  case $a in .*) fail "$f: C's adapter folder holds $a" ;; esac
  h=$(sha256sum "$T/adapters-2/$a" | cut -c1-16)
  [ "$a" = "run-$h.gguf" ] || fail "$f: C holds $a, whose sha256 starts $h"
done
check $f "upload of $size bytes to C (64 kbit/s) cut by TCP resets at $got bytes: no file kept, nothing loaded, C left out of that step" "$detect s"

echo
echo "| fault | what happened | detection | steps completed | records lost | adapter hash equal |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "test-netfaults: PASS in $(($(date +%s) - start)) s"
