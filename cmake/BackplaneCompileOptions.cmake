# Warnings and sanitizers, carried by an interface target every Backplane
# target links, so no flag is set globally.
add_library(backplane_compile_options INTERFACE)
target_compile_options(backplane_compile_options INTERFACE
  -Wall -Wextra -Wpedantic
  # GCC 12 at -O3 reports -Wrestrict false positives inside std::string
  # (GCC bug 105329), in our code and in valijson's headers alike.
  $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>
  $<$<BOOL:${BACKPLANE_WARNINGS_AS_ERRORS}>:-Werror>)

if(BACKPLANE_SANITIZE)
  target_compile_options(backplane_compile_options INTERFACE
    -fsanitize=${BACKPLANE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(backplane_compile_options INTERFACE -fsanitize=${BACKPLANE_SANITIZE})
  # GCC 12 with ASan at -O1 warns of "maybe uninitialized" state inside
  # libstdc++'s std::regex (valijson uses it): false positives of the
  # sanitizer's instrumentation, not of our code; clang and release builds
  # keep the warning.
  target_compile_options(backplane_compile_options INTERFACE
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
endif()

# Coverage for libFuzzer (tests/fuzz) in every target, the library included.
if(BACKPLANE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "BACKPLANE_FUZZ needs clang (libFuzzer); use the fuzz preset")
  endif()
  target_compile_options(backplane_compile_options INTERFACE -fsanitize=fuzzer-no-link)
endif()
