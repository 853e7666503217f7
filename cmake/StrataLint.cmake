# `format-check` verifies clang-format on every source; `tidy` runs clang-tidy on the project's
# translation units (compile_commands.json). Both are explicit targets, not part of `all`.
file(GLOB_RECURSE STRATA_LINT_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/core/*.cc ${CMAKE_SOURCE_DIR}/core/*.h
  ${CMAKE_SOURCE_DIR}/engine/*.cc ${CMAKE_SOURCE_DIR}/engine/*.h
  ${CMAKE_SOURCE_DIR}/kernels/*.cc ${CMAKE_SOURCE_DIR}/kernels/*.h ${CMAKE_SOURCE_DIR}/kernels/*.cu
  ${CMAKE_SOURCE_DIR}/kvcache/*.cc ${CMAKE_SOURCE_DIR}/kvcache/*.h
  ${CMAKE_SOURCE_DIR}/scheduler/*.cc ${CMAKE_SOURCE_DIR}/scheduler/*.h
  ${CMAKE_SOURCE_DIR}/server/*.cc ${CMAKE_SOURCE_DIR}/server/*.h
  ${CMAKE_SOURCE_DIR}/tools/*.cc ${CMAKE_SOURCE_DIR}/tests/*.cc)
find_program(CLANG_FORMAT clang-format)
find_program(CLANG_TIDY clang-tidy)
if(CLANG_FORMAT)
  add_custom_target(format-check
    COMMAND ${CLANG_FORMAT} --dry-run --Werror ${STRATA_LINT_SOURCES}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} COMMENT "clang-format check" VERBATIM)
  add_custom_target(format
    COMMAND ${CLANG_FORMAT} -i ${STRATA_LINT_SOURCES}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} COMMENT "clang-format" VERBATIM)
endif()
if(CLANG_TIDY)
  set(_tidy_sources ${STRATA_LINT_SOURCES})
  list(FILTER _tidy_sources INCLUDE REGEX "\\.cc$")
  list(FILTER _tidy_sources EXCLUDE REGEX "_test\\.cc$|_fuzz\\.cc$|_bench\\.cc$")
  # clang-tidy 14 cannot parse Boost 1.74's coroutine headers (the one Beast/Asio TU).
  list(FILTER _tidy_sources EXCLUDE REGEX "server/http/http_server\\.cc$")
  add_custom_target(tidy
    COMMAND ${CLANG_TIDY} -p ${CMAKE_BINARY_DIR} --quiet ${_tidy_sources}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} COMMENT "clang-tidy" VERBATIM)
endif()
