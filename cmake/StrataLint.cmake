# Formatting and static analysis over every source folder.
# `format-check` verifies clang-format on every C++/CUDA source (also run by ctest as the `format`
# test, label lint, so the test command checks it); `format` rewrites them; `tidy` runs clang-tidy
# on the project's translation units (compile_commands.json). Explicit targets, not part of `all`.
set(_strata_source_folders bench clients core deploy dist engine kernels kvcache proto scheduler
    server tests tools)
set(STRATA_LINT_SOURCES "")
foreach(_folder ${_strata_source_folders})
  file(GLOB_RECURSE _folder_sources CONFIGURE_DEPENDS
       ${CMAKE_SOURCE_DIR}/${_folder}/*.cc ${CMAKE_SOURCE_DIR}/${_folder}/*.h
       ${CMAKE_SOURCE_DIR}/${_folder}/*.cu ${CMAKE_SOURCE_DIR}/${_folder}/*.cuh)
  list(APPEND STRATA_LINT_SOURCES ${_folder_sources})
endforeach()
list(APPEND STRATA_LINT_SOURCES ${CMAKE_SOURCE_DIR}/server/main.cc)
list(REMOVE_DUPLICATES STRATA_LINT_SOURCES)
# Not ours to format: what npm installs for the JS tests.
list(FILTER STRATA_LINT_SOURCES EXCLUDE REGEX "/node_modules/")
find_program(CLANG_FORMAT clang-format)
find_program(CLANG_TIDY clang-tidy)
if(CLANG_FORMAT)
  add_custom_target(format-check
    COMMAND ${CLANG_FORMAT} --dry-run --Werror ${STRATA_LINT_SOURCES}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} COMMENT "clang-format check" VERBATIM)
  add_custom_target(format
    COMMAND ${CLANG_FORMAT} -i ${STRATA_LINT_SOURCES}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} COMMENT "clang-format" VERBATIM)
  add_test(NAME format COMMAND ${CLANG_FORMAT} --dry-run --Werror ${STRATA_LINT_SOURCES}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(format PROPERTIES LABELS lint TIMEOUT 300)
else()
  message(STATUS "strata: clang-format not found; the format test is not registered")
endif()
if(CLANG_TIDY)
  set(_tidy_sources ${STRATA_LINT_SOURCES})
  list(FILTER _tidy_sources INCLUDE REGEX "\\.cc$")
  list(FILTER _tidy_sources EXCLUDE REGEX "_test\\.cc$|_fuzz\\.cc$|_bench\\.cc$|/tests/cuda_emu/")
  # clang-tidy 14 cannot parse Boost 1.74's coroutine headers (the one Beast/Asio TU).
  list(FILTER _tidy_sources EXCLUDE REGEX "server/http/http_server\\.cc$")
  add_custom_target(tidy
    COMMAND ${CLANG_TIDY} -p ${CMAKE_BINARY_DIR} --quiet ${_tidy_sources}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} COMMENT "clang-tidy" VERBATIM)
endif()
