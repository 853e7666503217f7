// Strata's CUDA emulator (tests/cuda_emu): the part of cuBLAS Strata uses. GEMMs are column-major
// as in cuBLAS, f32 accumulation in k order, enqueued on the handle's stream (and recorded when
// that stream captures a graph). Scalars (alpha, beta) and the grouped call's host arrays are
// read at the call, device pointer tables when the GEMM runs, as cuBLAS does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_runtime.h"

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;
enum cublasComputeType_t {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
};
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };

struct cublasContext;
using cublasHandle_t = cublasContext*;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes);
const char* cublasGetStatusName(cublasStatus_t status);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType_t a_type, int lda, const void* b,
                            cudaDataType_t b_type, int ldb, const void* beta, void* c,
                            cudaDataType_t c_type, int ldc, cublasComputeType_t compute_type,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa,
                               cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                               const void* alpha, const void* a, cudaDataType_t a_type, int64_t lda,
                               const void* b, cudaDataType_t b_type, int64_t ldb, const void* beta,
                               void* c, cudaDataType_t c_type, int64_t ldc,
                               cublasComputeType_t compute_type, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* a, cudaDataType_t a_type,
                                          int lda, long long int stride_a, const void* b,
                                          cudaDataType_t b_type, int ldb, long long int stride_b,
                                          const void* beta, void* c, cudaDataType_t c_type, int ldc,
                                          long long int stride_c, int batch_count,
                                          cublasComputeType_t compute_type, cublasGemmAlgo_t algo);
// Arrays of per-group parameters on the host; a_array/b_array/c_array are device arrays of
// device pointers (one per matrix, groups back to back).
cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t handle, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[], const int n_array[],
    const int k_array[], const void* alpha_array, const void* const a_array[],
    cudaDataType_t a_type, const int lda_array[], const void* const b_array[],
    cudaDataType_t b_type, const int ldb_array[], const void* beta_array, void* const c_array[],
    cudaDataType_t c_type, const int ldc_array[], int group_count, const int group_size[],
    cublasComputeType_t compute_type);
