# Project-wide compile settings applied per target (no global include dirs or flags).
#
# ISA: the portable baseline is x86-64-v3 (AVX2, FMA, F16C, BMI2). AVX-512 kernels are compiled
# per function with __attribute__((target(...))) and chosen at run time (core/cpu_features.h),
# so a binary never dies with SIGILL on a CPU without AVX-512. Never -march=native here.

set(STRATA_ISA_FLAGS "")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(STRATA_ISA_FLAGS -mavx2 -mfma -mf16c -mbmi2 -mlzcnt -mpopcnt)
endif()

set(STRATA_WARNINGS -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)
if(STRATA_WERROR)
  list(APPEND STRATA_WARNINGS -Werror)
endif()

if(STRATA_SANITIZE)
  string(REPLACE ";" "," _san "${STRATA_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${_san}> $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${_san})
endif()

# strata_target_defaults(<target>): warnings, ISA baseline, OpenMP simd for vectorised reductions.
function(strata_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${STRATA_WARNINGS} ${STRATA_ISA_FLAGS} -fopenmp-simd>)
endfunction()

# strata_unity_warnings(<target>): GCC's -Wsubobject-linkage fires on a class with a member of an
# anonymous-namespace type unless both are in the main file; in a unity unit every source is an
# included file, so it is a false positive there.
function(strata_unity_warnings target)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
  endif()
endfunction()

# strata_test(<name> SOURCES ... LIBS ... [LABELS ...] [TIMEOUT s] [PREFIX p]): one gtest binary,
# discovered by ctest (test names prefixed with p: the emulator runs the GPU tests as "emu.*").
function(strata_test name)
  cmake_parse_arguments(T "" "TIMEOUT;PREFIX" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  strata_target_defaults(${name})
  # A test's own sources are glue and checks: -O1 compiles them about a third faster than -O3
  # (the code under test keeps its build type's flags, in its libraries).
  target_compile_options(${name} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
  # Several test sources compile ~60% faster as one unity translation unit: each re-parses and
  # re-instantiates gtest, nlohmann/json and the module under test. So helpers at file scope must
  # have distinct names across a test binary's sources (an anonymous namespace is per unit).
  list(LENGTH T_SOURCES _num_sources)
  if(STRATA_UNITY_BUILD AND _num_sources GREATER 1)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
    strata_unity_warnings(${name})
  endif()
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gmock GTest::gtest_main)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set(_props TIMEOUT ${T_TIMEOUT} SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  if(T_LABELS)
    list(APPEND _props LABELS "${T_LABELS}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_PREFIX "${T_PREFIX}" PROPERTIES ${_props})
endfunction()
