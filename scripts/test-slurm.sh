#!/usr/bin/env bash
# make test-slurm: runs deploy/slurm/score-array.sh on a real single-node
# Slurm cluster that this script starts itself, and compares the merged
# output with one process.
#
#  1. slurm-wlm and munge: installed from Debian's packages when missing (as
#     root), else the script says what to install and fails;
#  2. a temp folder gets a munge key, a slurm.conf for this one node (free
#     ports, state, spool and logs in the folder), and munged, slurmctld and
#     slurmd are started from it (nothing under /etc is changed);
#  3. a generated model (confclip gen-model) and 40 generated prompts
#     (confclip gen-task); the script is submitted as a 3-task array;
#  4. once the array and its afterok merge are done, the merged scored
#     records are compared with one process's: tokens and verdicts exact,
#     log-probs within 1e-4 (scripts/slurm-compare.go);
#  5. deploy/slurm/run-workers.sh runs `run` for 2 steps with 2 serve
#     workers as job steps; every record must name one of them;
#  6. everything started here is stopped (trap), whatever happened.
#
# CONFCLIP (default bin/confclip) is the binary; KEEP=1 keeps the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CONFCLIP=${CONFCLIP:-$ROOT/bin/confclip}
TASKS=3
TIMEOUT_S=${SLURM_TEST_TIMEOUT:-1200}
start=$(date +%s)

fail() { echo "test-slurm: FAIL: $*" >&2; exit 1; }
note() { echo "test-slurm: $*" >&2; }

[ -x "$CONFCLIP" ] || fail "$CONFCLIP is missing: run make first"

