// The bf16 attention tile of the MLA decode kernel (mla_tiles.h, attend_tile_bf16): scores and
// P·V as vdpbf16ps products of bf16 pairs with f32 accumulation, straight from a bf16 latent
// cache's rows — no decoding, and twice the multiply-adds per instruction of the f32 tile.
// Included once by mla_tiles.cc inside its AVX-512 namespace, after mla_tiles_impl.h (it uses
// V, SoftmaxStep and kMaxQueries from there). Deliberately no include guard.
//
// Numerics: the query q̃ and the probabilities P are rounded to bf16 (as the CUDA kernel rounds
// them); the cache rows are bf16 already. Products are exact in f32, sums are f32 in a fixed
// order, so a sequence's result is still independent of its batch and of the thread count.

#define MLA_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// sums[i * 4 + j] = a[i] · b[j] over `width` bf16 values (pairs through vdpbf16ps; a masked
// last step zero-fills past `width`).
MLA_TARGET_BF16 inline void DotTileBf16(const uint16_t* const* a, const uint16_t* const* b,
                                        int width, float* sums) {
  __m512 acc[4][4];
#pragma GCC unroll 16
  for (int e = 0; e < 16; ++e) acc[e / 4][e % 4] = _mm512_setzero_ps();
  for (int k = 0; k < width; k += 32) {
    const __mmask32 mask =
        width - k >= 32 ? ~__mmask32{0} : _cvtu32_mask32((1u << (width - k)) - 1);
    __m512bh bv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) bv[j] = (__m512bh)_mm512_maskz_loadu_epi16(mask, b[j] + k);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(mask, a[i] + k);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
  }
  V::ReduceTile(acc, sums);
}

// out[i][j] = a[i] · b[j] for i < na, j < kTileRows; partial tiles padded with the last operand.
MLA_TARGET_BF16 void DotsBf16(const uint16_t* const* a, int na, const uint16_t* const* b, int width,
                              float* const* out) {
  alignas(64) float sums[16];
  for (int i0 = 0; i0 < na; i0 += 4) {
    const uint16_t* ap[4];
    for (int i = 0; i < 4; ++i) ap[i] = a[std::min(i0 + i, na - 1)];
    for (int j0 = 0; j0 < kTileRows; j0 += 4) {
      DotTileBf16(ap, b + j0, width, sums);
      for (int i = 0; i < 4 && i0 + i < na; ++i) {
        for (int j = 0; j < 4; ++j) out[i0 + i][j0 + j] = sums[i * 4 + j];
      }
    }
  }
}

// Columns [0, width) of the 16 rows as 8 row pairs interleaved for vdpbf16ps:
// pairs[p * stride + 2c + e] = rows[2p + e][c] (stride = 2 · width rounded up to 16 columns;
// the padding columns are zero).
MLA_TARGET_BF16 void InterleaveRowPairs(const uint16_t* const* rows, int width, int stride,
                                        uint16_t* pairs) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int p = 0; p < kTileRows / 2; ++p) {
    for (int c = 0; c < width; c += 16) {
      const __mmask16 mask =
          width - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (width - c)) - 1);
      const __m256i lo = _mm256_maskz_loadu_epi16(mask, rows[2 * p] + c);
      const __m256i hi = _mm256_maskz_loadu_epi16(mask, rows[2 * p + 1] + c);
      const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      _mm512_storeu_si512(pairs + p * stride + 2 * c, _mm512_permutexvar_epi16(order, both));
    }
  }
}

// acc[q][c] = alpha[q] · acc[q][c] + Σ_p P2[q][p] ⋅ pairs[p][c] for MQ queries from q0 and
// NV 16-column vectors from c0 (kPartial: one vector of `rem` columns).
template <int MQ, int NV, bool kPartial>
MLA_TARGET_BF16 inline void AxpyPairsTile(float* const* acc, const float* alpha,
                                          const uint32_t (*p2)[kTileRows / 2],
                                          const uint16_t* pairs, int stride, int c0, int rem) {
  const __mmask16 mask = kPartial ? __mmask16((1u << rem) - 1) : __mmask16(0xFFFF);
  __m512 a[MQ][NV];
#pragma GCC unroll 4
  for (int q = 0; q < MQ; ++q) {
    const __m512 s = _mm512_set1_ps(alpha[q]);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      a[q][v] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, acc[q] + c0 + 16 * v), s);
    }
  }
  for (int p = 0; p < kTileRows / 2; ++p) {
    __m512bh col[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      col[v] = (__m512bh)_mm512_loadu_si512(pairs + p * stride + 2 * (c0 + 16 * v));
    }
#pragma GCC unroll 4
    for (int q = 0; q < MQ; ++q) {
      const __m512bh w = (__m512bh)_mm512_set1_epi32(static_cast<int>(p2[q][p]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) a[q][v] = _mm512_dpbf16_ps(a[q][v], w, col[v]);
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < MQ; ++q) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(acc[q] + c0 + 16 * v, mask, a[q][v]);
  }
}

