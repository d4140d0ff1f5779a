#!/usr/bin/env bash
# The prepared GPU check (docs/gpu.md, "CUDA"). It builds nothing: `make
# GGML_CUDA=ON PORTABLE=1 gpu-bundle` prepares, on a machine with the
# toolkit, a bundle in BUILD/gpu-check (packed as BUILD/gpu-check.tar.xz to
# carry): bin/confclip-cuda, the GPU tests of ./llama ./rollout ./train
# compiled with `go test -c` against the same build (tests/*.test),
# stories260K (shared/models) and the demo's pre-trained model and data
# (demo/). On a machine with one GPU this script then runs, each part under
# `timeout` and all of it within GPU_CHECK_BUDGET seconds (460: 8 minutes with
# the unpacking), and prints one Markdown table:
#   the devices (nvidia-smi, confclip version);
#   the GPU tests, every layer on the device against the CPU in one process
#     (CONFCLIP_REQUIRE_GPU=1): logits, greedy parity, rollouts against
#     teacher forcing, the backward ops, a training step's gradient, with
#     their bounds;
#   the demo's RL part (both arms, GPU_CHECK_DEMO_STEPS steps) on the GPU;
#   BenchmarkGPURollout and BenchmarkGPUTrainStep: tokens/s, GPU against CPU
#     (bench-100m, 400 MB in F32, is generated there with gen-model: too
#     large to carry);
#   the same demo steps on the CPU, to compare.
# Without a GPU it prints the plan and "NOT RUN", and exits 0.
#
#   scripts/gpu-check.sh               the check (CUDA); the plan without a GPU
#   scripts/gpu-check.sh --dry-run     the plan only
#   scripts/gpu-check.sh --pack DIR    (make gpu-bundle) fill the bundle DIR
#                                      that holds bin/ and tests/ with the
#                                      models and demo files, and pack it
#   BACKEND=VULKAN scripts/gpu-check.sh  the same with a Vulkan bundle
#                                      (make GGML_VULKAN=ON gpu-bundle) on a
#                                      real GPU
# Environment: GPU_CHECK_BUNDLE (the bundle folder or .tar.xz), GPU_CHECK_BUDGET
# (seconds), GPU_CHECK_DEMO_STEPS (8), GPU_CHECK_STEPS (a comma-separated
# subset of the steps), GPU_CHECK_LOG (the logs' folder: $OUT where set, else a
# new one in /tmp), GPU_CHECK_WORK (scratch: the 400 MB model, the demo runs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

mode=check
case "${1:-}" in
  --dry-run) mode=plan ;;
  --pack) mode=pack; pack_dir=${2:?"--pack DIR"} ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "gpu-check: unknown argument $1 (--dry-run, --pack DIR, --help)" >&2; exit 2 ;;
esac

backend=${BACKEND:-CUDA}
case "$backend" in
  CUDA) b=cuda; devname=CUDA ;;
  VULKAN) b=vulkan; devname=Vulkan ;;
  *) echo "gpu-check: BACKEND=$backend: want CUDA or VULKAN" >&2; exit 2 ;;
