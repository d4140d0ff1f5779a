#!/usr/bin/env bash
# The CUDA check, for a machine with an NVIDIA GPU and the CUDA toolkit
# (nvcc): builds the CUDA variant in build-cuda, runs the GPU tests on the
# first CUDA device (the ones CI runs on lavapipe: greedy rollouts against
# the CPU, rollout against teacher-forced log-probs, training gradients
# against the CPU, a positive advantage raising the log-prob), then the
# GPU-against-CPU rollout and training-step benchmarks, and prints one
# table. CI has no GPU: this script is run by hand (docs/gpu.md).
#   scripts/gpu-check.sh            CUDA
#   BACKEND=VULKAN scripts/gpu-check.sh   the same with the Vulkan build
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${BACKEND:-CUDA}
if [ "$backend" = CUDA ]; then
  command -v nvcc >/dev/null 2>&1 || export PATH=$PATH:/usr/local/cuda/bin
  command -v nvcc >/dev/null 2>&1 || { echo "gpu-check: nvcc not found: install the CUDA toolkit (docs/gpu.md)" >&2; exit 1; }
  nvidia-smi -L || { echo "gpu-check: nvidia-smi lists no GPU" >&2; exit 1; }
fi
log=$(mktemp -d)/gpu-check
mkdir -p "$log"
echo "gpu-check: logs in $log" >&2

make GGML_$backend=ON >"$log/build.txt" 2>&1 || { tail -30 "$log/build.txt"; exit 1; }
./bin/confclip version | tee "$log/version.txt"

# The GPU tests; -v keeps their measured numbers in the log.
export CONFCLIP_REQUIRE_GPU=1
tests_rc=0
make GGML_$backend=ON test PKGS='./llama ./rollout ./train' RUN='TestDevices|TestGPU' >"$log/tests.txt" 2>&1 || tests_rc=$?
build=build-$(echo "$backend" | tr A-Z a-z)
cp "$build/test.log" "$log/tests-verbose.txt" 2>/dev/null || true

# The benchmarks, GPU against CPU in one run each (bench-100m is generated
# into build/models on first use).
bench_rc=0
make --no-print-directory GGML_$backend=ON bench-gpu >"$log/bench.txt" 2>&1 || bench_rc=$?

# One table: each measured line of the tests and benchmarks.
{
  echo
  echo "| check | result |"
  echo "|---|---|"
  grep -hE -- '^ *--- (PASS|FAIL|SKIP)' "$log/tests-verbose.txt" | sed -E 's/^ *--- (PASS|FAIL|SKIP): (\S+) \((.*)\)/| \2 | \1 (\3) |/'
  grep -hE 'identical to the CPU|teacher-forced log-prob|gradient relative error|mean log-prob|training graphs on' "$log/tests-verbose.txt" \
    | sed -E 's/^ *[a-z_]+\.go:[0-9]+: //; s/^/| measured | /; s/$/ |/'
  grep -hE '^(rollout|training step) ' "$log/bench.txt" | sed -E 's/^/| benchmark | /; s/$/ |/'
} | tee "$log/table.md"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ] || { echo "gpu-check: tests rc $tests_rc, benchmarks rc $bench_rc (logs in $log)" >&2; exit 1; }
