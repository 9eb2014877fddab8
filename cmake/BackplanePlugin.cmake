# backplane_add_plugin(NAME SOURCES... [LINK_LIBRARIES libs...] [NO_INSTALL]
#                      [OUTPUT_DIRECTORY dir])
#
# The one way a plugin is built: a MODULE library libbackplane_<NAME>.so with
# hidden visibility, a version script exporting only bp_plugin_entry,
# -Wl,--no-undefined so an unresolved symbol fails the link rather than the
# load, and an $ORIGIN rpath. Creates the target backplane_plugin_<NAME>.
set(BACKPLANE_PLUGIN_VERSION_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/plugin.map")

function(backplane_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "NO_INSTALL;ALLOW_UNDEFINED" "OUTPUT_DIRECTORY;OUTPUT_NAME"
                        "SOURCES;LINK_LIBRARIES;COMPILE_DEFINITIONS")
  set(target backplane_plugin_${name})
  add_library(${target} MODULE ${arg_SOURCES})
  if(NOT arg_OUTPUT_NAME)
    set(arg_OUTPUT_NAME backplane_${name})
  endif()
  if(NOT arg_OUTPUT_DIRECTORY)
    set(arg_OUTPUT_DIRECTORY "${BACKPLANE_BUILD_PLUGIN_DIR}")
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "${arg_OUTPUT_NAME}"
    LIBRARY_OUTPUT_DIRECTORY "${arg_OUTPUT_DIRECTORY}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    INSTALL_RPATH "$ORIGIN"
    LINK_DEPENDS "${BACKPLANE_PLUGIN_VERSION_SCRIPT}")
  target_link_libraries(${target} PRIVATE Backplane::plugin_api backplane_compile_options
                        ${arg_LINK_LIBRARIES})
  target_compile_definitions(${target} PRIVATE ${arg_COMPILE_DEFINITIONS})
  target_link_options(${target} PRIVATE "LINKER:--version-script=${BACKPLANE_PLUGIN_VERSION_SCRIPT}")
  if(NOT arg_ALLOW_UNDEFINED)
    # Sanitizer runtimes resolve their symbols from the executable, so
    # --no-undefined cannot hold under them.
    if(NOT BACKPLANE_SANITIZE)
      target_link_options(${target} PRIVATE "LINKER:--no-undefined")
    endif()
  endif()
  if(NOT arg_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION "${BACKPLANE_PLUGIN_INSTALL_DIR}" COMPONENT runtime)
  endif()
endfunction()