esac
BUDGET=${GPU_CHECK_BUDGET:-460}
DEMO_STEPS=${GPU_CHECK_DEMO_STEPS:-8}
RUN='TestDevices|TestGPU'
PKGS=(llama rollout train)

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# ---------------------------------------------------------------- --pack DIR
# DIR holds bin/confclip-BACKEND and tests/PKG.test (the Makefile's recipe
# builds them); this adds the files they read, a manifest, and DIR.tar.xz.
if [ "$mode" = pack ]; then
  B=${pack_dir%/}
  bin=$(ls "$B"/bin/confclip-cuda "$B"/bin/confclip-vulkan 2>/dev/null | head -1)
  [ -n "$bin" ] || { echo "gpu-check --pack: no $B/bin/confclip-cuda or confclip-vulkan" >&2; exit 1; }
  for p in "${PKGS[@]}"; do
    [ -x "$B/tests/$p.test" ] || { echo "gpu-check --pack: $B/tests/$p.test is missing" >&2; exit 1; }
  done
  stories=$ROOT/../shared/models/stories260K.gguf
  demo=$ROOT/build/demo
  for f in "$stories" "$demo/word.gguf" "$demo/data/train.jsonl" "$demo/data/eval.jsonl"; do
    [ -f "$f" ] || { echo "gpu-check --pack: $f is missing (stories260K: ../shared/models; the demo's files: make demo)" >&2; exit 1; }
  done
  # Debug information is most of a Go binary's size; Go's own tables (panics'
  # stack traces) and the CUDA kernels stay.
  if command -v strip >/dev/null; then strip "$bin" "$B"/tests/*.test || exit 1; fi
  # lib/ is where a library the GPU machine lacks would go; OpenMP's runtime
  # is linked in statically and CUDA's libraries are too large to carry.
  mkdir -p "$B/shared/models" "$B/demo/build/demo/data" "$B/lib" || exit 1
  cp -f "$stories" "$B/shared/models/" &&
    cp -f "$demo/word.gguf" "$B/demo/build/demo/" &&
    cp -f "$demo/data/train.jsonl" "$demo/data/eval.jsonl" "$B/demo/build/demo/data/" &&
    cp -f examples/demo.toml "$B/demo/demo.toml" || exit 1
  {
    echo "confclip GPU check bundle, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "built on: $(uname -m), $(ldd --version 2>/dev/null | head -1)"
    echo "libraries the binary needs (readelf -d):"
    readelf -d "$bin" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/  \1/p'
    echo "confclip version here:"
    timeout 30 "$bin" version 2>&1 | sed 's/^/  /'
    echo "files:"
    (cd "$B" && find . -type f ! -name MANIFEST | sort | xargs sha256sum | sed 's/^/  /')
  } >"$B/MANIFEST"
  # One xz stream with a dictionary larger than the largest binary: the four
  # binaries share most of their bytes (ggml, its CUDA kernels, Go's
  # runtime), and a match as far back as one binary's length finds them.
  big=$(find "$B" -type f -printf '%s\n' | sort -n | tail -1)
  dict=$(((big >> 20) + 8)); [ "$dict" -ge 64 ] || dict=64; [ "$dict" -le 1536 ] || dict=1536
  echo "gpu-check --pack: packing $B ($(du -sh "$B" | cut -f1)) with xz, dictionary $dict MiB" >&2
  tar -C "$B" -cf - MANIFEST bin tests lib shared demo | xz -T1 --lzma2="preset=6,dict=${dict}MiB" >"$B.tar.xz.tmp" &&
    mv "$B.tar.xz.tmp" "$B.tar.xz" || { rm -f "$B.tar.xz.tmp"; exit 1; }
  size=$(stat -c %s "$B.tar.xz")
  # The device tool carries at most 64 MiB: the tracked tree and this.
  tree=$(git ls-files -z -c -o --exclude-standard 2>/dev/null | xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
  limit=$((64 * 1048576 - tree - 1048576))
  echo "bundle: $B.tar.xz, $(mib "$size") MiB ($(mib "$tree") MiB of tracked files travel with it; limit $(mib "$limit") MiB)"
  echo "on the GPU machine: bash scripts/gpu-check.sh   carry: [\"$B.tar.xz\"]"
  if [ "$size" -gt "$limit" ]; then
    echo "gpu-check --pack: $B.tar.xz is too large to carry: build for one architecture (CMAKE_CUDA_ARCHITECTURES=90-real) or prune the library (GPU_BUNDLE_SM=90)" >&2
    exit 1
  fi
  exit 0
fi

# ---------------------------------------------------------------- the bundle
# The first of: GPU_CHECK_BUNDLE; the portable build's; the native build's;
# each a folder, or its .tar.xz (unpacked beside it before the first step).
BUNDLE='' TAR=''
if [ -n "${GPU_CHECK_BUNDLE:-}" ]; then
  case "$GPU_CHECK_BUNDLE" in
    *.tar.xz) TAR=$GPU_CHECK_BUNDLE; BUNDLE=${TAR%.tar.xz} ;;
    *) BUNDLE=${GPU_CHECK_BUNDLE%/}; [ -f "$BUNDLE.tar.xz" ] && TAR=$BUNDLE.tar.xz ;;
  esac
else
  for d in "build-$b-portable/gpu-check" "build-$b/gpu-check"; do
    if [ -d "$d/bin" ] || [ -f "$d.tar.xz" ]; then
      BUNDLE=$d; [ -f "$d.tar.xz" ] && TAR=$d.tar.xz; break
    fi
  done
  [ -n "$BUNDLE" ] || BUNDLE=build-$b-portable/gpu-check
fi
case "$BUNDLE" in /*) ;; *) BUNDLE=$ROOT/$BUNDLE ;; esac
case "$TAR" in /* | "") ;; *) TAR=$ROOT/$TAR ;; esac
BIN=$BUNDLE/bin/confclip-$b
T=$BUNDLE/tests
unpacked() { [ -x "$BIN" ] && [ -x "$T/train.test" ]; }
if unpacked; then
  bundle_state="$BUNDLE"
elif [ -n "$TAR" ]; then
  bundle_state="$TAR ($(mib "$(stat -c %s "$TAR")") MiB; unpacked into $BUNDLE first)"
else
  bundle_state="MISSING: $BUNDLE (make GGML_$backend=ON PORTABLE=1 gpu-bundle on a machine with the toolkit; carry its .tar.xz)"
fi
W=${GPU_CHECK_WORK:-/tmp/gpu-check-work.$$}

# ---------------------------------------------------------------- the steps
# Each step is a name, a time limit (seconds), what it measures, and the
# shell text it runs; the plan prints that same text.
STEPS=(devices tests-llama tests-rollout tests-train demo-gpu bench-model bench-rollout bench-train demo-cpu)
declare -A LIMIT=([devices]=30 [tests-llama]=75 [tests-rollout]=60 [tests-train]=75 [demo-gpu]=90
  [bench-model]=45 [bench-rollout]=90 [bench-train]=120 [demo-cpu]=75)
declare -A WHAT=(
  [devices]="the GPUs, and the devices the bundle's binary finds"
  [tests-llama]="TestDevices; logits against the CPU (no adapter, LoRA; gpu_layers 0 puts nothing on the device); stories260K greedy parity; the backward pass's ops against the CPU"
  [tests-rollout]="greedy rollouts token-identical to the CPU (tiny, stories260K); sampled rollouts against teacher forcing"
  [tests-train]="a training step's gradient against the CPU (LoRA, full, entropy term; the ops left on the CPU); a positive advantage raises the log-prob"
  [demo-gpu]="the demo's RL part (examples/demo.toml, both arms) with every layer on the GPU, $DEMO_STEPS steps"
  [bench-model]="bench-100m (modelgen's benchmark model, 400 MB F32) for the benchmarks"
  [bench-rollout]="BenchmarkGPURollout: greedy G=8 rollouts, tokens/s GPU against CPU (bench-100m, stories260K)"
  [bench-train]="BenchmarkGPUTrainStep: a LoRA step on 16x64 tokens, tokens/s GPU against CPU (tiny, bench-100m)"
  [demo-cpu]="the same demo steps on the CPU (gpu_layers 0), to compare"
)
declare -A LOGF=([devices]=devices [tests-llama]=llama [tests-rollout]=rollout [tests-train]=train
  [demo-gpu]=demo [bench-model]=bench [bench-rollout]=bench [bench-train]=bench [demo-cpu]=demo)
DEV=${devname}0 # the first GPU device, read from `version` in the devices step

q() { printf '%q' "$1"; }
cmd_text() { # STEP LIMIT
  local s=$1 lim=$2 to=$(($2 > 10 ? $2 - 5 : $2))
  case "$s" in
    devices)
      echo "{ command -v nvidia-smi >/dev/null && nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader; }; $(q "$BIN") version" ;;
    tests-*)
      local p=${s#tests-}
      echo "cd $(q "$W/pkg/$p") && CONFCLIP_REQUIRE_GPU=1 $(q "$T/$p.test") -test.v -test.count=1 -test.timeout=${to}s -test.run '$RUN'" ;;
    bench-model)
      local out=$W/pkg/build/models/bench-100m.gguf
      echo "[ -s $(q "$out") ] || $(q "$BIN") gen-model --size bench --seed 1 --out $(q "$out")" ;;
    bench-*)
      local p=${s#bench-}
      [ "$p" = train ] || p=rollout
      echo "cd $(q "$W/pkg/$p") && CONFCLIP_REQUIRE_GPU=1 $(q "$T/$p.test") -test.run '^\$' -test.bench BenchmarkGPU -test.benchtime 3x -test.v -test.timeout=${to}s" ;;
    demo-gpu | demo-cpu)
      local flags="--gpu-layers=-1 --device $DEV" out=$W/demo-gpu
      [ "$s" = demo-cpu ] && flags="--gpu-layers=0" out=$W/demo-cpu
      echo "rm -rf $(q "$out") && cd $(q "$BUNDLE/demo") && $(q "$BIN") experiment demo.toml $flags --steps $DEMO_STEPS --out $(q "$out")" ;;
  esac
}

# GPU_CHECK_STEPS picks steps (devices always runs: the others need its device name).
wanted() { [ "$1" = devices ] || [ -z "${GPU_CHECK_STEPS:-}" ] || [[ ",$GPU_CHECK_STEPS," == *",$1,"* ]]; }

print_plan() {
  echo "gpu-check plan: backend $backend, one GPU, at most $BUDGET s in all (each step's limit is cut to what is left; under 10 s left, the step is skipped)"
  echo "bundle: $bundle_state"
  echo "below, B=${BUNDLE#"$ROOT"/} (the bundle), W=$W (scratch); logs in ${GPU_CHECK_LOG:-${OUT:-a new folder in /tmp}}"
  echo
  echo "0. setup: unpack the bundle if only its .tar.xz is there (60 s: xz -dc | tar -x, or python3's tarfile);"
  echo "   ldd the binaries (30 s): a library not found (libcudart, libcublas, libcublasLt ...) is looked for in"
  echo "   /usr/local/cuda*/lib64, /usr/local/nvidia/lib64, python3's site-packages/nvidia/*/lib and \$B/lib, and its folder"
  echo "   added to LD_LIBRARY_PATH; one still missing: FAIL, nothing run. Then the folders the tests run in"
  echo "   (they read ../../shared/models and ../build/models from there):"
  echo "   \$ mkdir -p \$W/pkg/{llama,rollout,train} \$W/pkg/build/models && ln -sfn \$B/shared \$W/shared"
  local i=0 s t
  for s in "${STEPS[@]}"; do
    i=$((i + 1))
    wanted "$s" || { echo "$i. $s: left out (GPU_CHECK_STEPS)"; continue; }
    echo "$i. $s (${LIMIT[$s]} s): ${WHAT[$s]}"
    t=$(cmd_text "$s" "${LIMIT[$s]}")
    t=${t//"$BUNDLE"/\$B}
    echo "   \$ ${t//"$W"/\$W}"
  done
  echo
  echo "Then one Markdown table: each step's status and time, every measured line with its bound"
  echo "(the reduced-precision bounds on CUDA, whose F32 products run in TF32, and on Vulkan with F16:"
  echo "1e-2 logits, 5e-3 gradients, 3e-3 one op; F32's 1e-4 and 1e-5 on Vulkan with GGML_VK_DISABLE_F16),"
  echo "the benchmarks' tokens/s, the demo's held-out accuracy and step times."
}

