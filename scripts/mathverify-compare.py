"""Compares confclip's math verifier with HuggingFace's Math-Verify (the
`math-verify` package) on the labelled verifier corpus (issue 39, part 2).

Run it with the interpreter of build/trl-venv, from the repository root:

  build/trl-venv/bin/python scripts/mathverify-compare.py --json out/mathverify.json

It prints Markdown to standard output:
  (a) agreement with the labels (both right, only ours right, only
      math-verify right, both wrong), overall and per category;
  (b) every case where exactly one side is right;
  (c) the time per case of each side and the ratio.

Our verdicts come from `confclip verify --verifier math --data IN --out OUT`,
the way verifiers' TestMathSuite scores each case: Options{LastNumber: true}
(the CLI's defaults), Options.Strict for "strict" cases, and NewTruncated for
"truncated" ones, which is New with Options.Strict set, so the CLI's
--strict expresses both.

Math-verify's verdict is verify(parse(GOLD), parse(completion)) with the
default extraction configs ([LatexExtractionConfig(), ExprExtractionConfig()]),
its default timeouts (parsing_timeout=5, timeout_seconds=5) and default
verify options. GOLD is the reference put in a LaTeX environment, "$ref$",
when it has none (README: "the latex must be placed in latex environment to
be parsable"); --gold raw passes the reference as it is. The other form is
run too and reported as totals. Math-verify runs in a child process that the
parent kills when a case runs past --hard-timeout (its own timeouts use
SIGALRM, which C code can ignore), so a hang cannot stall the run.

Our time per case comes from the Go benchmark BenchmarkMathCorpus
(verifiers/bench_test.go), which times the verifier over every case of the
corpus in one process.
"""

import argparse
import collections
import importlib.metadata
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time

CORPUS = "verifiers/testdata/math_cases.jsonl"
BENCH = "BenchmarkMathCorpus"


# ---------------------------------------------------------------- math-verify


def _worker(conn):
    """Child process: answers ("run", gold, completion) with
    (verdict, gold_parsed, pred_parsed, seconds, warnings, error)."""
    import logging
    import time as _time

    from math_verify import parse, verify

    seen = []

    class Grab(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage()[:200])

    logging.getLogger("math_verify").addHandler(Grab(level=logging.WARNING))
    logging.getLogger("math_verify").propagate = False
    while True:
        msg = conn.recv()
        if msg is None:
            return
        _, gold, completion = msg
        seen.clear()
        err = ""
        t0 = _time.perf_counter()
        try:
            g = parse(gold)
            p = parse(completion)
            ok = bool(verify(g, p))
        except BaseException as e:  # verify and parse catch their own errors
            g, p, ok, err = [], [], False, f"{type(e).__name__}: {e}"
        dt = _time.perf_counter() - t0
        conn.send((ok, [str(x) for x in g], [str(x) for x in p], dt, list(seen), err))


class MathVerify:
    """A math-verify child process with a hard per-case deadline."""

    def __init__(self, hard_timeout):
        self.hard = hard_timeout
        self.ctx = multiprocessing.get_context("fork")
        self.proc = None
        self.kills = 0

    def _start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def run(self, gold, completion):
        if self.proc is None:
            self._start()
        self.conn.send(("run", gold, completion))
        if self.conn.poll(self.hard):
            try:
                return self.conn.recv()
            except EOFError:
                err = "child died"
        else:
            err = f"hard timeout ({self.hard:g} s): child killed"
        self.kills += 1
        self.proc.kill()
        self.proc.join()
        self.proc = None
        return (False, [], [], float(self.hard), [], err)

    def close(self):
        if self.proc is not None:
            self.conn.send(None)
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()


_ENV_RE = re.compile(r"(?<!\\)\$|\\boxed|\\fbox|\\\[|\\\(")


def gold_form(reference, mode):
    """The gold string math-verify gets: "$ref$" for a reference in no LaTeX
    environment (mode "wrap"), the reference itself for mode "raw"."""
    if mode == "wrap" and not _ENV_RE.search(reference):
        return "$" + reference + "$"
    return reference


# ---------------------------------------------------------------- ours


