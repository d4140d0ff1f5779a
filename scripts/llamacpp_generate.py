"""Batched sampled generation through llama-cpp-python, the rollout's anchor (issue 39).

Runs in build/llamacpp-venv (scripts/llamacpp-venv.sh): llama-cpp-python built
from the same pinned source distribution confclip vendors llama.cpp from, with
its own, unpatched llama.cpp. It does what a rollout does, the way a
llama-cpp-python user writes it with the package's low-level API (its Llama
class generates one sequence at a time): G completions of one prompt, the
prompt decoded once for all G sequences, then one llama_decode a step with a
token for each live sequence; each token drawn by llama.cpp's sampler chain
(temperature, then a draw from the full softmax) and its log-probability taken
from the row with numpy, as Llama.logits_to_logprobs does.

The context is llama.cpp's default (llama_context_default_params: F16 KV
cache, flash attention auto) with only the sizes, the unified cache the shared
prompt needs and the threads set, or the engine's (--kv f32 --flash-attn on).

The model is loaded once. stdout gets one JSON line when ready
({"ready": true, ...: versions, prompt tokens}), then one per line read from
stdin ("SEED" runs a round: {"tokens": N, "seconds": S, "sum_logprob": L});
an empty line or end of input ends it. The Go benchmark
(train's BenchmarkAgainstLlamaCppPython) alternates these rounds with the
engine's.
"""
import argparse
import ctypes
import json
import sys
import time

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--model", required=True)
p.add_argument("--prompt", default="What is 12+7? Answer:")
p.add_argument("--group", "-G", type=int, default=8)
p.add_argument("--max-tokens", type=int, default=128)
p.add_argument("--temperature", type=float, default=1.0)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--kv", choices=["f16", "f32"], default="f16", help="KV cache type (llama.cpp's default f16)")
p.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
args = p.parse_args()

import numpy as np  # noqa: E402
import llama_cpp  # noqa: E402
from llama_cpp import llama_cpp as C  # noqa: E402


def fail(msg):
    print(f"llamacpp_generate: {msg}", file=sys.stderr)
    sys.exit(1)


# llama.cpp keeps the callback: so must we, or ctypes frees it under llama.cpp
quiet = C.llama_log_callback(lambda level, text, data: None)
C.llama_log_set(quiet, ctypes.c_void_p())
C.llama_backend_init()
mp = C.llama_model_default_params()
mp.n_gpu_layers = 0
model = C.llama_model_load_from_file(args.model.encode(), mp)
if not model:
    fail(f"{args.model}: llama.cpp could not load it")
vocab = C.llama_model_get_vocab(model)
n_vocab = C.llama_vocab_n_tokens(vocab)

buf = (C.llama_token * (len(args.prompt) + 8))()
n_prompt = C.llama_tokenize(vocab, args.prompt.encode(), len(args.prompt.encode()), buf, len(buf), True, False)
if n_prompt <= 0:
    fail(f"tokenizing the prompt gave {n_prompt}")
prompt = list(buf[:n_prompt])

G, T = args.group, args.max_tokens
cp = C.llama_context_default_params()
cp.n_ctx = G * (n_prompt + T + 8)
cp.n_batch = max(512, G)
cp.n_seq_max = G
cp.kv_unified = True
cp.n_threads = cp.n_threads_batch = args.threads
cp.type_k = cp.type_v = {"f16": 1, "f32": 0}[args.kv]  # GGML_TYPE_F16, GGML_TYPE_F32
cp.flash_attn_type = {"auto": -1, "off": 0, "on": 1}[args.flash_attn]
ctx = C.llama_init_from_model(model, cp)
if not ctx:
    fail("llama_init_from_model failed")
mem = C.llama_get_memory(ctx)
batch = C.llama_batch_init(max(cp.n_batch, G), 0, G)


def draw_chain(seed):
    ch = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
    C.llama_sampler_chain_add(ch, C.llama_sampler_init_temp(args.temperature))
    C.llama_sampler_chain_add(ch, C.llama_sampler_init_dist(seed))
    return ch


def run(seed):
    """One group: returns tokens generated and the sum of their log-probs."""
    C.llama_memory_clear(mem, True)
    chains = [draw_chain(seed * 1000 + s) for s in range(G)]
    try:
        i = 0
        while i < n_prompt:
            batch.n_tokens = 0
            while i < n_prompt and batch.n_tokens < cp.n_batch:
                k = batch.n_tokens
                batch.token[k] = prompt[i]
                batch.pos[k] = i
                batch.n_seq_id[k] = G
                for s in range(G):
                    batch.seq_id[k][s] = s
                batch.logits[k] = i == n_prompt - 1
                batch.n_tokens += 1
                i += 1
            if C.llama_decode(ctx, batch) != 0:
                fail("llama_decode failed on the prompt")
        row = [batch.n_tokens - 1] * G
        live = [True] * G
        tokens, sum_lp = 0, 0.0
        pos = n_prompt
        for step in range(T):
            n = 0
            for s in range(G):
                if not live[s]:
                    continue
                tok = C.llama_sampler_sample(chains[s], ctx, row[s])
                logits = np.ctypeslib.as_array(C.llama_get_logits_ith(ctx, row[s]), shape=(n_vocab,))
                z = logits / args.temperature
                zmax = z.max()
                sum_lp += float(z[tok] - zmax - np.log(np.exp(z - zmax).sum()))
                tokens += 1
                if C.llama_vocab_is_eog(vocab, tok) or step == T - 1:
                    live[s] = False
                    continue
                batch.token[n] = tok
                batch.pos[n] = pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = s
                batch.logits[n] = True
                row[s] = n
                n += 1
            if n == 0:
                break
            batch.n_tokens = n
            if C.llama_decode(ctx, batch) != 0:
                fail("llama_decode failed")
            pos += 1
        return tokens, sum_lp
    finally:
        for ch in chains:
            C.llama_sampler_free(ch)


def out(**kv):
    sys.stdout.write(json.dumps(kv) + "\n")
    sys.stdout.flush()


out(ready=True, llama_cpp_python=llama_cpp.__version__, prompt_tokens=n_prompt, vocab=n_vocab,
    kv=args.kv, flash_attn=args.flash_attn, threads=args.threads,
    system_info=C.llama_print_system_info().decode(errors="replace").strip())
for line in sys.stdin:
    line = line.strip()
    if not line:
        break
    t0 = time.perf_counter()
    n, lp = run(int(line))
    out(tokens=n, seconds=time.perf_counter() - t0, sum_logprob=lp)
C.llama_batch_free(batch)
C.llama_free(ctx)
C.llama_model_free(model)
