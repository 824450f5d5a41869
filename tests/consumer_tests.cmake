# The packaging tests (see consumer.cmake). Each takes some seconds: it compiles a program.
set(_consumer_args -DSHMIO_BUILD=${PROJECT_BINARY_DIR} -DSHMIO_SOURCE=${PROJECT_SOURCE_DIR}
    -DWORK=${CMAKE_CURRENT_BINARY_DIR}/consumer -DCXX=${CMAKE_CXX_COMPILER})
find_program(SHMIO_PKG_CONFIG pkg-config)
set(_consumer_modes install find_package add_subdirectory)
if(SHMIO_PKG_CONFIG)
  list(APPEND _consumer_modes pkg_config)
endif()
foreach(mode ${_consumer_modes})
  add_test(NAME package_${mode}
    COMMAND ${CMAKE_COMMAND} -DMODE=${mode} ${_consumer_args} -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer.cmake)
  set_tests_properties(package_${mode} PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED shm_cleanup)
endforeach()
set_tests_properties(package_install PROPERTIES FIXTURES_SETUP shmio_installed)
set_tests_properties(package_add_subdirectory PROPERTIES COST 100)  # it builds the library
foreach(mode find_package pkg_config)
  if(TEST package_${mode})
    set_tests_properties(package_${mode} PROPERTIES FIXTURES_REQUIRED "shmio_installed;shm_cleanup")
  endif()
endforeach()
