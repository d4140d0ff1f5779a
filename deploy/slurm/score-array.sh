#!/usr/bin/env bash
# Batch reward scoring as a Slurm job array: task K samples and scores shard
# K of the prompts (confclip reads K from SLURM_ARRAY_TASK_ID and the number
# of shards from SLURM_ARRAY_TASK_COUNT: --shard env), and a merge job that
# runs after every task has succeeded joins the shards.
#
#   sbatch deploy/slurm/score-array.sh            # submits the array and the merge
#
# MODEL, PROMPTS and OUT may be set in the environment; OUT must be on a
# file system every node sees. docs/scale.md walks through it.
#SBATCH --job-name=confclip-score
#SBATCH --array=0-7
#SBATCH --cpus-per-task=8
#SBATCH --mem=16G
#SBATCH --time=24:00:00
#SBATCH --output=confclip-score-%A_%a.log
set -euo pipefail

CONFCLIP=${CONFCLIP:-confclip}
MODEL=${MODEL:-$PWD/model.gguf}
PROMPTS=${PROMPTS:-$PWD/prompts.jsonl}
OUT=${OUT:-$PWD/out}

if [ -z "${SLURM_ARRAY_TASK_ID:-}" ]; then
  echo "submit this script with sbatch: it runs as the tasks of a job array" >&2
  exit 2
fi
mkdir -p "$OUT"
K=$SLURM_ARRAY_TASK_ID

# The first task submits the merge, to run once every task has succeeded.
if [ "$K" = "${SLURM_ARRAY_TASK_MIN:-0}" ]; then
  sbatch --job-name=confclip-merge --dependency="afterok:${SLURM_ARRAY_JOB_ID}" --output="$OUT/merge-%j.log" \
    --wrap="$CONFCLIP merge rollouts --out '$OUT/rollouts.jsonl' '$OUT'/rollouts-*.jsonl && \
$CONFCLIP merge scores --out '$OUT/scored.jsonl' --summary '$OUT/summary.json' '$OUT'/summary-*.json"
fi

# Threads: the cores Slurm gave the task.
"$CONFCLIP" rollout -m "$MODEL" --data "$PROMPTS" --out "$OUT/rollouts-$K.jsonl" -G 8 -n 512 --seed 1 \
  --threads "${SLURM_CPUS_PER_TASK:-0}" --shard env --no-timing
"$CONFCLIP" score --data "$OUT/rollouts-$K.jsonl" --out "$OUT/scored-$K.jsonl" --summary "$OUT/summary-$K.json" \
  --verifier math --reward confclip --shard env