# 1. the packages
need=()
for t in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge; do
  cmd=${t%%:*} pkg=${t#*:}
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    note "installing slurm-wlm and munge from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || fail "apt-get update failed"
    apt-get install -y -qq slurm-wlm munge >/dev/null || fail "apt-get install slurm-wlm munge failed"
  else
    fail "Slurm and munge are missing (${need[*]}): install them, e.g. sudo apt-get install slurm-wlm munge"
  fi
fi
export PATH=$PATH:/usr/sbin
for cmd in slurmctld slurmd munged sbatch squeue scontrol; do
  command -v $cmd >/dev/null 2>&1 || fail "$cmd is still missing after the install"
done

T=$(mktemp -d /tmp/confclip-slurm.XXXXXX)
chmod 755 "$T"
pids=()
cleanup() {
  rc=$?
  if [ -n "${SLURM_CONF:-}" ] && [ -f "${SLURM_CONF}" ]; then
    # The jobs first, while slurmd is there to end their processes.
    scancel --quiet --user "$(id -un)" >/dev/null 2>&1 || true
    for _ in $(seq 30); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  # Anything a job left behind runs from the temp folder: its command line
  # names it.
  for c in /proc/[0-9]*/cmdline; do
    p=${c#/proc/}; p=${p%/cmdline}
    [ "$p" = $$ ] && continue
    tr '\0' ' ' <"$c" 2>/dev/null | grep -qF "$T/" && kill -9 "$p" 2>/dev/null || true
  done
  if [ $rc -ne 0 ]; then
    for f in "$T"/log/*.log "$T"/out/*.log; do
      [ -f "$f" ] || continue
      echo "---- $f (last 20 lines)" >&2; tail -20 "$f" >&2
    done
  fi
  if [ "${KEEP:-0}" = 1 ]; then note "kept $T"; else rm -rf "$T"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$T"/{log,state,spool,run,munge,out}
chmod 700 "$T/munge"

# A free TCP port on 127.0.0.1 (bash's /dev/tcp: nothing listening).
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }
  done
  fail "no free TCP port found"
}

# 2. munge and Slurm, from the temp folder
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge/munge.key"
MSOCK=$T/munge/munge.socket
munged --foreground --force --key-file="$T/munge/munge.key" --socket="$MSOCK" --pid-file="$T/munge/munged.pid" \
  --seed-file="$T/munge/munge.seed" --log-file="$T/log/munged.log" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$MSOCK" ] && break; sleep 0.1; done
[ -S "$MSOCK" ] || fail "munged did not start (log: $T/log/munged.log)"

NODE=$(hostname -s)
# At least 4 CPUs declared (config_overrides: slurmd takes the file's word),
# so that run-workers.sh's 3 tasks fit on a 2-core machine.
CPUS=$(( $(nproc) < 4 ? 4 : $(nproc) ))
MEM=$(awk '/MemTotal/ {print int($2/1024) - 1024}' /proc/meminfo)
USER_NAME=$(id -un)
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
while [ "$SLURMD_PORT" = "$CTLD_PORT" ]; do SLURMD_PORT=$(free_port); done
export SLURM_CONF=$T/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=confclip-ci
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$USER_NAME
SlurmdUser=$USER_NAME
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MSOCK
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=120
InactiveLimit=0
MinJobAge=300
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=ci Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i -f "$SLURM_CONF" >"$T/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$NODE" >"$T/log/slurmd.out" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 120); do
  if sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then up=1; break; fi
  sleep 0.5
done
[ $up = 1 ] || { sinfo 2>&1 >&2 || true; fail "the node did not come up in 60 s (logs in $T/log)"; }
note "slurm up: node $NODE, $CPUS CPUs, slurmctld port $CTLD_PORT, slurmd port $SLURMD_PORT"

# 3. the data and the array
"$CONFCLIP" gen-model --out "$T/model.gguf" --seed 1 >/dev/null
"$CONFCLIP" gen-task --out-dir "$T/data" --n 50 --held-out 10 --seed 1 >/dev/null
PROMPTS=$T/data/train.jsonl
OUT=$T/out
# The script's resources are for a real cluster's nodes; the command line
# wins over its #SBATCH lines, so one CPU and 1 GiB a task here.
jid=$(cd "$T" && CONFCLIP=$CONFCLIP MODEL=$T/model.gguf PROMPTS=$PROMPTS OUT=$OUT \
  sbatch --parsable --array=0-$((TASKS - 1)) --cpus-per-task=1 --mem=1G --output="$OUT/task-%A_%a.log" \
  "$ROOT/deploy/slurm/score-array.sh") || fail "sbatch refused the script"
jid=${jid%%;*}
note "submitted array job $jid ($TASKS tasks)"

# 4. wait for the tasks and the merge: the queue empties and the summary exists
deadline=$(( $(date +%s) + TIMEOUT_S ))
seen_merge=0
while :; do
  q=$(squeue -h -o '%i %j %T' 2>/dev/null || true)
  grep -q confclip-merge <<<"$q" && seen_merge=1
  if [ -z "$q" ]; then break; fi
  [ "$(date +%s)" -lt "$deadline" ] || { echo "$q" >&2; fail "jobs still queued after ${TIMEOUT_S}s"; }
  sleep 2
done
for k in $(seq 0 $((TASKS - 1))); do
  [ -f "$OUT/summary-$k.json" ] || fail "task $k wrote no summary-$k.json (its log: $OUT/task-${jid}_$k.log)"
done
[ -f "$OUT/summary.json" ] || fail "the merge job did not write summary.json (seen in the queue: $seen_merge; logs: $OUT/merge-*.log)"
[ -f "$OUT/scored.jsonl" ] || fail "the merge job did not write scored.jsonl"
slurm_s=$(( $(date +%s) - start ))

# One process, as the script's commands without --shard.
mkdir -p "$T/one"
"$CONFCLIP" rollout -m "$T/model.gguf" --data "$PROMPTS" --out "$T/one/rollouts.jsonl" -G 8 -n 512 --seed 1 --no-timing \
  >"$T/log/one-process.log" 2>&1 || fail "one process's rollout failed"
"$CONFCLIP" score --data "$T/one/rollouts.jsonl" --out "$T/one/scored.jsonl" --summary "$T/one/summary.json" \
  --verifier math --reward confclip >>"$T/log/one-process.log" 2>&1 || fail "one process's score failed"
(cd "$ROOT" && go run scripts/slurm-compare.go "$OUT/scored.jsonl" "$T/one/scored.jsonl" "$OUT/summary.json" "$T/one/summary.json") \
  || fail "the merged array differs from one process"
note "PASS: $TASKS-task array + afterok merge = one process ($(( $(date +%s) - start ))s in all, ${slurm_s}s to the merge)"

# 5. deploy/slurm/run-workers.sh: `run` for 2 steps with 2 serve workers as
# job steps, on this one node.
rw_start=$(date +%s)
cat >"$T/run.toml" <<TOML
[model]
path = "$T/model.gguf"
ctx = 256
[data]
train = "$PROMPTS"
[rollout]
group = 4
max_tokens = 16
seed = 1
[verifier]
name = "math"
[train]
lora_rank = 4
[run]
steps = 2
prompts_per_step = 8
eval_every = 0
TOML
RW=$T/rw
mkdir -p "$RW"
jid2=$(cd "$T" && CONFCLIP=$CONFCLIP CONFIG=$T/run.toml MODEL=$T/model.gguf OUT=$RW PORT=$(free_port) \
  sbatch --parsable --nodes=1 --ntasks=3 --ntasks-per-node=3 --cpus-per-task=1 --mem=2G \
  --output="$RW/job.log" "$ROOT/deploy/slurm/run-workers.sh") || fail "sbatch refused run-workers.sh"
jid2=${jid2%%;*}
note "submitted run-workers job $jid2 (run + 2 serve workers)"
deadline=$(( $(date +%s) + TIMEOUT_S ))
while [ -n "$(squeue -h -j "$jid2" 2>/dev/null || true)" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "run-workers job still running after ${TIMEOUT_S}s"
  sleep 2
done
for f in "$RW/job.log" "$RW"/worker-*.log; do cp "$f" "$T/log/rw-$(basename "$f")" 2>/dev/null || true; done
[ -f "$RW/run/checkpoints/step-0002/adapter.gguf" ] || fail "run-workers: the run did not finish 2 steps (log: $RW/job.log)"
for s in 0001 0002; do
  [ -f "$RW/run/steps/$s/workers.json" ] || fail "run-workers: step $s has no workers.json: it did not sample on the workers"
  n=$(grep -c '"worker":"http' "$RW/run/steps/$s/rollouts.jsonl" || true)
  [ "$n" = 32 ] || fail "run-workers: step $s: $n of 32 records name a worker"
done
used=$(grep -h -o '"worker":"[^"]*"' "$RW"/run/steps/*/rollouts.jsonl | sort -u | wc -l)
[ "$used" = 2 ] || fail "run-workers: the records name $used workers, want 2"
note "PASS: run-workers.sh: run on 2 serve job steps, 2 steps, every record from one of them ($(( $(date +%s) - rw_start ))s)"