def run_ours(confclip, cases):
    """Our verdicts from the CLI: two --data runs, one without --strict and
    one with it (strict and truncated cases)."""
    groups = {False: [], True: []}
    for i, c in enumerate(cases):
        groups[bool(c.get("strict") or c.get("truncated"))].append(i)
    verdicts = [None] * len(cases)
    commands, wall = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for strict, idx in groups.items():
            if not idx:
                continue
            name = "strict" if strict else "plain"
            inp, out = os.path.join(tmp, name + ".jsonl"), os.path.join(tmp, name + ".out.jsonl")
            with open(inp, "w") as f:
                for i in idx:
                    f.write(json.dumps({"answer": cases[i]["reference"], "completion": cases[i]["completion"]}) + "\n")
            cmd = [confclip, "verify", "--verifier", "math", "--data", inp, "--out", out]
            if strict:
                cmd.append("--strict")
            t0 = time.perf_counter()
            r = subprocess.run(["nice", "-n", "19"] + cmd, capture_output=True, text=True)
            wall += time.perf_counter() - t0
            if r.returncode != 0:
                sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr}")
            commands.append(" ".join(cmd).replace(tmp, "$TMP"))
            with open(out) as f:
                res = [json.loads(l) for l in f if l.strip()]
            if len(res) != len(idx):
                sys.exit(f"{' '.join(cmd)}: {len(res)} results for {len(idx)} lines")
            for i, r in zip(idx, res):
                verdicts[i] = r
    return verdicts, commands, wall


