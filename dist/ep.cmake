# Model parallelism over a Communicator: expert placement and MoE dispatch/combine (expert
# parallelism), the tensor-parallel collectives (engine/tensor_parallel.h), the in-process fake
# communicator for tests, and the dispatch benchmark. Included from dist/CMakeLists.txt.
add_library(strata_dist_placement STATIC ${CMAKE_CURRENT_LIST_DIR}/expert_placement.cc)
strata_target_defaults(strata_dist_placement)
target_include_directories(strata_dist_placement PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(strata_dist_placement PUBLIC strata_core absl::status absl::statusor
                      absl::strings nlohmann_json::nlohmann_json)

add_library(strata_dist_ep STATIC ${CMAKE_CURRENT_LIST_DIR}/moe_dispatch.cc
                          ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_group.cc)
strata_target_defaults(strata_dist_ep)
target_include_directories(strata_dist_ep PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(strata_dist_ep PUBLIC strata_dist_placement strata_engine strata_core
                      absl::status absl::strings absl::synchronization)

# Test support (tests and benchmarks only): the in-process Communicator of N threads and
# synthetic MoE blocks.
add_library(strata_dist_testing STATIC
  ${CMAKE_CURRENT_LIST_DIR}/testing/fake_communicator.cc
  ${CMAKE_CURRENT_LIST_DIR}/testing/moe_test_util.cc
)
strata_target_defaults(strata_dist_testing)
target_include_directories(strata_dist_testing PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(strata_dist_testing PUBLIC strata_dist_placement strata_engine strata_core
                      absl::status absl::strings absl::synchronization absl::time)

strata_test(dist_expert_placement_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/expert_placement_test.cc
  LIBS strata_dist_placement)
strata_test(dist_moe_dispatch_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/moe_dispatch_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/testing/fake_communicator_test.cc
  LIBS strata_dist_ep strata_dist_testing strata_engine strata_checkpoint_generator)

# Benchmark: built on request, never run by ctest.
add_executable(dist_moe_dispatch_bench ${CMAKE_CURRENT_LIST_DIR}/moe_dispatch_bench.cc)
strata_target_defaults(dist_moe_dispatch_bench)
target_link_libraries(dist_moe_dispatch_bench PRIVATE strata_dist_ep strata_dist_testing strata_dist
                      strata_engine OpenMP::OpenMP_CXX)

# The exchange over real Gloo rank processes (its own binary: the parent forks, so it must not
# have run any kernel thread pool before).
strata_test(dist_moe_dispatch_gloo_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/moe_dispatch_gloo_test.cc
  LIBS strata_dist_ep strata_dist_testing strata_dist TIMEOUT 180)

strata_test(dist_tensor_parallel_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_test.cc
  LIBS strata_dist_ep strata_dist_testing strata_engine strata_checkpoint_generator TIMEOUT 300)
