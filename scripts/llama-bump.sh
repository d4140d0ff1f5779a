#!/usr/bin/env bash
# scripts/llama-bump.sh VERSION (make llama-bump VERSION=...) tries this
# project on another llama.cpp tree in one command and prints what broke:
#   1. the source: VERSION is a llama-cpp-python version on the package index
#      (its source distribution carries llama.cpp under vendor/llama.cpp; the
#      archive is downloaded and its sha256 printed, to pin it) or anything
#      LLAMA_SOURCE takes (pypi:NAME==VERSION@sha256:HEX, dir:/path);
#   2. the patches: every hunk without fuzz (llama-source.sh --check) and the
#      bump check's report (llama-bump-check.sh: failing hunks by function,
#      cgo calls the new headers lack, the pre-check's architecture tables);
#   3. the build: a copy of this checkout in build/bump/work (tracked and
#      untracked files, not build/) builds llama.cpp and bin/confclip there,
#      whatever the patches did (-k: every compile error, not the first);
#   4. the tests that depend most on the tree: the per-architecture training
#      tests, the pre-check's tables read off the tree, and the decode goldens.
# The summary is build/bump/summary.md; the script exits 1 if anything broke.
# Nothing of this checkout changes: the pin moves only when you edit PIN and
# LLAMA_COMMIT in scripts/llama-source.sh (and LlamaCommit in llama/llama.go).
set -uo pipefail
export LC_ALL=C

[ $# = 1 ] && [ -n "$1" ] || { echo "usage: scripts/llama-bump.sh VERSION (a llama-cpp-python version, or pypi:NAME==VERSION@sha256:HEX, or dir:/path)" >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/bump
mkdir -p "$out"
summary=$out/summary.md
broke=0

case $1 in
pypi:* | dir:*) source=$1 ;;
*)
  # A bare version: download the sdist once to learn its sha256 (trust on
  # first use; the pin then checks it on every build).
  dl=$(mktemp -d "$out/dl.XXXXXX")
  if command -v pip >/dev/null 2>&1; then pip=(pip); else pip=(python3 -m pip); fi
  echo "llama-bump: downloading llama-cpp-python==$1's source distribution" >&2
  "${pip[@]}" download --quiet --no-deps --no-binary :all: "llama-cpp-python==$1" --dest "$dl" >&2 \
    || { echo "llama-bump: pip download llama-cpp-python==$1 failed" >&2; exit 1; }
  f=$(ls "$dl"/*.tar.gz 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "llama-bump: llama-cpp-python==$1 has no source distribution" >&2; exit 1; }
  hex=$(sha256sum "$f" | cut -c1-64)
  mkdir -p "$top/build/llama-src"
  mv "$f" "$top/build/llama-src/llama-cpp-python-$1.tar.gz"
  rm -rf "$dl"
  source="pypi:llama-cpp-python==$1@sha256:$hex"
  ;;
esac
echo "llama-bump: LLAMA_SOURCE='$source'" >&2

{
  echo "# llama-bump: $source"
  echo
  echo "## Patches (llama-source.sh --check, no fuzz)"
  echo
  echo '```'
} >"$summary"
if LLAMA_SOURCE=$source bash "$top/scripts/llama-source.sh" --check >"$out/check.txt" 2>"$out/check.err"; then
  patches=ok
else
  patches=broken broke=1
fi
awk '$4 != "ok"' "$out/check.txt" >>"$summary"
tail -1 "$out/check.err" >>"$summary"
echo '```' >>"$summary"
bash "$top/scripts/llama-bump-check.sh" "$source" >/dev/null 2>"$out/bump-check.err" || true

# The copy, built with every patch that applies: a failing patch stops
# llama-source.sh, so the copy leaves those out and says which.
work=$out/work
rm -rf "$work"
mkdir -p "$work"
(cd "$top" && git ls-files -co --exclude-standard -z | grep -zv '^build/' | xargs -0 cp --parents -t "$work")
failing=$(awk '$4 == "failed" || $4 == "missing" || $4 == "reversed" { split($1, a, "/"); n = a[2]; sub(/-.*/, "", n); print n }' "$out/check.txt" | sort -u | tr '\n' ' ')
echo >>"$summary"
echo "## Build (bin/confclip${failing:+ without patches $failing})" >>"$summary"
echo >>"$summary"
if (cd "$work" && LLAMA_DROP="${LLAMA_DROP:-} $failing" make LLAMA_SOURCE="$source" bin/confclip) >"$out/build.txt" 2>&1; then
  build=ok
  echo "built." >>"$summary"
else
  build=broken broke=1
  echo '```' >>"$summary"
  { grep -h -E 'error:|undefined reference|cannot use|undefined: ' "$out/build.txt" "$work"/build*.log 2>/dev/null | sort -u | head -40; } >>"$summary"
  echo '```' >>"$summary"
fi

echo >>"$summary"
echo "## Tests" >>"$summary"
echo >>"$summary"
if [ $build = ok ]; then
  stamp=$(cd "$work" && make -n test 2>/dev/null | grep -o 'BuildStamp=[0-9a-f]*' | head -1)
  (cd "$work" && go test -count=1 -ldflags "-X github.com/confclip/confclip/llama.$stamp" -timeout 30m \
    -run 'TestArch|TestRopeEqualsHeadMatchesTree|TestPrecheck|TestDecodeUnchanged|TestLibraryCommitIsPin' ./llama ./llama/precheck ./train) >"$out/tests.txt" 2>&1 \
    && tests=ok || { tests=broken; broke=1; }
  { echo '```'; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.txt" | head -60; echo '```'; } >>"$summary"
else
  tests="not run (no build)"
  echo "not run: the build failed." >>"$summary"
fi
{
  echo
  echo "patches: $patches; build: $build; tests: $tests."
  echo "Details: build/bump/check.txt (every hunk), build/bump/report.md (failing hunks by function, cgo calls, architecture tables), build/bump/build.txt, build/bump/tests.txt."
} >>"$summary"
cat "$summary"
exit $broke
