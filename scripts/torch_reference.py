#!/usr/bin/python3
"""The PyTorch side of make bench's comparison (train's BenchmarkAgainstPyTorch).

A plain torch.nn llama with the shapes of a GGUF model (RMSNorm, rotary
embeddings, grouped-query attention, SwiGLU, F32 weights, random), with LoRA
adapters of rank 8 on all seven projection matrices, timed on the work
confclip does with the same shapes:

  forward    teacher forcing: SEQS sequences of PROMPT + COMPLETION tokens
             in one pass, no gradient, the log-probabilities of the
             completion tokens (logits only at those positions)
  train      a policy-gradient step: forward and backward through the
             adapters (the base frozen) for the same sequences, PER_PASS
             sequences a pass, the loss -advantage * mean log-prob per
             sequence, then AdamW on the adapters
  generate   GROUP sequences of GEN tokens after a shared prompt with a KV
             cache, each token drawn from the full softmax (temperature 1)
             and its log-probability kept

It prints one JSON object per line: {"what": ..., "threads": T,
"tokens_per_s": best of --reps}, after a first line {"what": "blas", ...}
that says which BLAS the products run on: torch's own BLAS_INFO, the BLAS
library the process loaded (from /proc/self/maps), OpenBLAS's core type
(openblas_get_corename) when that is the one, torch's CPU capability, and the
GFLOP/s of a 768 x 768 x 768 F32 product at --threads (best of 20): an anchor
that runs a generic or reference BLAS proves nothing. Tokens are all the sequences' positions for
forward and train (as the Go side counts them), generated tokens for
generate. Plain PyTorch on purpose: what a TRL user runs on a CPU.
"""

import argparse
import ctypes
import json
import math
import os
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Module):
    def __init__(self, n_in, n_out, rank, alpha):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) * 0.02, requires_grad=False)
        self.a = nn.Parameter(torch.randn(rank, n_in) * (1.0 / math.sqrt(n_in)))
        self.b = nn.Parameter(torch.zeros(n_out, rank))
        self.scale = alpha / rank

    def forward(self, x):
        return F.linear(x, self.weight) + F.linear(F.linear(x, self.a), self.b) * self.scale


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, pos, theta=10000.0):
    # x: (batch, heads, seq, head_dim); pos: (seq,)
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


class Block(nn.Module):
    def __init__(self, embd, heads, heads_kv, ff, rank, alpha):
        super().__init__()
        self.heads, self.heads_kv, self.hd = heads, heads_kv, embd // heads
        self.attn_norm, self.ffn_norm = RMSNorm(embd), RMSNorm(embd)
        self.q = LoRALinear(embd, embd, rank, alpha)
        self.k = LoRALinear(embd, heads_kv * self.hd, rank, alpha)
        self.v = LoRALinear(embd, heads_kv * self.hd, rank, alpha)
        self.o = LoRALinear(embd, embd, rank, alpha)
        self.gate = LoRALinear(embd, ff, rank, alpha)
        self.up = LoRALinear(embd, ff, rank, alpha)
        self.down = LoRALinear(ff, embd, rank, alpha)

    def forward(self, x, pos, cache=None):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.heads_kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.heads_kv, self.hd).transpose(1, 2)
        q, k = rope(q, pos), rope(k, pos)
        if cache is not None:
            if cache.get("k") is not None:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        rep = self.heads // self.heads_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        # attention written out: Debian's torch 1.13 has no
        # scaled_dot_product_attention; a causal mask when the queries are
        # the keys' positions (no cache or a prompt)
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        if t > 1:
            s = s + torch.full((t, k.shape[2]), float("-inf")).triu(k.shape[2] - t + 1)
        a = torch.matmul(torch.softmax(s, dim=-1), v)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab, embd, layers, heads, heads_kv, ff, rank=8, alpha=16.0):
        super().__init__()
        self.emb = nn.Parameter(torch.randn(vocab, embd) * 0.02, requires_grad=False)
        self.blocks = nn.ModuleList([Block(embd, heads, heads_kv, ff, rank, alpha) for _ in range(layers)])
        self.norm = RMSNorm(embd)
        self.out = nn.Parameter(torch.randn(vocab, embd) * 0.02, requires_grad=False)

    def hidden(self, toks, pos, caches=None):
        x = F.embedding(toks, self.emb)
        for i, blk in enumerate(self.blocks):
            x = blk(x, pos, None if caches is None else caches[i])
        return self.norm(x)

    def completion_logprobs(self, toks, n_prompt):
        """Log-probs of toks[:, n_prompt:] given what precedes them."""
        t = toks.shape[1]
        h = self.hidden(toks, torch.arange(t))
        h = h[:, n_prompt - 1 : t - 1]  # positions whose next token is a completion token
        logits = F.linear(h, self.out)
        lp = F.log_softmax(logits, dim=-1)
        return lp.gather(-1, toks[:, n_prompt:, None]).squeeze(-1)


