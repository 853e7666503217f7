# Strata's CUDA emulator (tests/cuda_emu): the CUDA kernels and the CUDA executor compiled as
# host C++ against the emulator's cuda_runtime.h / cuda_bf16.h / cublas_v2.h, so their GPU tests
# run on any machine (CI has no GPU). Needs no CUDA toolkit.
option(STRATA_WITH_CUDA_EMU "Build the CUDA kernels and executor for the CPU emulator and run their GPU tests on it" ON)

# strata_cuda_emu_sources(<out_var> <sources...>): the sources for an emulator build. A .cu file
# is compiled through a generated .cc that includes it (a source file has one language per
# directory, and the nvcc build uses the .cu itself).
function(strata_cuda_emu_sources out_var)
  set(_result "")
  foreach(_src ${ARGN})
    if(_src MATCHES "\\.cu$")
      get_filename_component(_name ${_src} NAME_WE)
      set(_wrapper ${CMAKE_CURRENT_BINARY_DIR}/emu/${_name}.cc)
      file(CONFIGURE OUTPUT ${_wrapper}
           CONTENT "// Generated: ${_src} for the CUDA emulator.\n#include \"${CMAKE_CURRENT_SOURCE_DIR}/${_src}\"\n")
      list(APPEND _result ${_wrapper})
    else()
      list(APPEND _result ${CMAKE_CURRENT_SOURCE_DIR}/${_src})
    endif()
  endforeach()
  set(${out_var} ${_result} PARENT_SCOPE)
endfunction()
