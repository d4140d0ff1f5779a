#!/usr/bin/env bash
# scripts/llama-bump-check.sh SOURCE (make llama-bump-check LLAMA_SOURCE=SOURCE)
# says what moving to another llama.cpp tree breaks, without building it.
# SOURCE is what LLAMA_SOURCE takes (scripts/llama-source.sh):
# pypi:NAME==VERSION@sha256:HEX or dir:/path/to/llama.cpp.
#
# In build/bump it lays down the pinned tree and SOURCE's, and on each tries
# every patch of third_party/patches in order without fuzz (patch -F0
# --dry-run), applying those that apply so that later patches see them. It
# reports each patch (clean, with offsets, or failing: which hunks, in which
# functions, and whether those files or functions moved or vanished), the
# llama.h and ggml.h functions our cgo code calls that SOURCE's headers lack,
# and llama/precheck/model.go's architecture tables against SOURCE's
# llama-arch.cpp. The report goes to build/bump/report.md and stdout; the
# script exits 0 whatever it finds.
set -euo pipefail
export LC_ALL=C

[ $# = 1 ] && [ -n "$1" ] || { echo "usage: scripts/llama-bump-check.sh SOURCE (pypi:NAME==VERSION@sha256:HEX, dir:/path)" >&2; exit 2; }
source=$1
top=$(cd "$(dirname "$0")/.." && pwd)
patches="$top/third_party/patches"
out="$top/build/bump"
. "$top/scripts/llama-patch.sh"

slug=$(printf '%s' "${source%@sha256:*}" | tr -c 'A-Za-z0-9._-' '-')
base="$out/base" new="$out/$slug"
mkdir -p "$out"
LLAMA_SOURCE= bash "$top/scripts/llama-source.sh" --pristine "$base/pristine"
LLAMA_SOURCE=$source bash "$top/scripts/llama-source.sh" --pristine "$new/pristine"
field() { sed -n "s/^$1=//p" "$2/pristine/.source"; }

# try TREE [pinned]: every patch on a copy of TREE/pristine (TREE/patched),
# in order. Writes TREE/status (patch, status, detail) and TREE/hunks (patch,
# file, hunk, state, detail: patch_results's rows). On the pinned tree a
# patch that needs fuzz is applied with it, as the build does, so that
# TREE/patched is the tree the build compiles.
try() {
  local tree=$1 pinned=${2:-} p name res status detail
  rm -rf "$tree/patched"
  cp -a "$tree/pristine" "$tree/patched"
  : >"$tree/status"
  : >"$tree/hunks"
  while read -r p; do
    name=$(basename "$p" .patch)
    if res=$(patch_try "$tree/patched" "$p"); then
      patch_apply "$tree/patched" "$p"
      res=$(printf '%s\n' "$res" | patch_results)
      if printf '%s\n' "$res" | grep -q $'\toffset\t'; then
        status=offsets
        detail=$(printf '%s\n' "$res" | awk -F'\t' '$3 == "offset" { n++; o = $4 + 0; if (o < 0) o = -o; if (o > m) m = o }
          END { print n " hunk" (n > 1 ? "s" : "") " moved by up to " m " line" (m > 1 ? "s" : "") }')
      else
        status=clean detail=
      fi
    else
      res=$(printf '%s\n' "$res" | patch_results)
      status=fails
      detail=$(printf '%s\n' "$res" | awk -F'\t' '
        !($1 in n) { files[++nf] = $1 } $2 != "-" { n[$1]++ }
        $3 == "failed" { f[$1]++ } $3 == "missing" { f[$1] = "no such file" } $3 == "reversed" { f[$1] = "applied already?" }
        END { for (i = 1; i <= nf; i++) if ((k = files[i]) in f) s = s "; " k ": " (f[k] ~ /^[0-9]+$/ ? f[k] " of " n[k] " hunk" (n[k] > 1 ? "s" : "") : f[k]); print substr(s, 3) }')
      # Would it go on at patch's default fuzz (the pin's build allows it)?
      if patch -p1 -N -t --dry-run -d "$tree/patched" -i "$p" </dev/null >/dev/null 2>&1; then
        detail="$detail; applies with fuzz"
        if [ -n "$pinned" ]; then
          patch -s -p1 -N -t -d "$tree/patched" -i "$p" </dev/null
          status=fuzz
        fi
      fi
    fi
    printf '%s\t%s\t%s\n' "$name" "$status" "$detail" >>"$tree/status"
    printf '%s\n' "$res" | awk -v p="$name" 'NF { print p "\t" $0 }' >>"$tree/hunks"
  done < <(patch_list "$patches")
}
try "$base" pinned
try "$new"

# The hunks that fail on SOURCE, each with the function it changes and where
# that file and function are in SOURCE's tree. The function is the hunk
# header's context or, where the patch has none, what git would have put
# there: the pinned tree's last line before the hunk that starts with a
# letter or _.
where() { # where FILE IDENT: the file's and the function's fate in $new/patched
  local file=$1 ident=$2 t="$new/patched" hits
  if [ ! -e "$t/$file" ]; then
    hits=$(cd "$t" && find llama ggml -name "$(basename "$file")" -type f | head -3 | tr '\n' ' ')
    if [ -n "$hits" ]; then echo "file moved to ${hits% }"; else echo "file gone"; fi
    return
  fi
  [ -n "$ident" ] || return 0
  if grep -qw -- "$ident" "$t/$file"; then echo "\`$ident\` still in the file"; return; fi
  hits=$(cd "$t" && grep -rlw --include='*.[ch]' --include='*.cpp' --include='*.cu' --include='*.cuh' --include='*.comp' -- "$ident" llama ggml | head -3 | tr '\n' ' ')
  if [ -n "$hits" ]; then echo "\`$ident\` now in ${hits% }"; else echo "\`$ident\` gone"; fi
}
failing() {
  local name file hunk state detail ctx ident fate start what
  while IFS=$'\t' read -r name file hunk state detail; do
    case $state in failed | missing | reversed) ;; *) continue ;; esac
    ctx=
    if [ "$hunk" != - ]; then
      IFS=$'\t' read -r start ctx < <(patch_hunks "$(patch_list "$patches" | grep "/$name.patch$")" | awk -F'\t' -v f="$file" -v h="$hunk" '$1 == f && $2 == h { print $3 "\t" $4 }') || true
      if [ -z "$ctx" ] && [ -f "$base/pristine/$file" ]; then
        ctx=$(awk -v n="$start" 'NR >= n { exit } /^[A-Za-z_$]/ { l = $0 } END { print substr(l, 1, 80) }' "$base/pristine/$file")
      fi
    fi
    # The function's name: the identifier before the first "(", else the
    # last one before "{".
    ident=$(printf '%s' "$ctx" | sed -n 's/^\([^(]*\)(.*/\1/p; t; s/^\([^{]*\){.*/\1/p' | grep -Eo '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*$' | tr -d '[:space:]') || true
    fate=$(where "$file" "$ident")
    case $state in
      failed) what="hunk #$hunk" ;;
      missing) what="no such file ($detail)" ;;
      reversed) what="applied already? ($detail)" ;;
    esac
    printf '| %s | %s | %s | %s | %s |\n' "$name" "$file" "$what" "${ctx:+\`${ctx//|/\\|}\`}" "$fate"
  done <"$new/hunks"
}

