#!/usr/bin/env bash
# The ABI guard: abidiff of this tree's ABI against each release's, kept in
# tests/abi/ as headers-1.N.abi (the types and signatures of both public
# ABIs, from abi_probe.c built on the release's headers) and
# libbackplane-1.N.abi (the bp_* symbols the release's library exported).
# Registered with ctest by tests/abi/CMakeLists.txt (label abi).
#
#   abi_guard.sh check     --source-dir DIR --library LIB --work-dir DIR [--cc CC] [--objcopy OBJCOPY]
#       Fails on any change abidiff reports against a release that
#       abi.abignore does not allow; additions are fine. Exit 77 (ctest:
#       skipped) when abidiff is not installed.
#   abi_guard.sh self-test --source-dir DIR --work-dir DIR [--cc CC]
#       Shows that check can fail: breaks scratch copies of the headers (a
#       field inserted mid-struct, a changed signature, a renumbered enum, a
#       struct grown without a suppression, a removed function) and expects
#       each to be refused, and the unbroken copy to pass.
#   abi_guard.sh dump      --source-dir RELEASE_TREE --library RELEASE_LIB --minor N --out-dir DIR [--cc CC]
#       Writes headers-1.N.abi and libbackplane-1.N.abi for a release: run it
#       on a worktree of the release commit and that commit's libbackplane.so
#       (see tests/abi/README.md).
set -euo pipefail

mode=${1:-}
[ $# -gt 0 ] && shift
source_dir="" library="" work_dir="" out_dir="" minor="" cc="${CC:-cc}" objcopy=objcopy
while [ $# -gt 0 ]; do
  case "$1" in
    --source-dir) source_dir=$2 ;;
    --library) library=$2 ;;
    --work-dir) work_dir=$2 ;;
    --out-dir) out_dir=$2 ;;
    --minor) minor=$2 ;;
    --cc) cc=$2 ;;
    --objcopy) objcopy=$2 ;;
    *) echo "abi_guard: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift 2
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
map="$here/../../host/libbackplane.map"
suppressions="$here/abi.abignore"

# abidiff's exit status is a bit field (libabigail's abidiff manual).
readonly ABIDIFF_ERROR=1 ABIDIFF_USAGE_ERROR=2 ABIDIFF_ABI_CHANGE=4 ABIDIFF_ABI_INCOMPATIBLE_CHANGE=8

need_abigail() {
  local tool
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "abi_guard: SKIPPED: '$tool' is not installed (Debian package abigail-tools, see tools/install-deps.sh)"
      exit 77
    fi
  done
}

