#!/usr/bin/env bash
# make bench-trl: confclip's RL loop beside TRL's GRPOTrainer (PyTorch, CPU) on
# the real-model demo's task and model, the same settings on both sides, both
# on THREADS (2) threads, one after the other.
#
#   confclip  `confclip run examples/demo-real.toml --reward binary` (binary
#             GRPO, the group's std, token_mean; the loss's log-probs at
#             temperature 1, where TRL takes them at the sampling temperature:
#             --train-temperature 0.5 does as TRL, docs/speed.md), from the
#             exact F32 copy of SmolLM2-135M-Instruct
#   TRL       scripts/trl_grpo.py in build/trl-venv (scripts/trl-venv.sh):
#             GRPOTrainer with its own generation, the same F32 GGUF loaded by
#             transformers (gguf_file=, every weight float32), loss_type dapo
#             (= token_mean, train/loss.go), scale_rewards group
#
# Both: LoRA rank 8, alpha 16 on the seven projection matrices, G = 8, 96
# completion tokens at temperature 0.5, lr 1e-3 (AdamW, constant, gradient
# norm clipped at 1), 8 steps of 6 prompts, greedy held-out accuracy on the
# same 500 prompts before and after. /usr/bin/time measures each whole
# process (peak RSS, wall); scripts/trl-compare.go prints the table and the
# line, and writes them into docs/speed.md (TRL_MD= another file, or empty
# for none). Everything else goes to build/bench-trl.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
STEPS=${STEPS:-8}
# completions a forward/backward pass on TRL's side (per_device_train_batch_size,
# TRL's default 8; the step's 48 accumulated): the whole step in one pass
# (TRL_MICRO_BATCH=48) took 21 GB here.
TRL_MICRO_BATCH=${TRL_MICRO_BATCH:-8}
out=build/bench-trl
data=build/demo-real/data
model=build/demo-real/smollm2-135m-instruct-f32.gguf
for f in "$data/train.jsonl" "$data/eval.jsonl" "$model"; do
  [ -f "$f" ] || { echo "bench-trl: $f is missing (make demo-real lays it down)" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "bench-trl: needs GNU time (/usr/bin/time; Debian's time package)" >&2; exit 1; }
bash scripts/trl-venv.sh
rm -rf "$out"
mkdir -p "$out"
./bin/confclip version | tee "$out/confclip-version.txt" >&2

echo "bench-trl: confclip run, $STEPS steps, $THREADS threads" >&2
/usr/bin/time -f '%M %e' -o "$out/confclip.time" \
  ./bin/confclip run examples/demo-real.toml --reward binary --steps "$STEPS" --threads "$THREADS" \
  --out "$out/confclip" >"$out/confclip.log" 2>&1 || { tail -20 "$out/confclip.log"; exit 1; }

echo "bench-trl: TRL GRPOTrainer, $STEPS steps, $THREADS threads" >&2
/usr/bin/time -f '%M %e' -o "$out/trl.time" \
  build/trl-venv/bin/python scripts/trl_grpo.py --model "$model" --train "$data/train.jsonl" \
  --eval "$data/eval.jsonl" --heldout 500 --steps "$STEPS" --prompts-per-step 6 --group 8 --micro-batch "$TRL_MICRO_BATCH" --max-tokens 96 \
  --temperature 0.5 --lr 1e-3 --lora-rank 8 --lora-alpha 16 --loss-type dapo --scale-rewards group \
  --threads "$THREADS" --seed 1 --out "$out/trl-output" --verdicts "$out/trl-verdicts.jsonl" \
  >"$out/trl.jsonl" 2>"$out/trl.log" || { tail -20 "$out/trl.log"; exit 1; }

go run scripts/trl-compare.go "$out/confclip" "$out/confclip.time" "$out/trl.jsonl" "$out/trl.time" \
  "$out/trl-verdicts.jsonl" ${TRL_MD-docs/speed.md} | tee "$out/result.md"
