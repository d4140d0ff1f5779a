#!/usr/bin/env bash
# The RL loop (confclip run) with its rollouts on confclip serve workers, in
# one Slurm job: the job's first task runs `run` (training, scoring and the
# checkpoints) on the first node; every other task is a `serve` worker, a job
# step of its own on its own node, that gets each step's adapter from `run`
# (PUT /v1/adapters/NAME into its --adapter-dir) before sampling that step's
# groups. A worker that dies sends its groups to the others; the job's other
# steps go on.
#
#   sbatch deploy/slurm/run-workers.sh            # 1 trainer + 2 workers
#   sbatch --nodes=5 --ntasks=5 deploy/slurm/run-workers.sh   # 1 + 4
#
# CONFIG (the run's TOML), MODEL, OUT and PORT may be set in the
# environment; OUT must be on a file system every node sees. Submitted again
# after a stop, the run resumes from its last checkpoint. docs/scale.md
# walks through it.
#SBATCH --job-name=confclip-run
#SBATCH --nodes=3
#SBATCH --ntasks=3
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --mem=16G
#SBATCH --time=24:00:00
#SBATCH --output=confclip-run-%j.log
set -euo pipefail

CONFCLIP=${CONFCLIP:-confclip}
CONFIG=${CONFIG:-$PWD/run.toml}
MODEL=${MODEL:-$PWD/model.gguf}
OUT=${OUT:-$PWD/out}
PORT=${PORT:-8080}

if [ -z "${SLURM_JOB_ID:-}" ]; then
  echo "submit this script with sbatch: it starts the workers as the job's steps" >&2
  exit 2
fi
WORKERS=$((SLURM_NTASKS - 1))
if [ "$WORKERS" -lt 1 ]; then
  echo "the job needs at least 2 tasks: one for run, one or more workers" >&2
  exit 2
fi
mkdir -p "$OUT"
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")

# The workers: one job step each, on the nodes after the first. Each keeps
# the adapters it is sent in a folder of its own.
endpoints=()
steps=()
for k in $(seq 1 "$WORKERS"); do
  # With fewer nodes than tasks, workers share nodes: each has a port of its own.
  node=${NODES[$((k % ${#NODES[@]}))]}
  port=$((PORT + k - 1))
  mkdir -p "$OUT/adapters-$k"
  # --overlap: a step would otherwise hold the job's memory, and the next
  # worker's step would wait for it.
  srun --overlap --nodes=1 --ntasks=1 --nodelist="$node" --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
    "$CONFCLIP" serve -m "$MODEL" --host 0.0.0.0 --port "$port" --parallel 32 --ctx-size 2048 \
    --threads "${SLURM_CPUS_PER_TASK:-0}" --adapter-dir "$OUT/adapters-$k" >"$OUT/worker-$k.log" 2>&1 &
  steps+=($!)
  endpoints+=(--endpoint "http://$node:$port/v1")
done
trap 'kill "${steps[@]}" 2>/dev/null || true; wait' EXIT

# Each worker's port answers before run starts (a worker that never does is
# left out by run, which samples on the others).
for e in "${endpoints[@]}"; do
  [ "$e" = --endpoint ] && continue
  hostport=${e#http://}
  hostport=${hostport%%/*}
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}") 2>/dev/null && break
    sleep 1
  done
done

# run on this node: rollouts on the workers, training here.
resume=()
[ -f "$OUT/run/checkpoint.json" ] && resume=(--resume)
"$CONFCLIP" run "$CONFIG" --out "$OUT/run" "${resume[@]}" "${endpoints[@]}"