# The functions of host/libbackplane.map, one a line, from the nodes up to
# BACKPLANE_1.<max_minor> (all of them without max_minor).
map_functions() {
  local max_minor=${1:-}
  awk -v max="$max_minor" '
    /^BACKPLANE_[0-9]+\.[0-9]+ *\{/ { split(substr($1, 11), v, "."); keep = (max == "" || v[2] + 0 <= max + 0) }
    keep && /^ +bp_[a-z0-9_]+;/ { gsub(/[ ;]/, ""); print }' "$map"
}

# build_probe INCLUDE_ROOT FUNCTION_LIST OUT.so: abi_probe.c against the
# headers under INCLUDE_ROOT/{host,plugin_api}/include (or INCLUDE_ROOT/include).
build_probe() {
  local root=$1 functions=$2 out=$3 dir
  dir=$(dirname "$out")
  mkdir -p "$dir"
  sed 's/.*/BP_ABI_FUNCTION(&)/' "$functions" >"$dir/abi_probe_functions.h"
  cp "$here/abi_probe.c" "$dir/abi_probe.c"
  local includes=()
  if [ -d "$root/include" ]; then
    includes=(-I "$root/include")
  else
    includes=(-I "$root/host/include" -I "$root/plugin_api/include")
  fi
  # Relative source, so the dump names no machine's paths.
  (cd "$dir" && "$cc" -std=c99 -Wall -Wextra -Wpedantic -Werror -g -O0 -fPIC -shared -fvisibility=hidden \
     -I . "${includes[@]}" abi_probe.c -o "$(basename "$out")")
}

# compare REFERENCE ELF: 0 when abidiff finds nothing against REFERENCE but
# additions and what abi.abignore allows; prints abidiff's report else.
compare() {
  local reference=$1 elf=$2 status=0 report
  report=$(abidiff --no-added-syms --fail-no-debug-info --suppressions "$suppressions" "$reference" "$elf" 2>&1) ||
    status=$?
  if [ "$status" -ne 0 ]; then
    echo "$report" | sed 's/^/    /'
    if ((status & ABIDIFF_ERROR)); then
      ((status & ABIDIFF_USAGE_ERROR)) && echo "  abidiff was called wrongly (status $status)" ||
        echo "  abidiff could not compare (status $status)"
    elif ((status & ABIDIFF_ABI_INCOMPATIBLE_CHANGE)); then
      echo "  INCOMPATIBLE (status $status): something $(basename "$reference") has is gone"
    elif ((status & ABIDIFF_ABI_CHANGE)); then
      echo "  CHANGED (status $status): a released type or signature changed in a way abi.abignore does not allow"
    fi
  fi
  return "$status"
}

# compare_symbols REFERENCE LIBRARY: the same for the exported symbols alone;
# the library's own debug info describes its C++ insides, so it is left out.
compare_symbols() {
  local reference=$1 lib=$2 stripped status=0 report
  stripped="$work_dir/$(basename "$lib").symbols-only"
  "$objcopy" --strip-debug "$lib" "$stripped"
  report=$(abidiff --no-added-syms "$reference" "$stripped" 2>&1) || status=$?
  if [ "$status" -ne 0 ]; then
    echo "$report" | sed 's/^/    /'
    if ((status & ABIDIFF_ABI_INCOMPATIBLE_CHANGE)); then
      echo "  INCOMPATIBLE (status $status): the library lost a function $(basename "$reference") exported"
    else
      echo "  abidiff status $status"
    fi
  fi
  return "$status"
}

releases() {
  local file found=0
  for file in "$here"/headers-1.*.abi; do
    [ -e "$file" ] || continue
    found=1
    file=$(basename "$file" .abi)
    echo "${file#headers-}"
  done
  [ "$found" = 1 ] || { echo "abi_guard: no tests/abi/headers-1.*.abi" >&2; exit 1; }
}

case "$mode" in
check)
  [ -n "$source_dir" ] && [ -n "$library" ] && [ -n "$work_dir" ] || { echo "abi_guard check: missing arguments" >&2; exit 2; }
  need_abigail abidiff
  mkdir -p "$work_dir"
  map_functions >"$work_dir/functions.txt"
  build_probe "$source_dir" "$work_dir/functions.txt" "$work_dir/probe/libbackplane_abi_probe.so"
  failed=0
  for release in $(releases); do
    echo "abi_guard: headers against ${release} (headers-${release}.abi)"
    compare "$here/headers-${release}.abi" "$work_dir/probe/libbackplane_abi_probe.so" || failed=1
    if [ -e "$here/libbackplane-${release}.abi" ]; then
      echo "abi_guard: $(basename "$library") against ${release} (libbackplane-${release}.abi)"
      compare_symbols "$here/libbackplane-${release}.abi" "$library" || failed=1
    fi
  done
  if [ "$failed" = 1 ]; then
    echo "abi_guard: FAILED: the change above breaks a released ABI. Append fields at a struct's end and"
    echo "add functions in a new minor's node; a change that is safe anyway gets a commented entry in"
    echo "tests/abi/abi.abignore."
    exit 1
  fi
  echo "abi_guard: compatible with every release"
  ;;

