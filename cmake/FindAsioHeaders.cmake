# Standalone Asio is header-only and Debian's package has no CMake or pkg-config file:
# find asio.hpp and wrap it in an imported target. Installed with shmio, so that consumers of
# the installed package get the same target (shmioConfig.cmake includes this file).
if(NOT TARGET shmio::asio)
  find_path(SHMIO_ASIO_INCLUDE_DIR asio.hpp REQUIRED)
  add_library(shmio::asio INTERFACE IMPORTED)
  set_target_properties(shmio::asio PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${SHMIO_ASIO_INCLUDE_DIR}"
    # Asio 1.22 detects coroutine support only on gcc; clang >= 14 has it. A generator
    # expression, so that it follows the compiler of whoever links shmio, not of its build.
    INTERFACE_COMPILE_DEFINITIONS
      "ASIO_STANDALONE;ASIO_NO_DEPRECATED;$<$<CXX_COMPILER_ID:Clang>:ASIO_HAS_CO_AWAIT=1>")
endif()
