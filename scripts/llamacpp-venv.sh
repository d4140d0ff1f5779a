#!/usr/bin/env bash
# llamacpp-venv: the Python environment of the llama-cpp-python generation
# anchor (issue 39; train's BenchmarkAgainstLlamaCppPython runs
# scripts/llamacpp_generate.py in it).
#
# build/llamacpp-venv is a plain venv of /usr/bin/python3 (3.11) holding the
# pinned packages of scripts/llamacpp-requirements.txt, each checked by its
# sha256. llama-cpp-python is built from the source distribution that
# scripts/llama-source.sh pins (one sha256 for both), so the anchor runs the
# same llama.cpp commit as confclip, without confclip's patches, compiled
# with llama.cpp's own defaults for this CPU (GGML_NATIVE: -march=native);
# the multimodal library is left out (LLAVA_BUILD=OFF). About 5 minutes of
# compiling on 2 cores, less with ccache. Made again when the requirements
# change; a half-made one is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/llamacpp-venv
req=scripts/llamacpp-requirements.txt
py=/usr/bin/python3

"$py" -c 'import sys, venv, ensurepip; assert sys.version_info[:2] == (3, 11)' 2>/dev/null || {
  echo "llamacpp-venv needs $py 3.11 with venv (Debian's python3-venv); the hashes in $req are for CPython 3.11" >&2
  exit 1
}
command -v cmake >/dev/null || { echo "llamacpp-venv needs cmake to build llama-cpp-python" >&2; exit 1; }

. scripts/venv-lib.sh
venv_current llamacpp-venv "$venv" "$req"
# The build's own requirements first (hash-checked), then llama-cpp-python
# built against them.
build_req=$(mktemp)
trap 'rm -f "$build_req"' EXIT
grep -v '^llama-cpp-python' "$req" >"$build_req"
venv_install "$venv" "$build_req" "$py"
echo "llamacpp-venv: building llama-cpp-python from its source distribution" >&2
CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes --no-build-isolation -r "$req"
"$venv/bin/python" - >&2 <<'PY'
import llama_cpp
print("llamacpp-venv: llama-cpp-python", llama_cpp.__version__)
PY
venv_done "$venv"
echo "llamacpp-venv: $venv: $(du -sh "$venv" | cut -f1)" >&2