# Functions our cgo code calls: llama_*, ggml_* and gguf_* names in the
# llama package's cgo files and csrc/, declared as functions in the pinned
# tree's public headers once patched.
used() {
  { grep -l '^import "C"' "$top"/llama/*.go; ls "$top"/csrc/*.[ch] 2>/dev/null; } |
    xargs cat | grep -Eo '\b(llama|ggml|gguf)_[a-z0-9_]+' | sort -u
}
headers() { # headers TREE: the public headers without comments
  cat "$1"/llama/include/*.h "$1"/ggml/include/*.h | awk '
    {
      line = $0; text = ""
      while (line != "") {
        if (inc) { i = index(line, "*/"); if (!i) break; line = substr(line, i + 2); inc = 0; continue }
        i = index(line, "/*"); j = index(line, "//")
        if (j && (!i || j < i)) { text = text substr(line, 1, j - 1); break }
        if (!i) { text = text line; break }
        text = text substr(line, 1, i - 1); line = substr(line, i + 2); inc = 1
      }
      print text
    }'
}
declared() { headers "$1" | grep -Eo '\b(llama|ggml|gguf)_[a-z0-9_]+[[:space:]]*\(' | grep -Eo '^[a-z0-9_]+' | sort -u; }
used >"$out/used"
declared "$base/patched" >"$base/decl-patched"
declared "$base/pristine" >"$base/decl-pristine"
declared "$new/pristine" >"$new/decl-pristine"
declared "$new/patched" >"$new/decl-patched"
comm -12 "$out/used" "$base/decl-patched" >"$out/relied"
# Upstream's (in the pinned tree before the patches) that SOURCE lacks, and
# ours (a patch adds them) that SOURCE lacks once the patches that apply are on.
comm -12 "$out/relied" "$base/decl-pristine" | comm -23 - "$new/decl-pristine" >"$new/missing-functions"
comm -23 "$out/relied" "$base/decl-pristine" | comm -23 - "$new/decl-patched" >"$new/missing-ours"
comm -13 "$base/decl-pristine" "$new/decl-pristine" >"$new/added-functions"
deprecated=$(headers "$new/pristine" | grep -E 'DEPRECATED\(' | grep -Eo '\b(llama|ggml|gguf)_[a-z0-9_]+[[:space:]]*\(' | grep -Eo '^[a-z0-9_]+' | sort -u | comm -12 "$out/relied" - | tr '\n' ' ')