self-test)
  [ -n "$source_dir" ] && [ -n "$work_dir" ] || { echo "abi_guard self-test: missing arguments" >&2; exit 2; }
  need_abigail abidiff
  reference="$here/headers-$(releases | sort -t. -k2,2n | tail -n 1).abi"
  rm -rf "$work_dir" && mkdir -p "$work_dir"
  map_functions >"$work_dir/functions.txt"
  failures=0
  # one_case NAME EXPECTED_BITS FILE SED_SCRIPT [FUNCTIONS]: breaks FILE (a
  # header, relative to backplane/) in a scratch copy and expects compare to
  # report EXPECTED_BITS (0: must pass).
  one_case() {
    local name=$1 expected=$2 file=$3 script=$4 functions=${5:-$work_dir/functions.txt}
    local dir="$work_dir/$name" status=0
    mkdir -p "$dir/include/backplane"
    cp "$source_dir"/host/include/backplane/*.h "$source_dir"/plugin_api/include/backplane/*.h "$dir/include/backplane/"
    if [ -n "$file" ]; then
      sed -i -e "$script" "$dir/include/backplane/$file"
      if cmp -s "$dir/include/backplane/$file" "$source_dir"/*/include/backplane/"$file"; then
        echo "abi_guard self-test: $name: the edit no longer applies to $file; update the case"
        failures=$((failures + 1))
        return
      fi
    fi
    build_probe "$dir" "$functions" "$dir/probe/libbackplane_abi_probe.so"
    compare "$reference" "$dir/probe/libbackplane_abi_probe.so" >"$dir/report.txt" || status=$?
    if { [ "$expected" = 0 ] && [ "$status" != 0 ]; } || { [ "$expected" != 0 ] && ((!(status & expected))); }; then
      echo "abi_guard self-test: $name: FAILED: expected abidiff bits $expected, got status $status"
      sed 's/^/  /' "$dir/report.txt"
      failures=$((failures + 1))
    else
      echo "abi_guard self-test: $name: status $status as expected"
      [ "$expected" = 0 ] || grep -v summary "$dir/report.txt" | grep -m 2 -E "changed (from|to)|insertion|\[D\]|\[C\]|offset" |
        sed 's/^ */      /' || true
    fi
  }
  one_case unbroken 0 "" ""
  # A field inserted mid-struct moves every field after it.
  one_case field-inserted-mid-struct $ABIDIFF_ABI_CHANGE backplane.h \
    '/^typedef struct bp_device_info {$/a\  uint64_t inserted_by_abi_guard_self_test;'
  # The same in a struct whose growth at the end abi.abignore allows.
  one_case field-inserted-mid-allowed-struct $ABIDIFF_ABI_CHANGE backplane.h \
    '/^typedef struct bp_capability_info {$/a\  uint32_t inserted_by_abi_guard_self_test;'
  # Growth at the end of a struct abi.abignore does not name: reviewed, not waved through.
  one_case struct-grown-without-suppression $ABIDIFF_ABI_CHANGE backplane.h \
    '/^} bp_collective_request;$/i\  uint64_t appended_by_abi_guard_self_test;'
  one_case return-type-changed $ABIDIFF_ABI_CHANGE backplane.h \
    's/^BP_API size_t bp_dtype_size(/BP_API uint32_t bp_dtype_size(/'
  one_case parameter-type-changed $ABIDIFF_ABI_CHANGE backplane.h \
    's/^BP_API bp_error \*bp_buffer_create(bp_device \*device, size_t bytes,/BP_API bp_error *bp_buffer_create(bp_device *device, uint32_t bytes,/'
  one_case enum-renumbered $ABIDIFF_ABI_CHANGE types.h 's/^  BP_INVALID_ARGUMENT = 1,/  BP_INVALID_ARGUMENT = 100,/'
  # A function gone from the header and the map.
  grep -vx bp_group_route "$work_dir/functions.txt" >"$work_dir/functions-without-route.txt"
  one_case function-removed $ABIDIFF_ABI_INCOMPATIBLE_CHANGE backplane.h \
    '/^BP_API const char \*bp_group_route(/d' "$work_dir/functions-without-route.txt"
  # The library's symbols, with stand-ins built from the map's names: one
  # with every function of the newest release, one that lost bp_group_route.
  symbols_case() {
    local name=$1 expected=$2 functions=$3 dir="$work_dir/$1" status=0
    mkdir -p "$dir"
    sed 's/.*/void &(void) {}/' "$functions" >"$dir/stand_in.c"
    "$cc" -shared -fPIC -Wl,-soname,libbackplane.so.1 "$dir/stand_in.c" -o "$dir/libbackplane.so.1"
    compare_symbols "$here/libbackplane-$(releases | sort -t. -k2,2n | tail -n 1).abi" "$dir/libbackplane.so.1" \
      >"$dir/report.txt" || status=$?
    if { [ "$expected" = 0 ] && [ "$status" != 0 ]; } || { [ "$expected" != 0 ] && ((!(status & expected))); }; then
      echo "abi_guard self-test: $name: FAILED: expected abidiff bits $expected, got status $status"
      sed 's/^/  /' "$dir/report.txt"
      failures=$((failures + 1))
    else
      echo "abi_guard self-test: $name: status $status as expected"
      [ "$expected" = 0 ] || grep -A2 -E "Removed function symbol" "$dir/report.txt" | sed 's/^ */      /' || true
    fi
  }
  symbols_case library-unbroken 0 "$work_dir/functions.txt"
  symbols_case library-lost-a-function $ABIDIFF_ABI_INCOMPATIBLE_CHANGE "$work_dir/functions-without-route.txt"
  if [ "$failures" != 0 ]; then
    echo "abi_guard self-test: $failures case(s) failed"
    exit 1
  fi
  echo "abi_guard self-test: the guard refuses every break tried, and passes the unbroken headers"
  ;;

