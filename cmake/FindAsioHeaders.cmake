# Standalone Asio is header-only and Debian's package has no CMake or pkg-config file:
# find asio.hpp and wrap it in an imported target.
if(NOT TARGET shmio::asio)
  find_path(SHMIO_ASIO_INCLUDE_DIR asio.hpp REQUIRED)
  add_library(shmio::asio INTERFACE IMPORTED)
  set_target_properties(shmio::asio PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${SHMIO_ASIO_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS "ASIO_STANDALONE;ASIO_NO_DEPRECATED")
endif()
