#!/usr/bin/env bash
# The symbol versions of libbackplane.so (host/libbackplane.map), checked on
# the built library: every function carries the node of the minor that added
# it and nothing else is exported; an application that needs the newest
# minor runs against this library and fails at load against a stand-in of
# the minor before, naming the node it lacks. Registered by
# tests/abi/CMakeLists.txt (ctest label abi).
#
# A library without symbol versions (1.0 and 1.1 were built so) cannot
# refuse at load: the loader only warns, and the newer function fails at its
# first call, or at load under LD_BIND_NOW=1 / -Wl,-z,now; checked too.
set -euo pipefail

library="" app="" previous_dir="" unversioned_dir="" newest_node="" map="" header="" readelf=readelf
while [ $# -gt 0 ]; do
  case "$1" in
    --library) library=$2 ;;
    --app) app=$2 ;;
    --previous-library-dir) previous_dir=$2 ;;
    --unversioned-library-dir) unversioned_dir=$2 ;;
    --newest-node) newest_node=$2 ;;
    --map) map=$2 ;;
    --header) header=$2 ;;
    --readelf) readelf=$2 ;;
    *) echo "symbol_versions_test: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$library" ] && [ -n "$app" ] && [ -n "$previous_dir" ] && [ -n "$unversioned_dir" ] && [ -n "$newest_node" ] && [ -n "$map" ] &&
  [ -n "$header" ] || { echo "symbol_versions_test: missing arguments" >&2; exit 2; }

failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# What the map says: "name node" per function, and the nodes in order.
awk '/^BACKPLANE_[0-9]+\.[0-9]+ *\{/ { node = $1 }
     node && /^ +bp_[a-z0-9_]+;/ { gsub(/[ ;]/, ""); print $0, node }' "$map" | sort >"$work/map.txt"
# What the library exports: "name node" per defined dynamic symbol, apart
# from the version definitions themselves (BACKPLANE_1.x, absolute).
"$readelf" --dyn-syms --wide "$library" |
  awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && !($7 == "ABS" && $8 ~ /^BACKPLANE_[0-9.]+$/) { print $8 }' |
  awk -F'@@?' '{ print $1, ($2 == "" ? "(no version)" : $2) }' | sort >"$work/exported.txt"

# 1. Nothing but bp_* functions.
if grep -v '^bp_' "$work/exported.txt" >"$work/foreign.txt"; then
  fail "libbackplane exports symbols that are not bp_* functions:"
  sed 's/^/    /' "$work/foreign.txt"
fi

# 2. Exactly the map's functions, each with its node's version.
if ! diff "$work/map.txt" "$work/exported.txt" >"$work/diff.txt"; then
  fail "exported symbols differ from host/libbackplane.map (< map, > library):"
  sed 's/^/    /' "$work/diff.txt"
fi
for expected in "bp_host_create BACKPLANE_1.0" "bp_group_route BACKPLANE_1.1" "bp_api_version BACKPLANE_1.2" "bp_device_wrap BACKPLANE_1.3" "bp_group_plan BACKPLANE_1.4"; do
  grep -qx "$expected" "$work/exported.txt" || fail "expected ${expected% *}@@${expected#* } in $library"
done

# 3. The map names exactly the functions backplane.h declares, and its
#    newest node is the header's minor.
grep -oE '^BP_API [^(]*[^a-z0-9_]bp_[a-z0-9_]+\(' "$header" | grep -oE 'bp_[a-z0-9_]+\($' | tr -d '(' |
  sort >"$work/declared.txt"
if ! diff "$work/declared.txt" <(cut -d' ' -f1 "$work/map.txt" | sort) >"$work/diff.txt"; then
  fail "backplane.h and host/libbackplane.map name different functions (< header, > map):"
  sed 's/^/    /' "$work/diff.txt"
fi
major=$(awk '$1 == "#define" && $2 == "BP_API_VERSION_MAJOR" { print $3 }' "$header")
minor=$(awk '$1 == "#define" && $2 == "BP_API_VERSION_MINOR" { print $3 }' "$header")
[ "$newest_node" = "BACKPLANE_$major.$minor" ] ||
  fail "the map's newest node is $newest_node, but backplane.h is API $major.$minor"

# 4. Each node inherits the one before (readelf -V: "Parent 1: ...").
"$readelf" -V --wide "$library" | awk '
  /Name: BACKPLANE_/ { sub(/.*Name: /, ""); node = $1; next }
  /Parent 1: / && node { sub(/.*Parent 1: /, ""); print node, $1; node = "" }' >"$work/parents.txt"
awk '/^BACKPLANE_[0-9]+\.[0-9]+ *\{/ { if (previous) print $1, previous; previous = $1 }' "$map" >"$work/expected-parents.txt"
if ! diff "$work/expected-parents.txt" "$work/parents.txt" >"$work/diff.txt"; then
  fail "the version nodes' inheritance differs (< expected, > library):"
  sed 's/^/    /' "$work/diff.txt"
fi

# 5. The application runs against this library ...
library_dir=$(dirname "$library")
if output=$(LD_LIBRARY_PATH="$library_dir" "$app" 2>&1); then
  echo "against $library: runs, prints '$output'"
  [ "$output" = "$major.$minor OK" ] || fail "expected '$major.$minor OK' from $app, got '$output'"
else
  fail "$app does not run against $library: $output"
fi
# ... and fails at load against the previous minor's, naming the node.
status=0
output=$(LD_LIBRARY_PATH="$previous_dir" "$app" 2>&1) || status=$?
echo "against $previous_dir/libbackplane.so.1 (no $newest_node): status $status: $output"
if [ "$status" = 0 ]; then
  fail "$app ran against a library without $newest_node"
elif ! grep -q "version \`$newest_node' not found" <<<"$output"; then
  fail "the loader's refusal does not name $newest_node"
fi
# ... and, bound at load, against an unversioned one like 1.0 and 1.1.
status=0
output=$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$unversioned_dir" "$app" 2>&1) || status=$?
echo "against $unversioned_dir/libbackplane.so.1 (no versions), LD_BIND_NOW=1: status $status: $output"
if [ "$status" = 0 ]; then
  fail "$app ran against a library without its newest function"
elif ! grep -q "version $newest_node" <<<"$output"; then
  fail "the loader's refusal does not name $newest_node"
fi

if [ "$failures" != 0 ]; then
  echo "symbol_versions_test: $failures check(s) failed"
  exit 1
fi
echo "symbol_versions_test: $(wc -l <"$work/exported.txt") functions, each in its minor's node; older libraries refuse newer applications at load"
