# Builds and runs tests/consumer against shmio. Run with cmake -P and
#   -DMODE=install|find_package|pkg_config|add_subdirectory -DSHMIO_BUILD=<shmio's build dir>
#   -DSHMIO_SOURCE=<shmio's source dir> -DWORK=<scratch dir> -DCXX=<compiler>
# `install` installs the build into WORK/prefix, which the next two modes use.
cmake_minimum_required(VERSION 3.25)
set(consumer "${SHMIO_SOURCE}/tests/consumer")
set(prefix "${WORK}/prefix")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " line "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${line}")
  endif()
endfunction()

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE "${prefix}")
  run(${CMAKE_COMMAND} --install "${SHMIO_BUILD}" --prefix "${prefix}")
  set(tool "")
  if(EXISTS "${SHMIO_BUILD}/tools")
    set(tool bin/shmio)  # built with the project (SHMIO_BUILD_TOOLS)
  endif()
  foreach(f include/shmio/shmio.hpp include/shmio/inspect.hpp lib/libshmio.a ${tool}
            lib/cmake/shmio/shmioConfig.cmake
            lib/cmake/shmio/shmioConfigVersion.cmake lib/cmake/shmio/FindAsioHeaders.cmake
            lib/pkgconfig/shmio.pc)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endforeach()
  if(tool)
    run("${prefix}/bin/shmio" ls shmio-test.no-such-prefix. --json)
  endif()
elseif(MODE STREQUAL "find_package" OR MODE STREQUAL "add_subdirectory")
  set(build "${WORK}/${MODE}")
  file(REMOVE_RECURSE "${build}")
  if(MODE STREQUAL "find_package")
    set(how "-DCMAKE_PREFIX_PATH=${prefix}")
  else()
    set(how "-DSHMIO_SOURCE_DIR=${SHMIO_SOURCE}")
  endif()
  run(${CMAKE_COMMAND} -S "${consumer}" -B "${build}" -G Ninja "-DCMAKE_CXX_COMPILER=${CXX}"
      "-DCMAKE_BUILD_TYPE=" ${how})  # no optimisation: this checks the build, and -O0 is faster
  run(${CMAKE_COMMAND} --build "${build}" -j 2)
  run("${build}/consumer")
elseif(MODE STREQUAL "pkg_config")
  set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
  execute_process(COMMAND pkg-config --cflags --libs shmio OUTPUT_VARIABLE flags
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config does not know shmio")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(extra "")
  if(CXX MATCHES "clang")
    set(extra -DASIO_HAS_CO_AWAIT=1)
  endif()
  run(${CXX} -std=c++20 ${extra} "${consumer}/main.cpp" -o "${WORK}/pkg_config_consumer" ${flags})
  run("${WORK}/pkg_config_consumer")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