# ---------------------------------------------------------------- a GPU?
gpu_reason=''
if [ "$mode" = check ]; then
  if ! command -v nvidia-smi >/dev/null; then
    gpu_reason="nvidia-smi not found"
  elif ! smi=$(timeout 30 nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$smi"; then
    gpu_reason="nvidia-smi lists none: $(head -1 <<<"$smi")"
  fi
  # Vulkan also runs on GPUs of other makers: the bundle's binary says.
  if [ -n "$gpu_reason" ] && [ "$backend" = VULKAN ] && unpacked &&
    timeout 60 "$BIN" version 2>/dev/null | grep '(gpu, Vulkan backend)' >/dev/null; then
    gpu_reason=''
  fi
fi
if [ "$mode" = plan ] || [ -n "$gpu_reason" ]; then
  print_plan
  echo
  if [ "$mode" = plan ]; then
    echo "gpu-check: NOT RUN (--dry-run)"
  elif [ "$backend" = VULKAN ]; then
    echo "gpu-check: NOT RUN (no GPU: $gpu_reason, and no Vulkan GPU device found)"
  else
    echo "gpu-check: NOT RUN (no NVIDIA GPU: $gpu_reason)"
  fi
  exit 0
fi

# ---------------------------------------------------------------- the check
START=0 # the budget counts from the script's start (bash's SECONDS)
LOG=${GPU_CHECK_LOG:-${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}}
mkdir -p "$LOG" "$W/out" || exit 1
echo "gpu-check: logs in $LOG, scratch in $W" >&2
declare -A STATUS=() SECS=() EFF=()
# reduced precision (testutil.PrecisionBound): CUDA's F32 products run in
# TF32; Vulkan's in F16 unless GGML_VK_DISABLE_F16 is set
F16=0
[ "$backend" = CUDA ] && F16=1
[ "$backend" = VULKAN ] && [ -z "${GGML_VK_DISABLE_F16:-}" ] && F16=1

setup() {
  if ! unpacked; then
    [ -n "$TAR" ] || { echo "no bundle: $bundle_state"; return 1; }
    echo "unpacking $TAR into $BUNDLE"
    mkdir -p "$BUNDLE" || return 1
    if command -v xz >/dev/null; then
      timeout -k 5 60 sh -c 'xz -dc "$1" | tar -C "$2" -xf -' sh "$TAR" "$BUNDLE" || return 1
    else
      timeout -k 5 60 python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
t.extractall(sys.argv[2], **({"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}))' "$TAR" "$BUNDLE" || return 1
    fi
    unpacked || { echo "$TAR holds no bin/confclip-$b and tests/"; return 1; }
  fi
  sed -n '1,2p' "$BUNDLE/MANIFEST" 2>/dev/null
  # The libraries the binaries were linked with (cudart, cublas, cublasLt:
  # by soname, so of one CUDA major version), looked for where CUDA's
  # toolkit and Python's CUDA packages keep them.
  local missing dirs d lib found
  missing=$(timeout 30 ldd "$BIN" "$T"/*.test 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2046 # the globs are meant to expand
    dirs=$(ls -d /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib /usr/local/nvidia/lib64 \
      $(timeout 30 python3 -c 'import site; print(*site.getsitepackages())' 2>/dev/null | tr ' ' '\n' | sed 's|$|/nvidia/*/lib|') \
      "$BUNDLE/lib" 2>/dev/null)
    for lib in $missing; do
      found=''
      for d in $dirs; do
        if [ -e "$d/$lib" ]; then found=$d; break; fi
      done
      if [ -n "$found" ]; then
        echo "$lib: $found"
        case ":${LD_LIBRARY_PATH:-}:" in *":$found:"*) ;; *) export LD_LIBRARY_PATH=$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
      else
        echo "$lib: not found; this machine has: $(for d in $dirs; do ls "$d" 2>/dev/null | grep -E "^${lib%%.so*}\.so\.[0-9]+$"; done | sort -u | tr '\n' ' ')"
      fi
    done
    missing=$(timeout 30 ldd "$BIN" "$T"/*.test 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
    if [ -n "$missing" ]; then
      echo "libraries not found: $(echo $missing) (the bundle was linked against another CUDA than this machine's: MANIFEST lists what it needs)"
      return 1
    fi
  fi
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  mkdir -p "$W/pkg/llama" "$W/pkg/rollout" "$W/pkg/train" "$W/pkg/build/models" &&
    ln -sfn "$BUNDLE/shared" "$W/shared"
}

echo "gpu-check: setup ..." >&2
t0=$SECONDS
setup >"$W/out/setup.txt" 2>&1
STATUS[setup]=$?
SECS[setup]=$((SECONDS - t0))
{ echo "### setup"; cat "$W/out/setup.txt"; } >>"$LOG/devices.log"
if [ "${STATUS[setup]}" != 0 ]; then
  STATUS[setup]=FAIL
  cat "$W/out/setup.txt" >&2
else
  STATUS[setup]=ok
fi

for s in "${STEPS[@]}"; do
  if ! wanted "$s"; then STATUS[$s]="left out"; continue; fi
  if [ "${STATUS[setup]}" != ok ]; then STATUS[$s]="not run (setup failed)"; continue; fi
  if [ "$s" != devices ] && [ "${STATUS[devices]:-}" != ok ]; then STATUS[$s]="not run (no GPU device found)"; continue; fi
  left=$((BUDGET - (SECONDS - START)))
  lim=${LIMIT[$s]}
  [ "$lim" -le "$left" ] || lim=$left
  if [ "$lim" -lt 10 ]; then STATUS[$s]="SKIPPED (budget: ${left} s left)"; continue; fi
  EFF[$s]=$lim
  if [[ $s == bench-r* || $s == bench-t* ]] && [ ! -s "$W/pkg/build/models/bench-100m.gguf" ]; then
    echo "gpu-check: no bench-100m: $s generates it, within its limit" >&2
  fi
  text=$(cmd_text "$s" "$lim")
  echo "gpu-check: $s (limit $lim s) ..." >&2
  t0=$SECONDS
  timeout -k 5 "$lim" bash -c "$text" >"$W/out/$s.txt" 2>&1
  rc=$?
  SECS[$s]=$((SECONDS - t0))
  case $rc in
    0) STATUS[$s]=ok ;;
    124 | 137) STATUS[$s]="TIMEOUT ($lim s)" ;;
    *) STATUS[$s]="FAIL (exit $rc)" ;;
  esac
  if [ "$s" = devices ] && [ $rc = 0 ]; then
    d=$(sed -nE 's/^  ([A-Za-z]+[0-9]+) \(gpu, .*/\1/p' "$W/out/$s.txt" | head -1)
    if [ -n "$d" ]; then DEV=$d; else STATUS[$s]="FAIL (the binary finds no GPU device)"; fi
  fi
  { echo "### $s: ${STATUS[$s]}, ${SECS[$s]} s"; echo "\$ $text"; cat "$W/out/$s.txt"; echo; } >>"$LOG/${LOGF[$s]}.log"
  echo "gpu-check: $s: ${STATUS[$s]} in ${SECS[$s]} s" >&2
done

# ---------------------------------------------------------------- the table
cell() { sed 's/|/\\|/g'; }
errline() { # the first line of a failure worth showing
  grep -m1 -E 'panic:|fatal error|SIGSEGV|SIGILL|GGML_ASSERT|ggml_abort|CUDA error|error while loading|over the bound|--- FAIL|not found|Error|error:' "$1" |
    sed -E 's/^ +//; s/^[A-Za-z0-9_]+\.go:[0-9]+: //' | cut -c1-240 | cell
}
step_row() { # STEP CHECK
  local s=$1 st=${STATUS[$1]:-} res=''
  [ -n "${SECS[$1]:-}" ] && res="${SECS[$1]} s${EFF[$1]:+ (limit ${EFF[$1]} s)}"
  echo "| **$s** | $(cell <<<"$2") | $res | | $st |"
  if [ "$st" != ok ] && [ -f "$W/out/$s.txt" ]; then
    local e; e=$(errline "$W/out/$s.txt")
    [ -n "$e" ] && echo "| $s | first error | $e | | |"
  fi
}
tests_rows() { # FILE: every test's result and every line it logged, with the bound that applies
  awk -v f16="$F16" '
    function part(t) {
      if (t == "TestDevices") return "devices"
      if (t ~ /LogitsMatchCPU/) return "logits vs CPU"
      if (t ~ /Greedy/) return "greedy parity"
      if (t ~ /TeacherForcing/) return "rollout vs teacher forcing"
      if (t ~ /BackwardOps/) return "backward ops vs CPU"
      if (t ~ /Gradient/) return "gradient vs CPU"
      if (t ~ /StepRaises/) return "training step"
      return t
    }
    function b(x32, x16) { return "<= " (f16 ? x16 " (reduced precision)" : x32) }
    function bound(s) {
      if (s ~ /declines it/) return "(the CPU computes it)"
      if (s ~ /max \|logit CPU - device\|/) return b("1e-4", "1e-2")
      if (s ~ /greedy tokens identical/) return "identical; " b("1e-4", "1e-2")
      if (s ~ /rollout - teacher-forced/) return b("1e-4", "5e-2")
      if (s ~ /gradient relative error/) return b("1e-4", "5e-3")
      if (s ~ /\(MUL_MAT\).*relative error/) return b("1e-5", "3e-3")
      if (s ~ /relative error [0-9]/) return "<= 1e-5"
      if (s ~ /mean log-prob .* -> /) return "rises"
      if (s ~ /nodes by backend/) return "0 on the device with op offload off"
      return ""
    }
    function top(t) { sub(/\/.*/, "", t); return t }
    function esc(s) { gsub(/\|/, "\\|", s); return substr(s, 1, 300) }
    /^=== (RUN|NAME|CONT)/ { cur = $3; if (!(cur in seen)) { seen[cur] = 1; if (cur !~ /\//) tests[++nt] = cur } ; next }
    /^ *--- (PASS|FAIL|SKIP): / { res[$3] = substr($2, 1, 4); d = $4; gsub(/[()]/, "", d); dur[$3] = d; next }
    /^ +[A-Za-z0-9_]+\.go:[0-9]+: / {
      s = $0; sub(/^ +[A-Za-z0-9_]+\.go:[0-9]+: /, "", s)
      n++; line[n] = s; owner[n] = cur; next
    }
    END {
      for (i = 1; i <= nt; i++) {
        t = tests[i]
        print "| " part(t) " | " t " | " dur[t] " | | " (t in res ? res[t] : "no result") " |"
        for (j = 1; j <= n; j++) if (top(owner[j]) == t) {
          o = owner[j]; st = (o in res) ? res[o] : ""
          print "| " part(t) " | " (o == t ? "" : substr(o, length(t) + 2)) " | " esc(line[j]) " | " bound(line[j]) " | " st " |"
        }
      }
    }' "$1"
}
bench_rows() { # FILE: the last "rollout M: ..." / "training step M: ..." line of each model, and NOT RUN lines
  awk '
    function esc(s) { gsub(/\|/, "\\|", s); return s }
    /^(rollout|training step) [^:]+: CPU/ { k = $0; sub(/:.*/, "", k); if (!(k in v)) ks[++n] = k; v[k] = $0; next }
    /NOT RUN/ { s = $0; sub(/^ +[A-Za-z0-9_]+\.go:[0-9]+: /, "", s); nr[++m] = s }
    END {
      for (i = 1; i <= n; i++) {
        k = ks[i]; what = (k ~ /^rollout/) ? "rollout tokens/s" : "training step tokens/s"
        m2 = k; sub(/^(rollout|training step) /, "", m2); r = v[k]; sub(/^[^:]+: /, "", r)
        print "| " what " | " m2 " | " esc(r) " | | |"
      }
      for (i = 1; i <= m; i++) print "| benchmarks | | " esc(nr[i]) " | | |"
    }' "$1"
}
demo_rows() { # FILE OUTDIR LABEL: the experiment's table, and the mean step times of steps 2..N
  local f=$1 out=$2 label=$3 arm m
  awk -v label="$label" -F'|' '
    function trim(s) { gsub(/^ +| +$/, "", s); return s }
    /^\| arm \|/ { for (i = 2; i < NF; i++) col[trim($i)] = i; hdr = 1; next }
    hdr && /^\|[-| ]+$/ { next }
    hdr && /^\| / {
      a = trim($2)
      if (!("held-out accuracy before" in col) || !("after" in col)) { r = $0; gsub(/\|/, "\\|", r); print "| " label " | | " r " | | |"; next }
      r = "held-out accuracy " trim($(col["held-out accuracy before"])) " -> " trim($(col["after"]))
      if ("s/step" in col) r = r ", " trim($(col["s/step"])) " s/step"
      print "| " label " | " a " | " r " | | |"
      next
    }
    hdr && !/^\|/ { hdr = 0 }' "$f"
  for m in "$out"/*/seed-*/metrics.jsonl; do
    [ -f "$m" ] || continue
    arm=${m#"$out"/}; arm=${arm%%/*}
    awk -v label="$label" -v arm="$arm" '
      function num(k,   r) { if (match($0, "\"" k "\":[-0-9.eE+]+")) { r = substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return r + 0 } return "" }
      { st = num("step") }
      st >= 2 && num("step_s") != "" { n++; ro += num("rollout_s"); tr += num("train_s"); ss += num("step_s"); tk += num("tokens_per_s") }
      END { if (n) printf "| %s | %s, steps 2-%d | per step %.3f s: rollout %.3f s, training %.3f s; %.0f tokens/s | | |\n", label, arm, st, ss / n, ro / n, tr / n, tk / n }' "$m"
  done
}

table() {
  echo "| part | check | result | bound | status |"
  echo "|---|---|---|---|---|"
  echo "| **setup** | bundle $(cell <<<"${BUNDLE#"$ROOT"/}"), libraries | ${SECS[setup]} s | | ${STATUS[setup]} |"
  local s f l e
  [ "${STATUS[setup]}" = ok ] || echo "| setup | error | $(tail -1 "$W/out/setup.txt" | cut -c1-300 | cell) | | |"
  for s in "${STEPS[@]}"; do
    f=$W/out/$s.txt
    case "$s" in
      devices)
        step_row "$s" "nvidia-smi; confclip-$b version"
        [ -f "$f" ] && grep -E '^GPU [0-9]+:|^[^ ].*, [0-9.]+, [0-9]+ MiB|^confclip |^llama.cpp |^backends:|^  [A-Za-z]+[0-9]* \(' "$f" | sed 's/^ *//' | cell |
          awk '{ print "| devices | | " $0 " | | |" }' ;;
      tests-*)
        step_row "$s" "./${s#tests-}: $RUN"
        [ -f "$f" ] && tests_rows "$f" ;;
      bench-model) step_row "$s" "bench-100m.gguf" ;;
      bench-*)
        step_row "$s" "./${s#bench-}: BenchmarkGPU, 3x"
        [ -f "$f" ] && bench_rows "$f" ;;
      demo-gpu | demo-cpu)
        step_row "$s" "confclip experiment demo.toml, $DEMO_STEPS steps"
        if [ "$s" = demo-gpu ]; then l="demo on $DEV"; else l="demo on the CPU"; fi
        [ -f "$f" ] && demo_rows "$f" "$W/$s" "$l" ;;
    esac
  done
}

table >"$LOG/table.md" 2>&1
echo
cat "$LOG/table.md"
echo
fail=() notrun=0
for s in setup "${STEPS[@]}"; do
  case "${STATUS[$s]:-}" in
    ok | "left out") ;;
    "not run"* | SKIPPED*) notrun=$((notrun + 1)) ;;
    *) fail+=("$s ${STATUS[$s]:-?}") ;;
  esac
done
[ "$notrun" = 0 ] || fail+=("$notrun steps not run")
took=$((SECONDS - START))
[ -n "${GPU_CHECK_WORK:-}" ] || rm -rf "$W" # bench-100m is 400 MB
left_out=0
for s in "${STEPS[@]}"; do [ "${STATUS[$s]}" != "left out" ] || left_out=$((left_out + 1)); done
if [ ${#fail[@]} = 0 ]; then
  echo "gpu-check: PASS on $DEV in $took s${left_out/#[1-9]*/ ($left_out steps left out by GPU_CHECK_STEPS)} (logs in $LOG)"
else
  echo "gpu-check: FAIL on $DEV in $took s: $(printf '%s; ' "${fail[@]}" | sed 's/; $//') (logs in $LOG)"
  exit 1
fi
