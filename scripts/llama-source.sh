#!/usr/bin/env bash
# Lays down third_party/llama.cpp and applies this project's patches from
# third_party/patches. Nothing laid down here is committed (.gitignore).
#
# LLAMA_SOURCE (environment, or `make LLAMA_SOURCE=...`) says where llama.cpp
# comes from:
#   (unset)  the pin: upstream llama.cpp 0c1e57098 (2026-10-01), as the Python
#       source distribution llama-cpp-python 0.3.36 carries it under
#       vendor/llama.cpp, its sha256 checked (docs/llama-bump.md says why this
#       one).
#   pypi:NAME==VERSION@sha256:HEX  another Python source distribution that
#       carries llama.cpp, fetched with pip download into build/llama-src and
#       refused unless its sha256 is HEX.
#   dir:/path/to/llama.cpp  a local checkout, used as it is: nothing is
#       checked, and the tree is laid down again whenever a file in it changes.
# The patches go on in layers (third_party/patches/README.md): training/,
# then cpu/, then backends/, each in file-name order, without fuzz (patch
# -F0); a patch that does not apply stops the build with its name and the
# hunks that failed. LLAMA_DROP="0044 0038" (numbers) or LLAMA_DROP=cpu (a
# layer) leaves patches out, e.g. to measure what one speedup is worth.
#
# scripts/llama-source.sh --pristine DIR lays the source down in DIR without
# the patches and writes DIR/.source (the source, its llama.cpp commit and
# checksum); llama-bump-check.sh uses it.
# scripts/llama-source.sh --check lays the source down in a temporary folder
# and tries every patch on it, reporting each hunk (applied, offset, failed);
# it exits 1 if one does not apply.
set -euo pipefail

# The pin. LLAMA_COMMIT is checked against the commit the archive's git
# folder records; llama/llama.go's LlamaCommit says the same
# (TestLlamaCommitMatchesPin).
PIN="pypi:llama-cpp-python==0.3.36@sha256:832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
LLAMA_COMMIT=0c1e57098

top=$(cd "$(dirname "$0")/.." && pwd)
dst="$top/third_party/llama.cpp"
patches="$top/third_party/patches"
source=${LLAMA_SOURCE:-$PIN}
pristine= check=
case ${1:-} in
--pristine)
  [ -n "${2:-}" ] || { echo "usage: scripts/llama-source.sh [--pristine DIR | --check]" >&2; exit 2; }
  pristine=1
  dst=$2
  ;;
--check)
  check=1
  dst=$(mktemp -d "${TMPDIR:-/tmp}/llama-check.XXXXXX")
  trap 'rm -rf "$dst"' EXIT
  ;;
"") ;;
*) echo "usage: scripts/llama-source.sh [--pristine DIR | --check]" >&2; exit 2 ;;
esac
. "$top/scripts/llama-patch.sh"

die() { echo "llama.cpp: $*" >&2; exit 1; }
patchsum() { patch_list "$patches" | xargs -r cat | sha256sum | cut -c1-16; }

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
  die "LLAMA_SOURCE=ollama: the ollama module carries llama.cpp ec98e2002 (2025), which this patch set no longer fits; leave LLAMA_SOURCE unset for the pin"
  ;;