def blas_info(threads):
    """Which BLAS torch's products run on, and how fast a 768^3 product is."""
    cfg = torch.__config__.show()
    info = {"torch": torch.__version__, "threads": threads}
    for key in ("BLAS_INFO", "USE_MKL", "USE_MKLDNN", "USE_OPENMP"):
        m = re.search(r"\b" + key + r"=([^,\s]+)", cfg)
        if m:
            info[key.lower()] = m.group(1)
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                name = os.path.basename(path)
                # numpy's own OpenBLAS and CUDA's cuBLAS are not torch's CPU BLAS
                if any(k in name for k in ("blas", "mkl", "lapack", "dnnl")) and "numpy" not in path and "cublas" not in name:
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    info["libraries"] = sorted(libs)
    for lib in libs:
        if "openblas" in os.path.basename(lib):
            try:
                ob = ctypes.CDLL(lib)
                ob.openblas_get_corename.restype = ctypes.c_char_p
                info["openblas_core"] = ob.openblas_get_corename().decode()
                ob.openblas_get_config.restype = ctypes.c_char_p
                info["openblas_config"] = ob.openblas_get_config().decode()
            except (OSError, AttributeError):
                pass
    if not any("openblas" in l or "mkl" in l for l in libs) and "mkl" not in info.get("blas_info", ""):
        info["reference_blas"] = True  # netlib's libblas.so.3: unoptimised
    try:
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # torch < 2.0
        pass
    a, b = torch.randn(768, 768), torch.randn(768, 768)
    best = float("inf")
    for _ in range(21):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    info["gflops_768"] = round(2 * 768 ** 3 / best / 1e9, 1)
    return info


def best_rate(f, tokens, reps):
    f()  # warm up
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = max(best, tokens / (time.perf_counter() - t0))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--embd", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--heads-kv", type=int, required=True)
    ap.add_argument("--ff", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--completion", type=int, default=48)
    ap.add_argument("--per-pass", type=int, action="append", help="sequences per training pass (repeatable; default 1 and 8)")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--what", default="forward,train,generate", help="comma-separated: blas, forward, train, generate")
    a = ap.parse_args()

    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    print(json.dumps(dict(what="blas", **blas_info(a.threads))), flush=True)
    if a.what == "blas":
        return 0
    m = Llama(a.vocab, a.embd, a.layers, a.heads, a.heads_kv, a.ff)
    n = a.prompt + a.completion
    toks = torch.randint(3, a.vocab, (a.seqs, n))
    toks[:, 0] = 1
    adv = torch.rand(a.seqs) - 0.5
    what = a.what.split(",")

    def emit(kind, rate, **kw):
        print(json.dumps(dict(what=kind, threads=a.threads, tokens_per_s=round(rate, 1), **kw)), flush=True)

    if "forward" in what:
        def forward():
            with torch.no_grad():
                m.completion_logprobs(toks, a.prompt)
        emit("forward", best_rate(forward, a.seqs * n, a.reps))

    if "train" in what:
        params = [p for p in m.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4)
        for per in a.per_pass or [1, 8]:
            def step():
                opt.zero_grad(set_to_none=True)
                for i in range(0, a.seqs, per):
                    lp = m.completion_logprobs(toks[i : i + per], a.prompt)
                    loss = -(adv[i : i + per] * lp.mean(-1)).sum()
                    loss.backward()
                opt.step()
            emit("train", best_rate(step, a.seqs * n, a.reps), per_pass=per)

    if "generate" in what:
        prompt = toks[:1, :8].repeat(a.group, 1)

        def generate():
            with torch.no_grad():
                caches = [dict() for _ in m.blocks]
                h = m.hidden(prompt, torch.arange(prompt.shape[1]), caches)[:, -1:]
                pos = prompt.shape[1]
                total = 0.0
                for _ in range(a.gen):
                    lp = F.log_softmax(F.linear(h[:, -1], m.out), dim=-1)
                    nxt = torch.multinomial(lp.exp(), 1)
                    total += lp.gather(-1, nxt).sum().item()
                    h = m.hidden(nxt, torch.arange(pos, pos + 1), caches)
                    pos += 1
                return total
        emit("generate", best_rate(generate, a.group * a.gen, a.reps))


if __name__ == "__main__":
    sys.exit(main())
