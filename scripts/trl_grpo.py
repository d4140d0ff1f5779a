"""TRL's GRPOTrainer on CPU on the real-model demo's task (issue 39).

Runs in build/trl-venv (scripts/trl-venv.sh). Loads SmolLM2-135M-Instruct from
the GGUF that confclip trains from (transformers' gguf_file=, into float32),
puts a LoRA on it, runs GRPOTrainer (PyTorch generation and training) on the
prompts of train.jsonl and measures greedy accuracy on the first --heldout
prompts of eval.jsonl before and after. Defaults are examples/demo-real.toml's.

stdout gets JSON lines only: {"event": "start"}, one {"event": "step"} per
optimizer step, {"event": "eval"} before and after, {"event": "end"}. Logs go
to stderr.

The reward is strict like confclip's math verifier in `run`: only a final-answer
form counts (the last "the answer is X", \\boxed{X}, "#### X", "Answer: X", or a
completion that is nothing but a number); math-verify then judges X against the
reference. 1 or 0.

Timing: TRL times GRPOTrainer._prepare_inputs (generation, rewards,
advantages) and transformers.generate with its profiling contexts, but sends
them only to wandb/mlflow/trackio, so they are collected here by wrapping
ProfilingContext._log_metrics. A step's s_train is its wall time less
_prepare_inputs: the forward, backward and optimizer step.
"""
import argparse
import json
import os
import re
import resource
import sys
import time

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--model", default="build/demo-real/smollm2-135m-instruct-f32.gguf")
p.add_argument("--train", default="build/demo-real/data/train.jsonl")
p.add_argument("--eval", default="build/demo-real/data/eval.jsonl")
p.add_argument("--lora-rank", type=int, default=8)
p.add_argument("--lora-alpha", type=float, default=16.0)
p.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
p.add_argument("--group", "-G", type=int, default=8, help="num_generations")
p.add_argument("--max-tokens", type=int, default=96, help="max_completion_length")
p.add_argument("--temperature", type=float, default=0.5)
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("--steps", type=int, default=8)
p.add_argument("--prompts-per-step", type=int, default=6)
p.add_argument("--micro-batch", type=int, default=0,
               help="completions per forward/backward pass (0: the whole step, prompts-per-step x G)")
p.add_argument("--loss-type", default="dapo", help="TRL loss_type; confclip's token_mean is dapo")
p.add_argument("--scale-rewards", default="group", help="group, batch or none (confclip's advantage.scale)")
p.add_argument("--gradient-checkpointing", action="store_true", help="TRL's default; off here")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--heldout", type=int, default=500, help="first N prompts of --eval; 0 skips the evaluations")
p.add_argument("--eval-batch", type=int, default=32)
p.add_argument("--no-before", action="store_true",
               help="skip the evaluation before training (the same for every seed: the base model's)")
p.add_argument("--out", default="build/trl-grpo", help="TRL's output_dir (nothing is saved)")
p.add_argument("--verdicts", default="", help="write each held-out prompt's verdict after training, JSON lines "
               '{"id": ..., "correct": ...}, to this file (for a paired test against another tool)')
args = p.parse_args()

for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[v] = str(args.threads)
T0 = time.perf_counter()
OUT = sys.stdout
sys.stdout = sys.stderr  # libraries' prints stay off the JSON lines


def emit(**kv):
    OUT.write(json.dumps(kv) + "\n")
    OUT.flush()


import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
import peft  # noqa: E402
from datasets import Dataset  # noqa: E402
from math_verify import parse, verify  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.extras import profiling  # noqa: E402

torch.set_num_threads(args.threads)

# --- reward -----------------------------------------------------------------
FINAL = [
    re.compile(r"\\boxed\s*\{([^{}]*)\}"),
    re.compile(r"####\s*([^\n]+)"),
    re.compile(r"(?i)the answer is\s*:?\s*((?:\d[.,]\d|[^.\n])+)"),
    re.compile(r"(?i)answer\s*:\s*([^\n]+)"),
]
BARE = re.compile(r"\s*\$?-?\d[\d,]*(\.\d+)?\$?\.?\s*")


def final_answer(text):
    for rx in FINAL:
        m = rx.findall(text)
        if m:
            return m[-1]
    return text if BARE.fullmatch(text) else None


def correct(text, answer):
    x = final_answer(text)
    if x is None:
        return 0.0
    try:
        return float(verify(parse(answer), parse(x.strip().strip("$*"))))
    except Exception:
        return 0.0


def reward(completions, answer, **_):
    return [correct(c[0]["content"] if isinstance(c, list) else c, a) for c, a in zip(completions, answer)]


# --- data and model -----------------------------------------------------------
def load(path, n=None):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [{"id": r["id"], "prompt": r["messages"], "answer": r["answer"]} for r in rows[:n]]


