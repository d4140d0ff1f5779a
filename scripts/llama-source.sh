#!/usr/bin/env bash
# Lays down third_party/llama.cpp from the pinned Go module that carries
# llama.cpp and ggml (github.com/ollama/ollama, llama.cpp commit ec98e2002 plus
# ollama's patch set), checks the module's h1: sum, leaves out the module's own
# Go files and vendor folders, and applies this project's patches from
# third_party/patches. Nothing laid down here is committed (.gitignore).
set -euo pipefail

MODULE=github.com/ollama/ollama
VERSION=v0.17.4
SUM="h1:X3KNm9x4BlHqk/AXMGtC7pBAFd46nmJmy8yDaBZLo9s="
LLAMA_COMMIT=ec98e2002

top=$(cd "$(dirname "$0")/.." && pwd)
dst="$top/third_party/llama.cpp"
patches="$top/third_party/patches"

# The stamp names the module and the patch set; the tree is laid down again
# whenever either changes.
want="$MODULE@$VERSION $SUM $LLAMA_COMMIT $(find "$patches" -name "*.patch" -type f | sort | xargs -r cat | sha256sum | cut -c1-16)"
if [ -f "$dst/.stamp" ] && [ "$(cat "$dst/.stamp")" = "$want" ]; then
  exit 0
fi

echo "llama.cpp: downloading $MODULE@$VERSION with go mod download" >&2
json=$(cd "$top" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION")
dir=$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
got=$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')
if [ "$got" != "$SUM" ]; then
  echo "llama.cpp: $MODULE@$VERSION has sum $got, want $SUM; refusing to build" >&2
  exit 1
fi
[ -d "$dir/llama/llama.cpp/src" ] || { echo "llama.cpp: $dir has no llama/llama.cpp/src" >&2; exit 1; }

rm -rf "$dst"
mkdir -p "$dst/llama" "$dst/ggml"
# Every file gets the time it is laid down (tar -m), not the module's: after
# a patch is removed, a file no other patch touches would otherwise go back to
# an old time and its stale object would be kept by the build.
copy() { # copy a folder without Go files (they would join `go test ./...`)
  mkdir -p "$2"
  tar -C "$1" --exclude='*.go' -cf - . | tar -C "$2" -xmf -
}
copy "$dir/llama/llama.cpp/include" "$dst/llama/include"
copy "$dir/llama/llama.cpp/src" "$dst/llama/src"
copy "$dir/ml/backend/ggml/ggml/include" "$dst/ggml/include"
copy "$dir/ml/backend/ggml/ggml/src" "$dst/ggml/src"
copy "$dir/ml/backend/ggml/ggml/cmake" "$dst/ggml/cmake"
cp "$dir/llama/llama.cpp/LICENSE" "$dst/LICENSE"
chmod -R u+w "$dst"

for p in "$patches"/*.patch; do
  [ -e "$p" ] || continue
  echo "llama.cpp: applying $(basename "$p")" >&2
  patch -s -p1 -d "$dst" <"$p"
done
printf '%s' "$want" >"$dst/.stamp"