template <int MQ>
MLA_TARGET_BF16 inline void AxpyPairsColumns(float* const* acc, const float* alpha,
                                             const uint32_t (*p2)[kTileRows / 2],
                                             const uint16_t* pairs, int stride, int width) {
  int c0 = 0;
  for (; c0 + 64 <= width; c0 += 64)
    AxpyPairsTile<MQ, 4, false>(acc, alpha, p2, pairs, stride, c0, 0);
  for (; c0 + 16 <= width; c0 += 16)
    AxpyPairsTile<MQ, 1, false>(acc, alpha, p2, pairs, stride, c0, 0);
  if (c0 < width) AxpyPairsTile<MQ, 1, true>(acc, alpha, p2, pairs, stride, c0, width - c0);
}

MLA_TARGET_BF16 void AttendTileBf16(const QueryBlock& qb, const uint16_t* const* rows, int num_rows,
                                    int64_t row0, int key_width, int value_offset, int value_width,
                                    float scale) {
  alignas(64) float s[kMaxQueries][kTileRows];
  alignas(64) uint32_t p2[kMaxQueries][kTileRows / 2];
  float alpha[kMaxQueries];
  const uint16_t* q_ptr[kMaxQueries];
  float* s_ptr[kMaxQueries];
  float* acc_ptr[kMaxQueries];
  const uint16_t* row_ptr[kTileRows];
  const uint16_t* value_ptr[kTileRows];
  for (int j = 0; j < kTileRows; ++j) {
    row_ptr[j] = rows[std::min(j, num_rows - 1)];
    value_ptr[j] = row_ptr[j] + value_offset;
  }
  for (int i = 0; i < qb.n; ++i) {
    q_ptr[i] = qb.q_bf16 + i * qb.q_stride;
    s_ptr[i] = s[i];
    acc_ptr[i] = qb.acc + i * qb.acc_stride;
  }
  DotsBf16(q_ptr, qb.n, row_ptr, key_width, s_ptr);
  for (int i = 0; i < qb.n; ++i) {
    int64_t valid = num_rows;
    if (qb.limit != nullptr) valid = std::clamp<int64_t>(qb.limit[i] - row0, 0, num_rows);
    alpha[i] = SoftmaxStep(s[i], static_cast<int>(valid), scale, qb.max + i, qb.sum + i);
    // P as bf16 pairs (row 2p in the low half); rows past `valid` are exactly 0.
    _mm256_store_si256(reinterpret_cast<__m256i*>(p2[i]),
                       (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(s[i])));
  }
  const int stride = 2 * ((value_width + 15) / 16 * 16);
  thread_local AlignedBuffer pair_buffer;  // only grows: 16 KB at value width 512
  const size_t pair_bytes = sizeof(uint16_t) * kTileRows / 2 * stride;
  if (pair_buffer.size() < pair_bytes) pair_buffer = AlignedBuffer(pair_bytes);
  uint16_t* pairs = pair_buffer.as<uint16_t>();
  InterleaveRowPairs(value_ptr, value_width, stride, pairs);
  for (int q0 = 0; q0 < qb.n; q0 += 4) {
    switch (std::min(4, qb.n - q0)) {
      case 4:
        AxpyPairsColumns<4>(acc_ptr + q0, alpha + q0, p2 + q0, pairs, stride, value_width);
        break;
      case 3:
        AxpyPairsColumns<3>(acc_ptr + q0, alpha + q0, p2 + q0, pairs, stride, value_width);
        break;
      case 2:
        AxpyPairsColumns<2>(acc_ptr + q0, alpha + q0, p2 + q0, pairs, stride, value_width);
        break;
      default:
        AxpyPairsColumns<1>(acc_ptr + q0, alpha + q0, p2 + q0, pairs, stride, value_width);
        break;
    }
  }
}

constexpr TileKernels kTileKernelsBf16{&Dots<float>,    &Axpy<float>,    &AttendTile,
                                       &Gate,           &AttendTileBf16, &Dots<uint16_t>,
                                       &Axpy<uint16_t>, &AttendLanes};

#undef MLA_TARGET_BF16