train_rows, heldout = load(args.train), load(args.eval, args.heldout)
t = time.perf_counter()
d, f = os.path.split(os.path.abspath(args.model))
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
# transformers keeps its GGUF quantizer on the model even when every weight was
# unpacked into a plain float32 tensor (always for an F32 file; for a quantized
# one when the `kernels` package is absent), and Trainer then refuses to train
# it ("QuantizationMethod.GGUF ... do not support training"). Drop the marker
# once nothing packed is left.
packed = {type(m).__name__ for m in model.modules() if type(m).__name__.startswith("Gguf")}
assert not packed and all(p.dtype == torch.float32 for p in model.parameters()), f"packed GGUF modules: {packed}"
model.hf_quantizer, model.is_quantized = None, False
model.config.quantization_config = None
emit(event="start", model=args.model, load_s=round(time.perf_counter() - t, 2), params=model.num_parameters(),
     threads=torch.get_num_threads(), train_prompts=len(train_rows), heldout=len(heldout),
     torch=torch.__version__, transformers=transformers.__version__, trl=trl.__version__, peft=peft.__version__,
     args=vars(args))


@torch.no_grad()
def evaluate(m, when):
    t = time.perf_counter()
    m.eval()
    tok.padding_side = "left"
    right, tokens, verdicts = 0, 0, []
    for i in range(0, len(heldout), args.eval_batch):
        rows = heldout[i:i + args.eval_batch]
        text = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
        enc = tok(text, return_tensors="pt", padding=True, add_special_tokens=False)
        out = m.generate(**enc, max_new_tokens=args.max_tokens, do_sample=False, temperature=None, top_p=None,
                         top_k=None, pad_token_id=tok.pad_token_id)[:, enc["input_ids"].shape[1]:]
        for r, ids in zip(rows, out):
            ids = ids[ids != tok.pad_token_id]  # pad is <|im_end|>, the end of a turn
            tokens += len(ids)
            ok = correct(tok.decode(ids, skip_special_tokens=True), r["answer"])
            right += ok
            verdicts.append({"id": r["id"], "correct": bool(ok)})
    if when == "after" and args.verdicts:
        with open(args.verdicts + ".tmp", "w") as f:
            f.writelines(json.dumps(v) + "\n" for v in verdicts)
        os.replace(args.verdicts + ".tmp", args.verdicts)
    n = len(heldout)
    emit(event="eval", when=when, accuracy=right / n, n=n, mean_tokens=tokens / n,
         s=round(time.perf_counter() - t, 2))
    return right / n


acc_before = evaluate(model, "before") if heldout and not args.no_before else None

# --- timing: TRL's profiling contexts, per step --------------------------------
prof = {}
_log_metrics = profiling.ProfilingContext._log_metrics


def _collect(self, duration):
    prof[self.name] = prof.get(self.name, 0.0) + duration
    _log_metrics(self, duration)


profiling.ProfilingContext._log_metrics = _collect


class StepLog(TrainerCallback):
    def on_step_begin(self, a, state, control, **kw):
        prof.clear()
        self.t = time.perf_counter()

    def on_step_end(self, a, state, control, **kw):
        self.wall = time.perf_counter() - self.t
        self.prof = dict(prof)

    def on_log(self, a, state, control, logs=None, **kw):
        if logs is None or "reward" not in logs:
            return
        prep = self.prof.get("GRPOTrainer._prepare_inputs", 0.0)
        emit(event="step", step=state.global_step, s=round(self.wall, 3),
             s_gen=round(self.prof.get("GRPOTrainer.transformers.generate", 0.0), 3),
             s_prepare=round(prep, 3), s_train=round(self.wall - prep, 3),
             reward=logs["reward"], reward_std=logs.get("reward_std"),
             frac_reward_zero_std=logs.get("frac_reward_zero_std"),
             completion_mean_length=logs.get("completions/mean_length"),
             loss=logs.get("loss"), trl_step_time=logs.get("step_time"),
             peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))


# --- GRPO ----------------------------------------------------------------------
batch = args.prompts_per_step * args.group
micro = args.micro_batch or batch
assert batch % micro == 0, "--micro-batch must divide prompts-per-step x G"
cfg = GRPOConfig(
    output_dir=args.out, use_cpu=True, bf16=False, fp16=False, report_to="none", save_strategy="no",
    disable_tqdm=True, logging_steps=1, seed=args.seed, data_seed=args.seed,
    max_steps=args.steps, per_device_train_batch_size=micro, gradient_accumulation_steps=batch // micro,
    num_generations=args.group, max_completion_length=args.max_tokens, temperature=args.temperature,
    learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
    loss_type=args.loss_type, scale_rewards=args.scale_rewards, beta=0.0, num_iterations=1,
    gradient_checkpointing=args.gradient_checkpointing, dataloader_num_workers=0,
)
lora = peft.LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0, bias="none",
                       target_modules=args.targets.split(","), task_type="CAUSAL_LM")
trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=Dataset.from_list(train_rows),
                      processing_class=tok, peft_config=lora, callbacks=[StepLog()])
t = time.perf_counter()
trainer.train()
train_s = time.perf_counter() - t

acc_after = evaluate(trainer.model, "after") if heldout else None
emit(event="end", accuracy_before=acc_before, accuracy_after=acc_after, steps=args.steps,
     train_s=round(train_s, 2), s_per_step=round(train_s / args.steps, 3),
     peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
     total_s=round(time.perf_counter() - T0, 2), torch=torch.__version__, transformers=transformers.__version__,
     trl=trl.__version__, peft=peft.__version__)
