// The emulator's cuBLAS: column-major GEMMs with f32 accumulation, enqueued on the handle's
// stream like every other piece of device work (so they are captured into graphs too).
#include <cublas_v2.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tests/cuda_emu/emu_internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace strata_emu {
namespace {

bool Supported(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }
size_t ElementBytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

float Load(const void* base, cudaDataType_t t, int64_t index) {
  if (t == CUDA_R_32F) return static_cast<const float*>(base)[index];
  return Bf16BitsToFloat(static_cast<const uint16_t*>(base)[index]);
}
void Store(void* base, cudaDataType_t t, int64_t index, float v) {
  if (t == CUDA_R_32F) {
    static_cast<float*>(base)[index] = v;
  } else {
    static_cast<uint16_t*>(base)[index] = FloatToBf16BitsRn(v);
  }
}

struct Gemm {
  cublasOperation_t ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  const void* a;
  cudaDataType_t at;
  int64_t lda;
  const void* b;
  cudaDataType_t bt;
  int64_t ldb;
  void* c;
  cudaDataType_t ct;
  int64_t ldc;
};

// Checks what cuBLAS checks before it enqueues anything.
cublasStatus_t Validate(const Gemm& g) {
  if ((g.ta != CUBLAS_OP_N && g.ta != CUBLAS_OP_T) ||
      (g.tb != CUBLAS_OP_N && g.tb != CUBLAS_OP_T) || g.m < 0 || g.n < 0 || g.k < 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int64_t a_rows = g.ta == CUBLAS_OP_N ? g.m : g.k;
  const int64_t b_rows = g.tb == CUBLAS_OP_N ? g.k : g.n;
  if (g.lda < std::max<int64_t>(1, a_rows) || g.ldb < std::max<int64_t>(1, b_rows) ||
      g.ldc < std::max<int64_t>(1, g.m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!Supported(g.at) || !Supported(g.bt) || !Supported(g.ct)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Every matrix a GEMM touches must be device memory of sufficient extent; a GPU would fault.
void CheckOperand(const void* p, cudaDataType_t t, int64_t ld, int64_t cols, int64_t rows,
                  const char* what) {
  if (rows == 0 || cols == 0) return;
  const size_t bytes = static_cast<size_t>((cols - 1) * ld + rows) * ElementBytes(t);
  if (!IsDeviceRange(p, bytes)) {
    const std::string msg = std::string("cuBLAS GEMM operand ") + what +
                            " is not a device allocation of " + std::to_string(bytes) + " bytes";
    DeviceFault(msg.c_str());
  }
}

void Run(const Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  CheckOperand(g.a, g.at, g.lda, g.ta == CUBLAS_OP_N ? g.k : g.m, g.ta == CUBLAS_OP_N ? g.m : g.k,
               "A");
  CheckOperand(g.b, g.bt, g.ldb, g.tb == CUBLAS_OP_N ? g.n : g.k, g.tb == CUBLAS_OP_N ? g.k : g.n,
               "B");
  CheckOperand(g.c, g.ct, g.ldc, g.n, g.m, "C");
  // op(A) as rows [m][k] and op(B) as columns [n][k], then dot products.
  std::vector<float> a(static_cast<size_t>(g.m * g.k)), b(static_cast<size_t>(g.n * g.k));
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t p = 0; p < g.k; ++p) {
      a[i * g.k + p] = Load(g.a, g.at, g.ta == CUBLAS_OP_N ? i + p * g.lda : p + i * g.lda);
    }
  }
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t p = 0; p < g.k; ++p) {
      b[j * g.k + p] = Load(g.b, g.bt, g.tb == CUBLAS_OP_N ? p + j * g.ldb : j + p * g.ldb);
    }
  }
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      float acc = 0.0f;
      const float* ar = &a[i * g.k];
      const float* bc = &b[j * g.k];
#pragma omp simd reduction(+ : acc)
      for (int64_t p = 0; p < g.k; ++p) acc += ar[p] * bc[p];
      const int64_t at = i + j * g.ldc;
      // beta = 0: C is not read (it may hold NaN), as in cuBLAS.
      const float out =
          g.beta == 0.0f ? g.alpha * acc : g.alpha * acc + g.beta * Load(g.c, g.ct, at);
      Store(g.c, g.ct, at, out);
    }
  }
}

cublasStatus_t Submit(cublasHandle_t handle, std::function<void()> op) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return Enqueue(handle->stream, std::move(op)) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                               : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace
}  // namespace strata_emu

using strata_emu::Gemm;

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void*, size_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t status) { return cublasGetStatusName(status); }

cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa,
                               cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                               const void* alpha, const void* a, cudaDataType_t a_type, int64_t lda,
                               const void* b, cudaDataType_t b_type, int64_t ldb, const void* beta,
                               void* c, cudaDataType_t c_type, int64_t ldc, cublasComputeType_t,
                               cublasGemmAlgo_t) {
  const Gemm g{transa,
               transb,
               m,
               n,
               k,
               *static_cast<const float*>(alpha),
               *static_cast<const float*>(beta),
               a,
               a_type,
               lda,
               b,
               b_type,
               ldb,
               c,
               c_type,
               ldc};
  if (const cublasStatus_t s = strata_emu::Validate(g); s != CUBLAS_STATUS_SUCCESS) return s;
  return strata_emu::Submit(handle, [g] { strata_emu::Run(g); });
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType_t a_type, int lda, const void* b,
                            cudaDataType_t b_type, int ldb, const void* beta, void* c,
                            cudaDataType_t c_type, int ldc, cublasComputeType_t compute_type,
                            cublasGemmAlgo_t algo) {
  return cublasGemmEx_64(handle, transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb,
                         beta, c, c_type, ldc, compute_type, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* a, cudaDataType_t a_type,
                                          int lda, long long int stride_a, const void* b,
                                          cudaDataType_t b_type, int ldb, long long int stride_b,
                                          const void* beta, void* c, cudaDataType_t c_type, int ldc,
                                          long long int stride_c, int batch_count,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  if (batch_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  std::vector<Gemm> gemms;
  for (int i = 0; i < batch_count; ++i) {
    Gemm g{transa,
           transb,
           m,
           n,
           k,
           *static_cast<const float*>(alpha),
           *static_cast<const float*>(beta),
           static_cast<const char*>(a) +
               i * stride_a * static_cast<int64_t>(strata_emu::ElementBytes(a_type)),
           a_type,
           lda,
           static_cast<const char*>(b) +
               i * stride_b * static_cast<int64_t>(strata_emu::ElementBytes(b_type)),
           b_type,
           ldb,
           static_cast<char*>(c) +
               i * stride_c * static_cast<int64_t>(strata_emu::ElementBytes(c_type)),
           c_type,
           ldc};
    if (const cublasStatus_t s = strata_emu::Validate(g); s != CUBLAS_STATUS_SUCCESS) return s;
    gemms.push_back(g);
  }
  return strata_emu::Submit(handle, [gemms] {
    for (const Gemm& g : gemms) strata_emu::Run(g);
  });
}

cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t handle, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[], const int n_array[],
    const int k_array[], const void* alpha_array, const void* const a_array[],
    cudaDataType_t a_type, const int lda_array[], const void* const b_array[],
    cudaDataType_t b_type, const int ldb_array[], const void* beta_array, void* const c_array[],
    cudaDataType_t c_type, const int ldc_array[], int group_count, const int group_size[],
    cublasComputeType_t) {
  if (group_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  // Host arrays are read now; the device pointer tables when the work runs.
  std::vector<Gemm> shapes;  // one per matrix; pointers filled in at run time
  for (int gi = 0; gi < group_count; ++gi) {
    if (group_size[gi] < 0) return CUBLAS_STATUS_INVALID_VALUE;
    const Gemm g{transa_array[gi],
                 transb_array[gi],
                 m_array[gi],
                 n_array[gi],
                 k_array[gi],
                 static_cast<const float*>(alpha_array)[gi],
                 static_cast<const float*>(beta_array)[gi],
                 nullptr,
                 a_type,
                 lda_array[gi],
                 nullptr,
                 b_type,
                 ldb_array[gi],
                 nullptr,
                 c_type,
                 ldc_array[gi]};
    if (const cublasStatus_t s = strata_emu::Validate(g); s != CUBLAS_STATUS_SUCCESS) return s;
    for (int i = 0; i < group_size[gi]; ++i) shapes.push_back(g);
  }
  return strata_emu::Submit(handle, [shapes, a_array, b_array, c_array] {
    const size_t count = shapes.size();
    const size_t table_bytes = count * sizeof(void*);
    if (count > 0 && (!strata_emu::IsDeviceRange(a_array, table_bytes) ||
                      !strata_emu::IsDeviceRange(b_array, table_bytes) ||
                      !strata_emu::IsDeviceRange(c_array, table_bytes))) {
      strata_emu::DeviceFault(
          "cublasGemmGroupedBatchedEx: the A/B/C pointer arrays must be device memory");
    }
    for (size_t i = 0; i < count; ++i) {
      Gemm g = shapes[i];
      g.a = a_array[i];
      g.b = b_array[i];
      g.c = c_array[i];
      strata_emu::Run(g);
    }
  });
}
