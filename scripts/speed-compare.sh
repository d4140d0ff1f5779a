#!/usr/bin/env bash
# scripts/speed-compare.sh OLD_CHECKOUT NEW_CHECKOUT [ROUNDS]: train's
# BenchmarkSpeedTable (docs/speed.md's table by weight type) from two
# checkouts, each built (make), run alternately ROUNDS times (default 2) in
# one session, and the best of each side's runs per cell compared: the
# table of NEW / OLD ratios. Used for a llama.cpp bump (docs/llama-bump.md):
# OLD is a checkout of the commit before it. Each side's models are its own
# (build/models, quantized by its own llama.cpp). OLD_MAKE and NEW_MAKE add
# arguments to a side's make: OLD_MAKE=LLAMA_DROP=cpu measures what the CPU
# patches are worth (both checkouts at one commit).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/speed-compare.sh OLD_CHECKOUT NEW_CHECKOUT [ROUNDS]" >&2; exit 2; }
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd) rounds=${3:-2}
out=$(mktemp -d "${TMPDIR:-/tmp}/speed-compare.XXXXXX")
for side in old new; do
  dir=${!side}
  mk=${side^^}_MAKE; mk=${!mk:-}
  # shellcheck disable=SC2086 # make arguments, split on purpose
  stamp=$(cd "$dir" && make -s $mk bin/confclip >/dev/null && make -n $mk test 2>/dev/null | grep -o 'BuildStamp=[0-9a-f]*' | head -1)
  (cd "$dir" && go test -c -ldflags "-X github.com/confclip/confclip/llama.$stamp" -o "$out/$side.test" ./train)
done
for r in $(seq "$rounds"); do
  for side in old new; do
    echo "speed-compare: round $r, $side" >&2
    (cd "${!side}/train" && "$out/$side.test" -test.run '^$' -test.bench SpeedTable -test.benchtime 1x) >"$out/$side.$r.txt" 2>&1
  done
done
# Each table row: | weights | cells... |; best (largest) of each side's runs.
python3 - "$out" "$rounds" <<'PY'
import sys, re, glob
out, rounds = sys.argv[1], int(sys.argv[2])
def tables(side):
    best, header = {}, None
    for f in sorted(glob.glob(f"{out}/{side}.*.txt")):
        for line in open(f):
            if line.startswith("| weights"):
                header = [c.strip() for c in line.strip().strip("|").split("|")]
            elif line.startswith("| ") and not line.startswith("|---") and header:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                row = best.setdefault(cells[0], {})
                for h, c in zip(header[1:], cells[1:]):
                    try:
                        v = float(c)
                    except ValueError:
                        continue
                    row[h] = max(row.get(h, 0), v)
    return header, best
h, old = tables("old")
_, new = tables("new")
cols = [c for c in h[1:] if "/" not in c and "step/forward" not in c]
print(f"NEW / OLD, best of {rounds} runs each, tokens/s (old -> new)\n")
print("| weights | " + " | ".join(cols) + " |")
print("|---|" + "---:|" * len(cols))
for w in old:
    cells = []
    for c in cols:
        o, n = old[w].get(c), new.get(w, {}).get(c)
        cells.append(f"{n/o:.2f} ({o:.0f} -> {n:.0f})" if o and n else "-")
    print(f"| {w} | " + " | ".join(cells) + " |")
PY
echo "speed-compare: runs kept in $out" >&2
