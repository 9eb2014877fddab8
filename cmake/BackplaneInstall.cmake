# The installed package: find_package(Backplane CONFIG) gives
# Backplane::backplane (and Backplane::plugin_api for plugin authors), and
# pkg-config gives backplane.
include(CMakePackageConfigHelpers)
set(BACKPLANE_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/Backplane")

install(EXPORT BackplaneTargets NAMESPACE Backplane:: DESTINATION "${BACKPLANE_CMAKE_INSTALL_DIR}"
        COMPONENT development)
configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/BackplaneConfig.cmake.in"
  "${CMAKE_BINARY_DIR}/BackplaneConfig.cmake" INSTALL_DESTINATION "${BACKPLANE_CMAKE_INSTALL_DIR}")
write_basic_package_version_file("${CMAKE_BINARY_DIR}/BackplaneConfigVersion.cmake"
  COMPATIBILITY SameMajorVersion)
install(FILES "${CMAKE_BINARY_DIR}/BackplaneConfig.cmake" "${CMAKE_BINARY_DIR}/BackplaneConfigVersion.cmake"
        "${CMAKE_CURRENT_LIST_DIR}/BackplanePlugin.cmake" "${CMAKE_CURRENT_LIST_DIR}/plugin.map"
        DESTINATION "${BACKPLANE_CMAKE_INSTALL_DIR}" COMPONENT development)

# The .pc file finds its prefix relative to itself, so the tree can be
# installed anywhere with cmake --install --prefix.
file(RELATIVE_PATH BACKPLANE_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" BACKPLANE_PC_TO_PREFIX "${BACKPLANE_PC_TO_PREFIX}")  # no "//" in libdir
configure_file("${CMAKE_CURRENT_LIST_DIR}/backplane.pc.in" "${CMAKE_BINARY_DIR}/backplane.pc" @ONLY)
install(FILES "${CMAKE_BINARY_DIR}/backplane.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
        COMPONENT development)