pypi:*)
  spec=${source#pypi:}
  name=${spec%%==*}
  version=${spec#*==}; version=${version%%@*}
  hex=${spec##*@sha256:}
  if [ "$name" = "$spec" ] || [ "$hex" = "$spec" ] || ! [[ $hex =~ ^[0-9a-f]{64}$ ]]; then
    die "LLAMA_SOURCE=$source: want pypi:NAME==VERSION@sha256:HEX (64 hex digits)"
  fi
  want="$source $(patchsum) drop=${LLAMA_DROP:-}"
  ;;

dir:*)
  tree=${source#dir:}
  [ -f "$tree/include/llama.h" ] && [ -f "$tree/ggml/src/CMakeLists.txt" ] \
    || die "LLAMA_SOURCE=$source: $tree is not a llama.cpp checkout (no include/llama.h or ggml/src/CMakeLists.txt)"
  tree=$(cd "$tree" && pwd)
  # A local tree has no pin: its files' sizes and times stand for it.
  files=$(find "$tree/include" "$tree/src" "$tree/ggml/include" "$tree/ggml/src" "$tree/ggml/cmake" -type f -printf '%T@ %s %p\n' | sort | sha256sum | cut -c1-16)
  want="dir:$tree $files $(patchsum) drop=${LLAMA_DROP:-}"
  ;;

*)
  die "LLAMA_SOURCE=$source: want ollama, pypi:NAME==VERSION@sha256:HEX or dir:/path/to/llama.cpp"
  ;;
esac

if [ -z "$pristine$check" ] && [ -f "$dst/.stamp" ] && [ "$(cat "$dst/.stamp")" = "$want" ]; then
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
  tar -xzf "$sdist" -C "$work" "${root}include" "${root}src" "${root}ggml/include" "${root}ggml/src" "${root}ggml/cmake" "${root}ggml/CMakeLists.txt" "${root}LICENSE"
  echo "llama.cpp: $name==$version (sha256 checked) carries llama.cpp $commit in ${root%/}" >&2
  if [ "$source" = "$PIN" ] && [ "${commit:0:${#LLAMA_COMMIT}}" != "$LLAMA_COMMIT" ]; then
    die "$sdist carries llama.cpp $commit, but the pin is $LLAMA_COMMIT"
  fi
  ggml_cmake="$work/${root}ggml/CMakeLists.txt"
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
  ggml_cmake="$tree/ggml/CMakeLists.txt"
  ;;
esac

# version.cmake: what CMakeLists.txt compiles in as the tree's commit
# (ggml_commit(), llama.cpp's LLAMA_COMMIT) and ggml's version, read off
# ggml's own CMakeLists.txt.
ggml_version() { sed -n "s/^set(GGML_VERSION_$1 \([0-9]*\))\$/\1/p" "$ggml_cmake" 2>/dev/null | head -1; }
{
  echo "# written by scripts/llama-source.sh ($source)"
  echo "set(LLAMA_SOURCE_COMMIT \"${commit:0:9}\")"
  for part in MAJOR MINOR PATCH; do
    v=$(ggml_version $part)
    echo "set(GGML_VERSION_$part ${v:-0})"
  done
} >"$dst/version.cmake"

if [ -n "$pristine" ]; then
  printf 'source=%s\ncommit=%s\nchecksum=%s\n' "$source" "$commit" "$checksum" >"$dst/.source"
  exit 0
fi
if [ -n "$check" ]; then
  # Every hunk of every patch, in order, each patch applied once tried so
  # that later ones see it.
  failed=0
  while read -r p; do
    rel=${p#"$patches"/}
    out=$(patch_try "$dst" "$p") && ok=1 || ok=0
    # every hunk of the patch (patch_hunks), with what patch said of it
    # (patch_results names only the hunks that moved or failed)
    awk -F'\t' -v p="$rel" '
      FILENAME == ARGV[1] { st[$1 "\t" $2] = $3 ($4 != "" ? " " $4 : ""); if ($2 == "-") whole[$1] = $3 " " $4; next }
      { s = ($1 "\t" $2) in st ? st[$1 "\t" $2] : ($1 in whole ? whole[$1] : "ok")
        printf "%-62s %-44s #%-3s %s\n", p, $1, $2, s }
    ' <(printf '%s\n' "$out" | patch_results) <(patch_hunks "$p")
    if [ $ok = 1 ]; then
      patch_apply "$dst" "$p"
    else
      failed=$((failed + 1))
    fi
  done < <(patch_list "$patches")
  n=$(patch_list "$patches" | wc -l)
  echo "llama.cpp: $((n - failed)) of $n patches apply to $source (llama.cpp $commit) without fuzz${LLAMA_DROP:+ (left out: $(drop_set))}" >&2
  [ $failed = 0 ] || exit 1
  exit 0
fi
while read -r p; do
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
  echo "llama.cpp: applying ${p#"$patches"/}${offsets:+ (offsets: $offsets)}" >&2
  patch_apply "$dst" "$p"
done < <(patch_list "$patches")
if [ "$source" != "$PIN" ]; then
  echo "llama.cpp: note: this tree is llama.cpp $commit, not the pin $LLAMA_COMMIT; confclip version will say so" >&2
fi
printf '%s' "$want" >"$dst/.stamp"
