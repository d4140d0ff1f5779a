#!/usr/bin/env bash
# Lays down third_party/llama.cpp and applies this project's patches from
# third_party/patches. Nothing laid down here is committed (.gitignore).
#
# LLAMA_SOURCE (environment, or `make LLAMA_SOURCE=...`) says where llama.cpp
# comes from:
#   ollama (the default) the pinned Go module that carries llama.cpp and ggml
#       (github.com/ollama/ollama, llama.cpp commit ec98e2002 plus ollama's
#       patch set), its h1: sum checked; the module's own Go files and vendor
#       folders are left out. The patches go on at patch's default fuzz.
#   pypi:NAME==VERSION@sha256:HEX  a Python source distribution that carries
#       llama.cpp (llama-cpp-python has it under vendor/llama.cpp), fetched
#       with pip download into build/llama-src and refused unless its sha256
#       is HEX.
#   dir:/path/to/llama.cpp  a local checkout, used as it is: nothing is
#       checked, and the tree is laid down again whenever a file in it changes.
# Other than from the pin, the patches go on without fuzz (patch -F0), and a
# patch that does not apply stops the build with its name and the hunks that
# failed; scripts/llama-bump-check.sh reports on every patch at once.
#
# scripts/llama-source.sh --pristine DIR lays the source down in DIR without
# the patches and writes DIR/.source (the source, its llama.cpp commit and
# checksum); llama-bump-check.sh uses it.
set -euo pipefail

MODULE=github.com/ollama/ollama
VERSION=v0.17.4
SUM="h1:X3KNm9x4BlHqk/AXMGtC7pBAFd46nmJmy8yDaBZLo9s="
LLAMA_COMMIT=ec98e2002

top=$(cd "$(dirname "$0")/.." && pwd)
dst="$top/third_party/llama.cpp"
patches="$top/third_party/patches"
source=${LLAMA_SOURCE:-ollama}
pristine=
if [ "${1:-}" = --pristine ]; then
  [ -n "${2:-}" ] || { echo "usage: scripts/llama-source.sh [--pristine DIR]" >&2; exit 2; }
  pristine=1
  dst=$2
fi
. "$top/scripts/llama-patch.sh"

die() { echo "llama.cpp: $*" >&2; exit 1; }
patchsum() { find "$patches" -name "*.patch" -type f | sort | xargs -r cat | sha256sum | cut -c1-16; }

# Every file gets the time it is laid down (tar -m), not the source's: after
# a patch is removed, a file no other patch touches would otherwise go back to
# an old time and its stale object would be kept by the build.
copy() { # copy a folder without Go files (they would join `go test ./...`)
  mkdir -p "$2"
  tar -C "$1" --exclude='*.go' -cf - . | tar -C "$2" -xmf -
}

# layout LLAMA GGML LICENSE: llama.cpp's include and src from LLAMA, ggml's
# include, src and cmake from GGML, in the layout CMakeLists.txt reads
# (llama/{include,src}, ggml/{include,src,cmake}).
layout() {
  rm -rf "$dst"
  mkdir -p "$dst/llama" "$dst/ggml"
  copy "$1/include" "$dst/llama/include"
  copy "$1/src" "$dst/llama/src"
  copy "$2/include" "$dst/ggml/include"
  copy "$2/src" "$dst/ggml/src"
  copy "$2/cmake" "$dst/ggml/cmake"
  cp "$3" "$dst/LICENSE"
  chmod -R u+w "$dst"
}

