# Fails unless the first ```cpp block of README.md is examples/readme_example.cpp, byte for byte,
# so that the README shows code that compiles (and runs: see the example_readme test).
# Run with cmake -DSOURCE=<source dir> -P check_readme.cmake.
file(READ "${SOURCE}/README.md" readme)
file(READ "${SOURCE}/examples/readme_example.cpp" example)
string(FIND "${readme}" "```cpp\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "README.md has no ```cpp block")
endif()
math(EXPR start "${start} + 7")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} snippet)
if(NOT snippet STREQUAL example)
  message(FATAL_ERROR "README.md's example differs from examples/readme_example.cpp: "
                      "copy one onto the other")
endif()
