# Warnings and sanitizers, carried by an interface target every Backplane
# target links, so no flag is set globally.
add_library(backplane_compile_options INTERFACE)
target_compile_options(backplane_compile_options INTERFACE
  -Wall -Wextra -Wpedantic
  $<$<BOOL:${BACKPLANE_WARNINGS_AS_ERRORS}>:-Werror>)

if(BACKPLANE_SANITIZE)
  target_compile_options(backplane_compile_options INTERFACE
    -fsanitize=${BACKPLANE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(backplane_compile_options INTERFACE -fsanitize=${BACKPLANE_SANITIZE})
endif()