def run_go_bench():
    deps = subprocess.run(["go", "list", "-deps", "./verifiers"], capture_output=True, text=True, check=True).stdout
    llama = [d for d in deps.split() if "llama" in d]
    if llama:
        return {"error": f"./verifiers depends on {llama}; benchmark not run"}
    cmd = ["nice", "-n", "19", "go", "test", "-run", "^$", "-bench", BENCH, "-benchtime", "3x", "./verifiers"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = {"command": " ".join(cmd), "output": r.stdout.strip()}
    if r.returncode != 0:
        out["error"] = f"exit {r.returncode}: {r.stderr.strip()[-500:]}"
        return out
    for line in r.stdout.splitlines():
        if line.startswith(BENCH):
            f = line.split()
            for v, unit in zip(f[2::2], f[3::2]):
                out[unit] = float(v)
    if "ns/case" not in out:
        out["error"] = "no ns/case in the benchmark's output"
    return out


# ---------------------------------------------------------------- output


def cell(s, n=None):
    """A Markdown table cell: shortened, newlines shown as ⏎, pipes escaped,
    in a code span."""
    s = s.replace("\n", "⏎")
    if n is not None and len(s) > n:
        head = n * 2 // 3
        s = s[:head] + " … " + s[-(n - head - 3):]
    s = s.replace("|", "\\|")
    tick = "``" if "`" in s else "`"
    pad = " " if tick == "``" else ""
    return f"{tick}{pad}{s}{pad}{tick}" if s.strip() else "(empty)"


def verdict_word(b):
    return "correct" if b else "wrong"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=CORPUS, help="labelled corpus (JSONL)")
    ap.add_argument("--confclip", default="./bin/confclip", help="confclip binary")
    ap.add_argument("--json", help="write a JSON summary to this file")
    ap.add_argument("--gold", choices=["wrap", "raw"], default="wrap",
                    help='reference as gold: "$ref$" when in no LaTeX environment (wrap), or as it is (raw)')
    ap.add_argument("--passes", type=int, default=3, help="timing passes of math-verify (best is reported)")
    ap.add_argument("--hard-timeout", type=float, default=60, help="seconds before a math-verify case is killed")
    ap.add_argument("--no-bench", action="store_true", help="skip the Go benchmark")
    args = ap.parse_args()

    with open(args.data) as f:
        cases = [json.loads(l) for l in f if l.strip()]
    n = len(cases)
    mv_version = importlib.metadata.version("math-verify")
    l2s_version = importlib.metadata.version("latex2sympy2_extended")
    sympy_version = importlib.metadata.version("sympy")

    print(f"ours: {n} cases through confclip verify …", file=sys.stderr)
    ours, our_commands, our_cli_wall = run_ours(args.confclip, cases)
    ours_ok = [bool(r["correct"]) for r in ours]

    # math-verify: pass 1 gives the verdicts; every pass is timed.
    mv = MathVerify(args.hard_timeout)
    golds = [gold_form(c["reference"], args.gold) for c in cases]
    first, pass_totals, unstable, killed = [None] * n, [], 0, set()
    for p in range(args.passes):
        print(f"math-verify: pass {p + 1}/{args.passes} …", file=sys.stderr)
        total = 0.0
        for i, c in enumerate(cases):
            if p > 0 and i in killed:  # do not wait for a hang again
                total += args.hard_timeout
                continue
            r = mv.run(golds[i], c["completion"])
            total += r[3]
            if p == 0:
                first[i] = r
                if r[5].startswith("hard timeout") or r[5] == "child died":
                    killed.add(i)
            elif r[0] != first[i][0]:
                unstable += 1
        pass_totals.append(total)
    other_mode = "raw" if args.gold == "wrap" else "wrap"
    other_golds = [gold_form(c["reference"], other_mode) for c in cases]
    print(f"math-verify: gold form {other_mode!r} …", file=sys.stderr)
    other = [mv.run(g, c["completion"]) if g != golds[i] else first[i]
             for i, (g, c) in enumerate(zip(other_golds, cases))]
    mv.close()
    mv_ok = [r[0] for r in first]
    other_ok = [r[0] for r in other]

    bench = {"skipped": True} if args.no_bench else run_go_bench()

    # (a) agreement
    def tally(idx, mvv):
        t = collections.Counter()
        for i in idx:
            lab = cases[i]["correct"]
            o, m = ours_ok[i] == lab, mvv[i] == lab
            t["both right" if o and m else "only ours right" if o else "only math-verify right" if m else "both wrong"] += 1
        t["cases"] = len(idx)
        return t

    cats = sorted({c["category"] for c in cases})
    by_cat = {k: [i for i, c in enumerate(cases) if c["category"] == k] for k in cats}
    total = tally(range(n), mv_ok)
    per_cat = {k: tally(idx, mv_ok) for k, idx in by_cat.items()}
    other_total = tally(range(n), other_ok)
    cols = ["both right", "only ours right", "only math-verify right", "both wrong"]

    out = []
    w = out.append
    w(f"# confclip's math verifier vs math-verify {mv_version}\n")
    w(f"Corpus: `{args.data}`, {n} labelled cases, {len(cats)} categories. "
      f"math-verify {mv_version} (latex2sympy2_extended {l2s_version}, sympy {sympy_version}), Python {sys.version.split()[0]}.\n")
    w("**Ours**: " + "; ".join(f"`{c}`" for c in our_commands) +
      f". The {sum(1 for c in cases if c.get('strict') or c.get('truncated'))} strict and truncated cases go through "
      "`--strict`: TestMathSuite runs truncated cases through `NewTruncated`, which is `New` with `Options.Strict` "
      "set (verifiers/verifier.go), so the CLI expresses them exactly; the CLI's defaults are the test's "
      "`Options{LastNumber: true}` (2 s timeout, 64 KiB, rel. tol. 1e-6).\n")
    wrapped = sum(1 for c, g in zip(cases, golds) if g != c["reference"])
    w("**math-verify**: `verify(parse(gold), parse(completion))`, the README's usage, with every default: "
      "`parse(..., extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()], fallback_mode=\"first_match\", "
      "extraction_mode=\"any_match\", parsing_timeout=5)` and `verify(..., float_rounding=6, numeric_precision=15, "
      "strict=True, allow_set_relation_comp=False, timeout_seconds=5)`. "
      + (f"gold is the reference put in a LaTeX environment, `\"$\" + ref + \"$\"`, when it has none ({wrapped} of {n} "
         "references; the README: latex extraction needs a latex environment; bare `\\sqrt{2}` parses to `[]` and "
         "`2\\sqrt3` to `2`)."
         if args.gold == "wrap" else "gold is the reference as it is.")
      + f" It runs in a child process killed after {args.hard_timeout:g} s on a case (cases killed: {len(killed)}). "
      "math-verify has no strict/truncated mode; it gets the same call for every case.\n")

    w("## (a) Agreement with the labels\n")
    w("| category | cases | both right | only ours right | only math-verify right | both wrong | ours | math-verify |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|")

    def row(name, t):
        ours_acc = (t["both right"] + t["only ours right"]) / t["cases"]
        mv_acc = (t["both right"] + t["only math-verify right"]) / t["cases"]
        return (f"| {name} | {t['cases']} | " + " | ".join(str(t[c]) for c in cols) +
                f" | {100 * ours_acc:.1f}% | {100 * mv_acc:.1f}% |")

    w(row("**all**", total))
    for k in cats:
        w(row(k, per_cat[k]))
    w("")
    w(f"With the gold {'as it is' if other_mode == 'raw' else 'put in $…$'} instead (`--gold {other_mode}`): " +
      ", ".join(f"{c} {other_total[c]}" for c in cols) +
      f"; math-verify right on {other_total['both right'] + other_total['only math-verify right']} of {n}.\n")
    ours_vs_label = sum(1 for i in range(n) if ours_ok[i] != cases[i]["correct"])
    w(f"Our CLI verdicts that differ from the label: {ours_vs_label} (TestMathSuite requires 0).\n")

    # (b) disagreements
    dis = [i for i in range(n) if (ours_ok[i] == cases[i]["correct"]) != (mv_ok[i] == cases[i]["correct"])]
    w(f"## (b) Cases where exactly one side is right ({len(dis)})\n")
    w("Line = line of the corpus. `mv parsed` is math-verify's `parse(completion)` (first element); "
      "`ours extracted` is our CLI's `extracted`.\n")
    w("| line | category | reference | completion | label | ours | math-verify | right | ours extracted | mv parsed |")
    w("|---:|---|---|---|---|---|---|---|---|---|")
    dis_json = []
    for i in dis:
        c = cases[i]
        r = first[i]
        side = "ours" if ours_ok[i] == c["correct"] else "math-verify"
        flags = "".join(f" ({k})" for k in ("truncated", "strict") if c.get(k))
        parsed = r[2][0] if r[2] else "[]"
        w(f"| {i + 1} | {c['category']}{flags} | {cell(c['reference'], 40)} | {cell(c['completion'], 70)} | "
          f"{verdict_word(c['correct'])} | {verdict_word(ours_ok[i])} | {verdict_word(mv_ok[i])} | {side} | "
          f"{cell(ours[i].get('extracted') or '', 30)} | {cell(parsed, 30)}{' ' + r[5] if r[5] else ''} |")
        dis_json.append({"line": i + 1, "category": c["category"], "reference": c["reference"],
                         "completion": c["completion"], "label": c["correct"], "ours": ours_ok[i],
                         "math_verify": mv_ok[i], "right": side, "ours_extracted": ours[i].get("extracted"),
                         "ours_reason": ours[i].get("reason"), "mv_gold_parsed": r[1], "mv_pred_parsed": r[2],
                         "mv_error": r[5], "mv_warnings": r[4], "truncated": bool(c.get("truncated")),
                         "strict": bool(c.get("strict"))})
    dis_cats = collections.Counter((cases[i]["category"], "ours" if ours_ok[i] == cases[i]["correct"] else "math-verify")
                                   for i in dis)
    w("")

    # (c) speed
    best = min(pass_totals)
    mv_per = best / n
    warn_cases = sum(1 for r in first if r[4])
    w("## (c) Speed\n")
    w(f"math-verify, in-process (`time.perf_counter()` around `parse(gold)`, `parse(completion)` and `verify`, summed "
      f"over the {n} cases, best of {args.passes} passes: " +
      ", ".join(f"{t:.2f} s" for t in pass_totals) + f"): **{1e3 * mv_per:.3f} ms/case**. "
      f"Verdicts that changed between passes: {unstable}. Cases with a math-verify warning (e.g. its own timeout): "
      f"{warn_cases}.\n")
    if "ns/case" in bench:
        ours_per = bench["ns/case"] * 1e-9
        w(f"ours, `{bench['command']}` ({BENCH}: the math verifier, `Options{{LastNumber: true}}`, over every case of "
          f"the corpus, one goroutine): **{1e3 * ours_per:.4f} ms/case** ({bench['ns/case']:.0f} ns/case"
          + (f", CPU {bench['cpu-ns/case']:.0f} ns/case" if "cpu-ns/case" in bench else "") + ").\n")
        w(f"**Ratio: math-verify takes {mv_per / ours_per:.0f}× as long per case as ours.**\n")
        w("```\n" + bench["output"] + "\n```\n")
    else:
        ours_per = None
        w(f"ours: Go benchmark not available: {bench.get('error', 'skipped')}.\n")
    w(f"For reference only: the two `confclip verify --data` runs above took {our_cli_wall:.2f} s wall in all "
      "(process start, reading and writing files included).\n")
    if killed:
        w(f"Killed cases (lines {sorted(i + 1 for i in killed)}) count {args.hard_timeout:g} s each in every pass.\n")

    print("\n".join(out))

    if args.json:
        summary = {
            "corpus": args.data, "cases": n,
            "versions": {"math-verify": mv_version, "latex2sympy2_extended": l2s_version, "sympy": sympy_version,
                         "python": sys.version.split()[0]},
            "ours_commands": our_commands,
            "math_verify_call": "verify(parse(gold), parse(completion)), default extraction configs and options",
            "gold": args.gold, "golds_wrapped": wrapped,
            "agreement": {"all": {k: total[k] for k in ["cases"] + cols},
                          "per_category": {k: {c: per_cat[k][c] for c in ["cases"] + cols} for k in cats},
                          f"all_gold_{other_mode}": {k: other_total[k] for k in ["cases"] + cols}},
            "ours_differ_from_label": ours_vs_label,
            "disagreements": dis_json,
            "disagreements_per_category": [{"category": k, "right": s, "count": v} for (k, s), v in sorted(dis_cats.items())],
            "speed": {"math_verify_pass_seconds": pass_totals, "math_verify_s_per_case": mv_per,
                      "ours_s_per_case": ours_per, "ratio": (mv_per / ours_per) if ours_per else None,
                      "go_bench": bench, "ours_cli_wall_seconds": our_cli_wall,
                      "math_verify_unstable_verdicts": unstable, "math_verify_cases_with_warnings": warn_cases,
                      "math_verify_killed": sorted(i + 1 for i in killed)},
        }
        d = os.path.dirname(args.json)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
