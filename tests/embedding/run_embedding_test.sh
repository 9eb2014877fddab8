#!/bin/sh
# Installs the build tree into a fresh prefix, checks the layout, then builds and runs a
# C program against the installed tree only: once through find_package(Backplane CONFIG),
# once through pkg-config; and builds an out-of-tree plugin with the installed
# backplane_add_plugin(), which that program then loads. Exit 77 (ctest
# SKIP_RETURN_CODE) when it cannot apply.
#
# Arguments, KEY=VALUE: cmake= build_dir= source_dir= work_dir= cc= generator=
# make_program= libdir= includedir= sanitize=
set -eu

for arg in "$@"; do
  case "$arg" in
    cmake=*) CMAKE=${arg#*=} ;;
    build_dir=*) BUILD_DIR=${arg#*=} ;;
    source_dir=*) SOURCE_DIR=${arg#*=} ;;
    work_dir=*) WORK_DIR=${arg#*=} ;;
    cc=*) CC=${arg#*=} ;;
    generator=*) GENERATOR=${arg#*=} ;;
    make_program=*) MAKE_PROGRAM=${arg#*=} ;;
    libdir=*) LIBDIR=${arg#*=} ;;
    includedir=*) INCLUDEDIR=${arg#*=} ;;
    sanitize=*) SANITIZE=${arg#*=} ;;
    *) echo "run_embedding_test.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

if [ -n "$SANITIZE" ]; then
  echo "SKIP: this build uses -fsanitize=$SANITIZE; a consumer of the installed libbackplane.so would need the"
  echo "same sanitizer runtime and flags, so the embedding test runs only in builds without BACKPLANE_SANITIZE."
  exit 77
fi

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The consumer must find everything through the installed tree alone.
unset BACKPLANE_PLUGIN_PATH LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH

rm -rf "$WORK_DIR"
mkdir -p "$WORK_DIR"
PREFIX=$(cd "$WORK_DIR" && pwd -P)/prefix

echo "== cmake --install $BUILD_DIR --prefix $PREFIX"
"$CMAKE" --install "$BUILD_DIR" --prefix "$PREFIX" > "$WORK_DIR/install.log" 2>&1 ||
  { cat "$WORK_DIR/install.log" >&2; fail "cmake --install failed"; }

echo "== installed layout"
missing=0
for file in \
  "$INCLUDEDIR/backplane/backplane.h" "$INCLUDEDIR/backplane/backplane.hpp" \
  "$INCLUDEDIR/backplane/plugin.h" "$INCLUDEDIR/backplane/types.h" \
  "$LIBDIR/libbackplane.so.1" "$LIBDIR/libbackplane.so" \
  "$LIBDIR/backplane/plugins/libbackplane_cpu.so" \
  "$LIBDIR/cmake/Backplane/BackplaneConfig.cmake" "$LIBDIR/cmake/Backplane/BackplaneConfigVersion.cmake" \
  "$LIBDIR/cmake/Backplane/BackplaneTargets.cmake" \
  "$LIBDIR/pkgconfig/backplane.pc"; do
  if [ -e "$PREFIX/$file" ]; then
    echo "  ok      $file"
  else
    echo "  MISSING $file" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || { echo "installed files:" >&2; (cd "$PREFIX" && find . | sort) >&2; fail "installed tree incomplete"; }
