#!/usr/bin/env bash
# A CONFCLIP_CPU_VARIANTS build (cmake/cpu-variants.cmake) has ggml's CPU
# backend once per x86-64 variant, every copy defining the same symbols. Each
# copy's global symbols (definitions and the references to them) get the
# variant's name as a prefix (objcopy --redefine-syms), and the copies and the
# dispatcher (csrc/cpu-variants.c, which defines ggml_backend_cpu_reg) are
# merged into LIBDIR/libggml-cpu.a, which links where the single-variant one
# did.
#   scripts/cpu-variants.sh BUILD LIBDIR
set -euo pipefail
build=$1 libdir=$2
names=$(cat "$build/cpu-variants.txt")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mri="CREATE $tmp/libggml-cpu.a"
for name in ${names//;/ }; do
  if [ "$name" = x64 ]; then lib=$(find "$build/ggml" -name libggml-cpu.a | head -1)
  else lib=$(find "$build" -name "libggml-cpu-$name.a" -not -path "$libdir/*" | head -1); fi
  [ -n "$lib" ] || { echo "cpu-variants: no library for variant $name in $build" >&2; exit 1; }
  # Every defined global symbol (nm's POSIX format: "symbol type value
  # size"), and every COMDAT group's signature: C++ inline functions and
  # constructors sit in groups the linker keeps one of by signature, and some
  # signatures (a constructor's C5 group) are local symbols; left alone, the
  # first variant's group would be kept and the others' symbols in it lost.
  { nm --defined-only -g --format=posix "$lib" | awk 'NF >= 2 && $2 != "U" { print $1 }'
    readelf -gW "$lib" | sed -n "s/^COMDAT group section \[ *[0-9]*\] \`[^']*' \[\(.*\)\] contains.*/\1/p"
  } | sort -u | awk -v p="${name}_" '{ print $1, p $1 }' >"$tmp/$name.map"
  grep -q '^ggml_backend_cpu_reg ' "$tmp/$name.map" || { echo "cpu-variants: $lib defines no ggml_backend_cpu_reg" >&2; exit 1; }
  grep -q '^ggml_backend_score ' "$tmp/$name.map" || { echo "cpu-variants: $lib defines no ggml_backend_score" >&2; exit 1; }
  objcopy --redefine-syms="$tmp/$name.map" "$lib" "$tmp/$name.a"
  mri+=$'\n'"ADDLIB $tmp/$name.a"
done
dispatch=$(find "$build" -name libconfclip-cpu-dispatch.a -not -path "$libdir/*" | head -1)
[ -n "$dispatch" ] || { echo "cpu-variants: no libconfclip-cpu-dispatch.a in $build" >&2; exit 1; }
mri+=$'\n'"ADDLIB $dispatch"$'\n'"SAVE"$'\n'"END"
ar -M <<<"$mri"
mv -f "$tmp/libggml-cpu.a" "$libdir/libggml-cpu.a"
echo "llama.cpp: CPU variants ${names//;/, } in $libdir/libggml-cpu.a" >&2