case $source in
ollama)
  # The stamp names the module and the patch set; the tree is laid down again
  # whenever either changes.
  want="$MODULE@$VERSION $SUM $LLAMA_COMMIT $(patchsum)"
  if [ -z "$pristine" ] && [ -f "$dst/.stamp" ] && [ "$(cat "$dst/.stamp")" = "$want" ]; then
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

  layout "$dir/llama/llama.cpp" "$dir/ml/backend/ggml/ggml" "$dir/llama/llama.cpp/LICENSE"
  if [ -n "$pristine" ]; then
    printf 'source=ollama (%s@%s)\ncommit=%s\nchecksum=%s\n' "$MODULE" "$VERSION" "$LLAMA_COMMIT" "$SUM" >"$dst/.source"
    exit 0
  fi
  for p in "$patches"/*.patch; do
    [ -e "$p" ] || continue
    echo "llama.cpp: applying $(basename "$p")" >&2
    patch -s -p1 -d "$dst" <"$p"
  done
  printf '%s' "$want" >"$dst/.stamp"
  exit 0
  ;;

pypi:*)
  spec=${source#pypi:}
  name=${spec%%==*}
  version=${spec#*==}; version=${version%%@*}
  hex=${spec##*@sha256:}
  if [ "$name" = "$spec" ] || [ "$hex" = "$spec" ] || ! [[ $hex =~ ^[0-9a-f]{64}$ ]]; then
    die "LLAMA_SOURCE=$source: want pypi:NAME==VERSION@sha256:HEX (64 hex digits)"
  fi
  want="$source $(patchsum)"
  ;;

dir:*)
  tree=${source#dir:}
  [ -f "$tree/include/llama.h" ] && [ -f "$tree/ggml/src/CMakeLists.txt" ] \
    || die "LLAMA_SOURCE=$source: $tree is not a llama.cpp checkout (no include/llama.h or ggml/src/CMakeLists.txt)"
  tree=$(cd "$tree" && pwd)
  # A local tree has no pin: its files' sizes and times stand for it.
  files=$(find "$tree/include" "$tree/src" "$tree/ggml/include" "$tree/ggml/src" "$tree/ggml/cmake" -type f -printf '%T@ %s %p\n' | sort | sha256sum | cut -c1-16)
  want="dir:$tree $files $(patchsum)"
  ;;

*)
  die "LLAMA_SOURCE=$source: want ollama, pypi:NAME==VERSION@sha256:HEX or dir:/path/to/llama.cpp"
  ;;
esac

if [ -z "$pristine" ] && [ -f "$dst/.stamp" ] && [ "$(cat "$dst/.stamp")" = "$want" ]; then
  exit 0
fi

case $source in
pypi:*)
  cache="$top/build/llama-src"
  sdist="$cache/$name-$version.tar.gz"
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if ! [ -f "$sdist" ] || [ "$(sha256sum "$sdist" | cut -c1-64)" != "$hex" ]; then
    if command -v pip >/dev/null 2>&1; then pip=(pip); else pip=(python3 -m pip); fi
    echo "llama.cpp: downloading $name==$version's source distribution with pip download" >&2
    # --require-hashes: pip checks the archive before it runs the package's
    # build backend (which it does to read an sdist's metadata).
    printf '%s==%s --hash=sha256:%s\n' "$name" "$version" "$hex" >"$tmp/requirements.txt"
    "${pip[@]}" download --quiet --no-deps --no-binary :all: --require-hashes -r "$tmp/requirements.txt" --dest "$tmp/dl" >&2 \
      || die "pip download $name==$version (sha256 $hex) failed"
    got=$(ls "$tmp/dl")
    [ "$(printf '%s\n' "$got" | wc -l)" = 1 ] && [[ $got == *.tar.gz ]] \
      || die "pip download $name==$version gave '$got', want one .tar.gz"
    mv "$tmp/dl/$got" "$sdist"
  fi
  got=$(sha256sum "$sdist" | cut -c1-64)
  if [ "$got" != "$hex" ]; then
    die "$sdist has sha256 $got, want $hex; refusing to build"
  fi

  # llama.cpp's root in the archive: the folder with include/llama.h and
  # ggml/src/CMakeLists.txt (llama-cpp-python: NAME-VERSION/vendor/llama.cpp/).
  members=$(tar -tzf "$sdist")
  root=$(printf '%s\n' "$members" | awk '
    /(^|\/)include\/llama\.h$/ { r = $0; sub(/include\/llama\.h$/, "", r); llama[r] = 1 }
    /(^|\/)ggml\/src\/CMakeLists\.txt$/ { r = $0; sub(/ggml\/src\/CMakeLists\.txt$/, "", r); ggml[r] = 1 }
    END { for (r in llama) if (r in ggml) print r }' | sort | head -1)
  [ -n "$root" ] || die "$sdist holds no llama.cpp tree (include/llama.h beside ggml/src/CMakeLists.txt)"
  # The commit is the submodule's HEAD, when the archive kept the git folder.
  commit=unknown
  gitdir=$(tar -xzOf "$sdist" "${root}.git" 2>/dev/null | sed -n 's/^gitdir: //p') || true
  if [ -n "$gitdir" ]; then
    head=$(realpath -m "/$root$gitdir/HEAD"); head=${head#/}
    commit=$(tar -xzOf "$sdist" "$head" 2>/dev/null | grep -Eo '^[0-9a-f]{40}$') || commit=unknown
  fi
  work=$tmp/unpack
  mkdir "$work"
  tar -xzf "$sdist" -C "$work" "${root}include" "${root}src" "${root}ggml/include" "${root}ggml/src" "${root}ggml/cmake" "${root}LICENSE"
  echo "llama.cpp: $name==$version (sha256 checked) carries llama.cpp $commit in ${root%/}" >&2
  layout "$work/$root" "$work/${root}ggml" "$work/${root}LICENSE"
  checksum="sha256:$hex"
  ;;
dir:*)
  echo "llama.cpp: using the local tree $tree as it is; no checksum is checked" >&2
  commit=unknown
  if c=$(git -C "$tree" rev-parse HEAD 2>/dev/null); then
    commit=$c
    [ -z "$(git -C "$tree" status --porcelain -- include src ggml 2>/dev/null)" ] || commit="$c-dirty"
  fi
  layout "$tree" "$tree/ggml" "$tree/LICENSE"
  checksum="none (a local tree)"
  ;;
esac

if [ -n "$pristine" ]; then
  printf 'source=%s\ncommit=%s\nchecksum=%s\n' "$source" "$commit" "$checksum" >"$dst/.source"
  exit 0
fi
for p in "$patches"/*.patch; do
  [ -e "$p" ] || continue
  if ! out=$(patch_try "$dst" "$p"); then
    echo "llama.cpp: $(basename "$p") does not apply to $source without fuzz:" >&2
    printf '%s\n' "$out" | patch_results | awk -F'\t' '
      $3 == "failed" { f[$1] = f[$1] " #" $2 }
      $3 == "missing" { m[$1] = " no such file (" $4 ")" }
      $3 == "reversed" { m[$1] = " applied already? (" $4 ")" }
      END {
        for (k in f) print "  " k ": hunks" f[k] " failed"
        for (k in m) print "  " k ":" m[k]
      }' >&2
    die "rebase it; scripts/llama-bump-check.sh '$source' reports on every patch"
  fi
  offsets=$(printf '%s\n' "$out" | patch_results | awk -F'\t' '
    $3 == "offset" { if (!($1 in o)) files[++n] = $1; o[$1] = o[$1] " #" $2 " " $4 }
    END { for (i = 1; i <= n; i++) s = s "; " files[i] ":" o[files[i]]; print substr(s, 3) }')
  echo "llama.cpp: applying $(basename "$p")${offsets:+ (offsets: $offsets)}" >&2
  patch_apply "$dst" "$p"
done
echo "llama.cpp: note: llama/llama.go's LlamaCommit and CMakeLists.txt's GGML_BUILD_COMMIT still name $LLAMA_COMMIT (this tree: $commit)" >&2
printf '%s' "$want" >"$dst/.stamp"
