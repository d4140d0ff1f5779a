# Sourced by llama-source.sh and llama-bump-check.sh: how a patch of
# third_party/patches is tried on a llama.cpp tree without fuzz, and what
# GNU patch said about each hunk.

# PATCH_STRICT are patch's options for a tree other than the pinned one: no
# fuzz (-F0: every context line must match, only offsets pass), a patch that
# is already in the tree is reported, not reversed (-N), and no questions (-t).
PATCH_STRICT=(-p1 -F0 -N -t)

# patch_try DIR PATCH: a dry run of PATCH on DIR; prints patch's output and
# returns its status.
patch_try() {
  patch "${PATCH_STRICT[@]}" --dry-run -d "$1" -i "$2" </dev/null 2>&1
}

# patch_apply DIR PATCH applies PATCH on DIR for real.
patch_apply() {
  patch -s "${PATCH_STRICT[@]}" -d "$1" -i "$2" </dev/null
}

# patch_results reads patch's output and prints one tab-separated row per
# hunk or file: FILE, HUNK (a number, or - for the whole file), STATE (ok,
# offset, fuzz, failed, missing: the file is not in the tree, reversed: the
# patch looks applied already) and DETAIL (the offset, or the hunks skipped).
patch_results() {
  awk '
    /^(checking|patching) file / { file = substr($0, index($0, "file ") + 5); gsub(/^'\''|'\''$/, "", file); next }
    /^\|\+\+\+ / { pending = $2; sub(/^b\//, "", pending); next }
    /^Hunk #[0-9]+ succeeded/ {
      h = $2; sub(/#/, "", h)
      if (match($0, /with fuzz [0-9]+/)) { print file "\t" h "\tfuzz\t" substr($0, RSTART + 10, RLENGTH - 10); next }
      if (match($0, /offset -?[0-9]+ line/)) { n = substr($0, RSTART + 7, RLENGTH - 12); print file "\t" h "\toffset\t" (n > 0 ? "+" n : n); next }
      print file "\t" h "\tok\t"; next
    }
    /^Hunk #[0-9]+ FAILED/ { h = $2; sub(/#/, "", h); print file "\t" h "\tfailed\t"; next }
    /^Reversed \(or previously applied\) patch detected/ { reversed = 1; next }
    /^No file to patch/ { missing = 1; next }
    /hunks? ignored/ {
      if (missing) print pending "\t-\tmissing\t" $1 " of " $4 " hunk" ($4 > 1 ? "s" : "")
      else if (reversed) print file "\t-\treversed\t" $1 " of " $4 " hunk" ($4 > 1 ? "s" : "")
      missing = reversed = 0
    }
  '
}

# patch_hunks PATCH prints one tab-separated row per hunk of PATCH: FILE,
# HUNK (numbered per file, as patch numbers them), the line it starts at in
# the old file, and the hunk header's function context (the text after the
# second @@), so a failing hunk can be named by the function it changes.
patch_hunks() {
  awk '
    old > 0 || new > 0 {
      c = substr($0, 1, 1)
      if (c == " " || c == "") { old--; new-- } else if (c == "-") old--; else if (c == "+") new--
      next
    }
    /^\+\+\+ / { file = $2; sub(/^b\//, "", file); hunk = 0; next }
    /^@@ -[0-9]/ {
      hunk++
      split($2, o, ","); split($3, n, ",")
      old = (2 in o) ? o[2] + 0 : 1; new = (2 in n) ? n[2] + 0 : 1
      ctx = $0; sub(/^@@ [^@]* @@ ?/, "", ctx)
      print file "\t" hunk "\t" substr(o[1], 2) "\t" ctx
    }
  ' "$1"
}

# The layers of third_party/patches, applied in this order (README.md there).
PATCH_LAYERS=(training cpu backends)

# PATCH_DEPS: which patches build on which (patch:dependents), the same as
# third_party/patches/README.md says; dropping a patch drops those that
# build on it, so that every patch can be left out alone.
PATCH_DEPS="0031:0034,0037,0038,0044,0062 0043:0059 0034:0037 0037:0062 0035:0044 0038:0044,0062 0044:0062 0009:0039 0039:0057 0010:0011,0012,0041,0045,0056,0057 0012:0056 0045:0056,0060 0056:0057 0057:0058"

# drop_set prints what LLAMA_DROP names (patch numbers such as 0044, or
# layer names; spaces or commas between) with the patches that build on
# those (PATCH_DEPS), space-separated.
drop_set() {
  local dep d list more=1 drop=" ${LLAMA_DROP:-} "
  drop=${drop//,/ }
  while [ $more = 1 ]; do
    more=0
    for dep in $PATCH_DEPS; do
      [[ $drop == *" ${dep%%:*} "* ]] || continue
      list=${dep#*:}
      for d in ${list//,/ }; do
        [[ $drop == *" $d "* ]] || { drop="$drop$d "; more=1; }
      done
    done
  done
  echo $drop
}

# patch_list DIR prints the paths of DIR's patches in the order they go on:
# layer by layer, each in file-name order, leaving out drop_set's.
patch_list() {
  local dir=$1 layer p n drop=" $(drop_set) "
  for layer in "${PATCH_LAYERS[@]}"; do
    [[ $drop == *" $layer "* ]] && continue
    for p in "$dir/$layer"/*.patch; do
      [ -e "$p" ] || continue
      n=$(basename "$p"); n=${n%%-*}
      [[ $drop == *" $n "* ]] && continue
      printf '%s\n' "$p"
    done
  done
}
