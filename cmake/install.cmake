# `cmake --install`: headers, the library, a CMake package (shmio::shmio) and a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SHMIO_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/shmio" CACHE STRING
    "Where shmioConfig.cmake is installed")

install(TARGETS shmio EXPORT shmioTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/shmio DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT shmioTargets NAMESPACE shmio:: DESTINATION ${SHMIO_INSTALL_CMAKEDIR})

configure_package_config_file(cmake/shmioConfig.cmake.in
  "${PROJECT_BINARY_DIR}/shmioConfig.cmake" INSTALL_DESTINATION ${SHMIO_INSTALL_CMAKEDIR})
# 0.x: a new minor version may break the API.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/shmioConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/shmioConfig.cmake"
  "${PROJECT_BINARY_DIR}/shmioConfigVersion.cmake"
  cmake/FindAsioHeaders.cmake
  DESTINATION ${SHMIO_INSTALL_CMAKEDIR})

# pkg-config.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(SHMIO_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(SHMIO_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(SHMIO_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(SHMIO_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(SHMIO_PC_ASIO_CFLAGS "")
if(NOT SHMIO_ASIO_INCLUDE_DIR STREQUAL "/usr/include")
  set(SHMIO_PC_ASIO_CFLAGS " -I${SHMIO_ASIO_INCLUDE_DIR}")
endif()
# The prefix is the one given at install time (`cmake --install --prefix`), so the file is
# finished by the install step itself.
set(SHMIO_PC_PREFIX "@CMAKE_INSTALL_PREFIX@")
configure_file(cmake/shmio.pc.in "${PROJECT_BINARY_DIR}/shmio.pc.in" @ONLY)
install(CODE "configure_file(\"${PROJECT_BINARY_DIR}/shmio.pc.in\" \"${PROJECT_BINARY_DIR}/shmio.pc\" @ONLY)")
install(FILES "${PROJECT_BINARY_DIR}/shmio.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