# Other names (types, enum values) our Go code takes from C. that the pinned
# headers have and SOURCE's do not.
words() { headers "$1" | grep -Eo '\b[A-Za-z_][A-Za-z0-9_]*' | sort -u; }
grep -h -Eo '\bC\.(struct_|enum_|sizeof_)?(llama|ggml|gguf|LLAMA|GGML|GGUF)_[A-Za-z0-9_]+' $(grep -l '^import "C"' "$top"/llama/*.go) |
  sed -E 's/^C\.(struct_|enum_|sizeof_)?//' | sort -u | comm -23 - "$out/used" >"$out/used-names"
words "$base/pristine" | comm -12 "$out/used-names" - | comm -23 - <(words "$new/pristine") >"$new/missing-names"
words "$base/patched" | comm -12 "$out/used-names" - | comm -23 - <(words "$base/pristine") |
  comm -23 - <(words "$new/patched") | sed 's/$/ (ours)/' >>"$new/missing-names"

# Architectures: llama-arch.cpp's LLM_ARCH_NAMES, and each llama/precheck/model.go
# table (var NAME = map[string]bool{...}).
arch_names() { # arch_names TREE: LLM_ARCH_X and its name, one row each
  awk '/LLM_ARCH_NAMES = \{/ { on = 1; next } on && /^\};/ { exit }
    on && match($0, /LLM_ARCH_[A-Z0-9_]+/) { a = substr($0, RSTART, RLENGTH); if (match($0, /"[^"]+"/)) print a "\t" substr($0, RSTART + 1, RLENGTH - 2) }' "$1/llama/src/llama-arch.cpp" | sort
}
archs() { arch_names "$1" | cut -f2 | sort -u; }
archs "$base/pristine" >"$base/archs"
archs "$new/pristine" >"$new/archs"
tables=$(sed -n 's/^var \([A-Za-z0-9_]*\) = map\[string\]bool{.*/\1/p' "$top/llama/precheck/model.go")
table() { awk -v t="$1" '$0 ~ "^var " t " = map\\[string\\]bool\\{" { on = 1; next } on && /^\}/ { exit } on { while (match($0, /"[^"]+"/)) { print substr($0, RSTART + 1, RLENGTH - 2); $0 = substr($0, RSTART + RLENGTH) } }' "$top/llama/precheck/model.go" | sort -u; }

# ropeEqualsHead re-read from a tree: the architectures whose graph builder
# (models/*.cpp) asserts GGML_ASSERT(n_embd_head == n_rot), through
# llama-model.cpp's dispatch from LLM_ARCH_* to the builder's class
# (build_graph's make_unique<llm_build_*> in the pin, llama_model_mapping's
# new llama_model_* later, whose subclasses without a graph of their own
# (models/models.h) use their parent's). A heuristic: it is checked against
# the table on the pinned tree in the report.
rope_archs() { # rope_archs TREE: TREE/pristine's, with its work files in TREE
  local t=$1/pristine/llama/src
  grep -lE '^[[:space:]]*GGML_ASSERT\(n_embd_head == (hparams\.)?n_rot(\(\))?\);' "$t"/models/*.cpp |
    xargs grep -hEo '\b(llm_build|llama_model)_[a-z0-9_]+(<[^>]*>)?::' | sed -E 's/(<.*)?::$//' | sort -u >"$1/rope-classes"
  if [ -f "$t/models/models.h" ]; then
    { grep -hEo '\bllama_model_[a-z0-9_]+::graph(<[^>]*>)?::graph\(' "$t"/models/*.cpp || true; } | sed 's/::.*//' | sort -u >"$1/own-graph"
    sed -nE 's/^struct (llama_model_[a-z0-9_]+) : public (llama_model_[a-z0-9_]+) \{.*/\1\t\2/p' "$t/models/models.h" >"$1/parents"
    for _ in 1 2; do
      awk -F'\t' 'FILENAME ~ /rope-classes$/ { r[$1] = 1; print; next } FILENAME ~ /own-graph$/ { own[$1] = 1; next }
        ($2 in r) && !($1 in own) { print $1 }' "$1/rope-classes" "$1/own-graph" "$1/parents" | sort -u >"$1/rope-classes.new"
      mv "$1/rope-classes.new" "$1/rope-classes"
    done
  fi
  awk '
    /^ggml_cgraph \* llama_model::build_graph\(|^static llama_model \* llama_model_mapping\(/ { on = 1; next }
    on && /^\}/ { on = 0 }
    !on { next }
    match($0, /case LLM_ARCH_[A-Z0-9_]+:/) { pend[substr($0, RSTART + 5, RLENGTH - 6)] = 1; next }
    match($0, /(make_unique<|new )(llm_build|llama_model)_[a-z0-9_]+/) {
      c = substr($0, RSTART, RLENGTH); sub(/^(make_unique<|new )/, "", c)
      for (a in pend) print a "\t" c
    }
    /break;|return / { delete pend }
  ' "$t/llama-model.cpp" | sort -u >"$1/dispatch"
  awk -F'\t' 'NR == FNR { ok[$1] = 1; next } ($2 in ok) { print $1 }' "$1/rope-classes" "$1/dispatch" | sort -u |
    join -t$'\t' - <(arch_names "$1/pristine") |
    cut -f2 | sort -u
}
rope_archs "$base" >"$base/rope-archs"
rope_archs "$new" >"$new/rope-archs"

# like NAME: the names on stdin with as many _-separated words as NAME, each
# word one of NAME's or starting with it (llama_set_adapters_lora for
# llama_set_adapter_lora).
like() {
  awk -v want="$1" 'BEGIN { n = split(want, w, "_") }
    { if (split($0, v, "_") != n) next; for (i = 1; i <= n; i++) if (index(v[i], w[i]) != 1 && index(w[i], v[i]) != 1) next; s = s " `" $0 "`" }
    END { print substr(s, 2) }'
}
list() { local s; s=$(tr '\n' ' ' <"$1"); s=${s% }; [ -n "$s" ] && printf '%s' "$s" || printf 'none'; }
count() { awk -F'\t' -v s="$2" '$2 == s' "$1/status" | wc -l; }
fuzzed=$(count "$base" fuzz) fuzznote=
[ "$fuzzed" = 0 ] || fuzznote=" (and $fuzzed only with fuzz)"
report="$out/report.md"
{
  echo "# llama.cpp bump check: $source"
  echo
  echo "Nothing was built: this is what the patches, the cgo calls and the pre-check's tables meet in the new tree."
  echo
  echo "| | pinned | new |"
  echo "|---|---|---|"
  echo "| source | $(field source "$base") | $(field source "$new") |"
  echo "| llama.cpp commit | $(field commit "$base") | $(field commit "$new") |"
  echo "| checksum | $(field checksum "$base") | $(field checksum "$new") |"
  echo "| patches clean / with offsets / failing | $(count "$base" clean) / $(count "$base" offsets) / $(count "$base" fails)$fuzznote | $(count "$new" clean) / $(count "$new" offsets) / $(count "$new" fails) |"
  echo
  echo "## Patches (patch -p1 -F0, in order; each one that applies is applied before the next is tried)"
  echo
  echo "A patch after a failing one may fail only because the earlier one is missing."
  echo
  echo "| patch | pinned tree | new tree |"
  echo "|---|---|---|"
  join -t$'\t' "$base/status" "$new/status" | awk -F'\t' '{ printf "| %s | %s%s | %s%s |\n", $1, $2, ($3 != "" ? " (" $3 ")" : ""), $4, ($5 != "" ? " (" $5 ")" : "") }'
  echo
  echo "## Failing hunks on the new tree"
  echo
  echo "| patch | file | hunk | function (hunk header) | in the new tree |"
  echo "|---|---|---|---|---|"
  failing
  echo
  echo "## Functions our cgo code calls that the new tree's headers lack"
  echo
  echo "$(wc -l <"$out/relied") llama_*/ggml_*/gguf_* functions are called from llama/*.go and csrc/ and declared in the pinned tree's headers ($(comm -23 "$out/relied" "$base/decl-pristine" | wc -l) of them added by our patches)."
  echo
  echo "Upstream's, gone from the new tree: $(wc -l <"$new/missing-functions")"
  echo
  if [ -s "$new/missing-functions" ]; then
    echo "| function | new functions like it |"
    echo "|---|---|"
    while read -r f; do echo "| \`$f\` | $(like "$f" <"$new/added-functions") |"; done <"$new/missing-functions"
    echo
  fi
  echo "Ours, missing because their patch does not apply: $(sed 's/.*/`&`/' "$new/missing-ours" | list /dev/stdin)"
  echo
  echo "Deprecated in the new tree: ${deprecated:-none}"
  echo
  echo "Other names (types, enum values) our Go code uses that the new tree's headers lack: $(list "$new/missing-names")"
  echo
  echo "## Architectures (src/llama-arch.cpp, LLM_ARCH_NAMES)"
  echo
  echo "Pinned: $(wc -l <"$base/archs"); new: $(wc -l <"$new/archs")."
  echo
  echo "New in the new tree: $(comm -13 "$base/archs" "$new/archs" | list /dev/stdin)"
  echo
  echo "Gone from the new tree: $(comm -23 "$base/archs" "$new/archs" | list /dev/stdin)"
  echo
  : >"$out/table-ropeEqualsHead"
  for t in $tables; do
    table "$t" >"$out/table-$t"
    echo "llama/precheck/model.go's \`$t\` ($(wc -l <"$out/table-$t") names): not in the new tree: $(comm -23 "$out/table-$t" "$new/archs" | list /dev/stdin)"
    echo
  done
  echo "\`ropeEqualsHead\` re-read from each tree (the architectures whose graph builder in models/*.cpp asserts \`n_embd_head == n_rot\`, followed through llama-model.cpp's dispatch; a heuristic):"
  echo
  echo "| tree | asserting | not in the table | in the table, not asserting |"
  echo "|---|---|---|---|"
  for t in "$base" "$new"; do
    echo "| $([ "$t" = "$base" ] && echo pinned || echo new) | $(wc -l <"$t/rope-archs") | $(comm -23 "$t/rope-archs" "$out/table-ropeEqualsHead" | list /dev/stdin) | $(comm -13 "$t/rope-archs" "$out/table-ropeEqualsHead" | list /dev/stdin) |"
  done
} >"$report"
cat "$report"
echo "llama.cpp: the report is in ${report#"$top"/}" >&2
