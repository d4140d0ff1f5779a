#!/usr/bin/env bash
# A 3-step `confclip run` with the local engine, then the same run with its
# rollouts on two `confclip serve` workers on 127.0.0.1; prints both times,
# the metrics side by side and the adapters' sha256 (docs/scale.md quotes
# the figures). No speed-up is to be expected on a machine of few cores:
# the workers share its cores with the trainer.
#
#   bash scripts/remote-vs-local.sh [DIR]      (CONFCLIP: the binary, default bin/confclip)
set -euo pipefail
cd "$(dirname "$0")/.."
CONFCLIP=${CONFCLIP:-$PWD/bin/confclip}
T=${1:-$(mktemp -d /tmp/confclip-remote.XXXXXX)}
mkdir -p "$T"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
"$CONFCLIP" gen-model --out "$T/model.gguf" --seed 1 >/dev/null
"$CONFCLIP" gen-task --out-dir "$T/data" --n 200 --held-out 20 --seed 1 >/dev/null
cat >"$T/run.toml" <<TOML
[model]
path = "$T/model.gguf"
ctx = 256
[data]
train = "$T/data/train.jsonl"
[rollout]
group = 8
max_tokens = 48
temperature = 1.0
seed = 1
stop = ["\n"]
[verifier]
name = "math"
[train]
lora_rank = 4
[run]
steps = 3
prompts_per_step = 16
eval_every = 0
TOML
s=$(date +%s.%N)
"$CONFCLIP" run "$T/run.toml" --out "$T/local" >"$T/local.log" 2>&1
local_s=$(echo "$(date +%s.%N) - $s" | bc)

urls=()
for k in 0 1; do
  mkdir -p "$T/adapters-$k"
  "$CONFCLIP" serve -m "$T/model.gguf" --port 0 --ctx-size 256 --parallel 16 --adapter-dir "$T/adapters-$k" >"$T/worker-$k.log" 2>&1 &
  pids+=($!)
done
for k in 0 1; do
  for _ in $(seq 100); do grep -q '^serving' "$T/worker-$k.log" && break; sleep 0.1; done
  urls+=(--endpoint "$(sed -n 's/^serving .* on //p' "$T/worker-$k.log")")
done
s=$(date +%s.%N)
"$CONFCLIP" run "$T/run.toml" --out "$T/remote" "${urls[@]}" >"$T/remote.log" 2>&1
remote_s=$(echo "$(date +%s.%N) - $s" | bc)
printf 'local engine: %.1f s; two workers: %.1f s\n' "$local_s" "$remote_s"
for d in local remote; do
  echo "$d: $(sha256sum "$T/$d/checkpoints/step-0003/adapter.gguf" | cut -c1-16) (last adapter sha256)"
  cut -d, -f1,2,5,9,12,19,23- "$T/$d/metrics.csv"
done
for k in 0 1; do
  echo "worker $k: $(curl -s "$(sed -n 's/^serving .* on //p' "$T/worker-$k.log" | sed 's|/v1$||')/health")"
done
for s in 1 2 3; do
  cmp -s <(jq -c '[.prompt_id,.sample,.tokens]' "$T/local/steps/000$s/rollouts.jsonl" | sort) \
         <(jq -c '[.prompt_id,.sample,.tokens]' "$T/remote/steps/000$s/rollouts.jsonl" | sort) \
    && echo "step $s: the same tokens in every record" || echo "step $s: tokens differ"
done