# No test fixture may be installed as a plugin.
for fixture in "$BUILD_DIR"/tests/fixtures/plugins/*.so; do
  [ -e "$fixture" ] || continue
  [ ! -e "$PREFIX/$LIBDIR/backplane/plugins/${fixture##*/}" ] || fail "test fixture ${fixture##*/} was installed as a plugin"
done

# Checks the consumer's output: the all-reduce passed, and the cpu plugin came
# from the installed prefix (found relative to the installed libbackplane.so).
check_run() {
  output=$1
  grep -q '^all_reduce(f32, sum) .*: ok$' "$output" || fail "no success line in the consumer's output"
  plugin_file=$(sed -n 's/^plugin cpu [^ ]* file: //p' "$output")
  [ -n "$plugin_file" ] || fail "the consumer's host loaded no cpu plugin"
  real_plugin=$(realpath "$plugin_file")
  case "$real_plugin" in
    "$PREFIX"/*) ;;
    *) fail "the cpu plugin was loaded from $real_plugin, outside the installed prefix $PREFIX" ;;
  esac
}

echo "== CMake consumer: find_package(Backplane CONFIG) with CMAKE_PREFIX_PATH=$PREFIX"
set -- -S "$SOURCE_DIR/c_consumer" -B "$WORK_DIR/cmake-consumer" -G "$GENERATOR" \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
[ -z "$MAKE_PROGRAM" ] || set -- "$@" -DCMAKE_MAKE_PROGRAM="$MAKE_PROGRAM"
"$CMAKE" "$@" || fail "configuring the CMake consumer failed"
backplane_dir=$(sed -n 's/^Backplane_DIR:PATH=//p' "$WORK_DIR/cmake-consumer/CMakeCache.txt")
case "$(realpath "$backplane_dir")" in
  "$PREFIX"/*) ;;
  *) fail "find_package found Backplane in $backplane_dir, not in $PREFIX" ;;
esac
"$CMAKE" --build "$WORK_DIR/cmake-consumer" || fail "building the CMake consumer failed"
"$WORK_DIR/cmake-consumer/c_consumer" > "$WORK_DIR/cmake-consumer.out" 2>&1 ||
  { cat "$WORK_DIR/cmake-consumer.out" >&2; fail "the CMake consumer failed"; }
cat "$WORK_DIR/cmake-consumer.out"
check_run "$WORK_DIR/cmake-consumer.out"

echo "== pkg-config consumer: PKG_CONFIG_PATH=$PREFIX/$LIBDIR/pkgconfig"
command -v pkg-config > /dev/null || fail "pkg-config is not installed"
PKG_CONFIG_PATH="$PREFIX/$LIBDIR/pkgconfig"
export PKG_CONFIG_PATH
cflags=$(pkg-config --cflags backplane) || fail "pkg-config --cflags backplane failed"
libs=$(pkg-config --libs backplane) || fail "pkg-config --libs backplane failed"
pc_libdir=$(pkg-config --variable=libdir backplane) || fail "pkg-config --variable=libdir backplane failed"
echo "  cflags: $cflags"
echo "  libs:   $libs"
echo "  libdir: $pc_libdir"
[ "$(realpath "$pc_libdir")" = "$(realpath "$PREFIX/$LIBDIR")" ] ||
  fail "backplane.pc's libdir $pc_libdir is not the installed $PREFIX/$LIBDIR"
mkdir -p "$WORK_DIR/pkgconfig-consumer"
# shellcheck disable=SC2086 # pkg-config output is a list of words
"$CC" -std=c99 -Wall -Wextra -Wpedantic -Werror $cflags "$SOURCE_DIR/c_consumer/main.c" \
  -o "$WORK_DIR/pkgconfig-consumer/c_consumer" $libs -Wl,-rpath,"$pc_libdir" ||
  fail "compiling the consumer with pkg-config's flags failed"
"$WORK_DIR/pkgconfig-consumer/c_consumer" > "$WORK_DIR/pkgconfig-consumer.out" 2>&1 ||
  { cat "$WORK_DIR/pkgconfig-consumer.out" >&2; fail "the pkg-config consumer failed"; }
cat "$WORK_DIR/pkgconfig-consumer.out"
check_run "$WORK_DIR/pkgconfig-consumer.out"

echo "== out-of-tree plugin: find_package(Backplane CONFIG) + backplane_add_plugin()"
set -- -S "$SOURCE_DIR/external_plugin" -B "$WORK_DIR/external-plugin" -G "$GENERATOR" \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_INSTALL_PREFIX="$WORK_DIR/plugin-prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
[ -z "$MAKE_PROGRAM" ] || set -- "$@" -DCMAKE_MAKE_PROGRAM="$MAKE_PROGRAM"
"$CMAKE" "$@" || fail "configuring the out-of-tree plugin failed"
"$CMAKE" --build "$WORK_DIR/external-plugin" || fail "building the out-of-tree plugin failed"
"$CMAKE" --install "$WORK_DIR/external-plugin" > /dev/null || fail "installing the out-of-tree plugin failed"
external="$WORK_DIR/plugin-prefix/$LIBDIR/backplane/plugins/libbackplane_external.so"
[ -f "$external" ] || fail "the out-of-tree plugin did not install to $LIBDIR/backplane/plugins"
if command -v nm > /dev/null; then
  exported=$(nm -D --defined-only "$external" | awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | sort | tr '\n' ' ')
  [ "$exported" = "bp_plugin_entry " ] || fail "the out-of-tree plugin exports '$exported', not just bp_plugin_entry"
fi
"$WORK_DIR/cmake-consumer/c_consumer" "$external" > "$WORK_DIR/external-plugin.out" 2>&1 ||
  { cat "$WORK_DIR/external-plugin.out" >&2; fail "the consumer failed with the out-of-tree plugin"; }
grep "^load " "$WORK_DIR/external-plugin.out"
grep -q "^load .*: PLUGIN_INIT: .*external test plugin: refuses to load, on purpose" "$WORK_DIR/external-plugin.out" ||
  fail "the host did not run the out-of-tree plugin's entry point (expected its PLUGIN_INIT refusal)"

echo "PASS: installed tree at $PREFIX serves a CMake and a pkg-config C consumer and an out-of-tree plugin"
rm -rf "$WORK_DIR"