dump)
  [ -n "$source_dir" ] && [ -n "$library" ] && [ -n "$minor" ] && [ -n "$out_dir" ] ||
    { echo "abi_guard dump: missing arguments" >&2; exit 2; }
  need_abigail abidw
  work_dir=$(mktemp -d)
  trap 'rm -rf "$work_dir"' EXIT
  release="1.$minor"
  map_functions "$minor" >"$work_dir/functions.txt"
  # The release's library must export exactly these bp_* functions.
  nm -D --defined-only "$library" | awk '$3 ~ /^bp_/ { sub(/@.*/, "", $3); print $3 }' | sort >"$work_dir/exported.txt"
  if ! diff <(sort "$work_dir/functions.txt") "$work_dir/exported.txt"; then
    echo "abi_guard dump: $library does not export what the map's nodes up to BACKPLANE_$release name (< map, > library)" >&2
    exit 1
  fi
  build_probe "$source_dir" "$work_dir/functions.txt" "$work_dir/probe/libbackplane_abi_probe.so"
  common=(--no-corpus-path --no-comp-dir-path --short-locs --type-id-style hash)
  abidw "${common[@]}" "$work_dir/probe/libbackplane_abi_probe.so" --out-file "$out_dir/headers-$release.abi"
  # Only the bp_* functions: the 1.0 and 1.1 libraries also exported C++
  # template instances by accident, which no application can have needed.
  { echo "[abi_whitelist]"; sed 's/^/  /' "$work_dir/functions.txt"; } >"$work_dir/whitelist.txt"
  "$objcopy" --strip-debug "$library" "$work_dir/library.so"
  abidw "${common[@]}" --no-elf-needed -w "$work_dir/whitelist.txt" "$work_dir/library.so" --out-file "$out_dir/libbackplane-$release.abi"
  echo "abi_guard dump: wrote $out_dir/headers-$release.abi and $out_dir/libbackplane-$release.abi"
  ;;

*)
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
