// The ISA-generic bodies of the kernels in mla_tiles.h. Included once per ISA by mla_tiles.cc,
// inside a namespace that defines the vector traits `V` and the function attribute MLA_TARGET
// (the AVX-512 target attribute, or nothing for the x86-64-v3 baseline). Deliberately no
// include guard; include nowhere else.
//
// V provides: Vec, kWidth (f32 lanes), the dot tile kDotRows × kDotCols (queries × rows), the
// axpy tile kAxpyQueries × kAxpyVectors, Zero/Load/LoadPartial/Store/StorePartial/Set1/Add/Sub/
// Mul/Fma, KeepFirst (zero lanes ≥ count), ReduceAdd, Exp, and ReduceTile (the dot tile's
// accumulators to kDotRows × kDotCols sums, row-major). Load/LoadPartial also take bf16 bits
// (const uint16_t*), widened exactly: `b` of Dots and `src` of Axpy may be weight rows in bf16,
// and then every sum is bit-identical to the one over the same values in f32.

// sums[i * NR + j] = a[i] · b[j] over `width` values (TB: float, or uint16_t bf16 bits).
template <int MR, int NR, typename TB>
MLA_TARGET inline void DotTile(const float* const* a, const TB* const* b, int width, float* sums) {
  typename V::Vec acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = V::Zero();
  }
  const int full = width - width % V::kWidth;
  for (int k = 0; k < full; k += V::kWidth) {
    typename V::Vec bv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) bv[j] = V::Load(b[j] + k);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const typename V::Vec av = V::Load(a[i] + k);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = V::Fma(av, bv[j], acc[i][j]);
    }
  }
  if (full < width) {
    const int rem = width - full;
    typename V::Vec bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = V::LoadPartial(b[j] + full, rem);
    for (int i = 0; i < MR; ++i) {
      const typename V::Vec av = V::LoadPartial(a[i] + full, rem);
      for (int j = 0; j < NR; ++j) acc[i][j] = V::Fma(av, bv[j], acc[i][j]);
    }
  }
  V::ReduceTile(acc, sums);
}

// Partial tiles are padded with copies of the last operand row and their sums dropped, so every
// output goes through the one full-tile instruction sequence.
template <typename TB>
MLA_TARGET void Dots(const float* const* a, int na, const TB* const* b, int nb, int width,
                     float* const* out) {
  constexpr int MR = V::kDotRows, NR = V::kDotCols;
  alignas(64) float sums[MR * NR];
  for (int i0 = 0; i0 < na; i0 += MR) {
    const float* ap[MR];
    for (int i = 0; i < MR; ++i) ap[i] = a[std::min(i0 + i, na - 1)];
    for (int j0 = 0; j0 < nb; j0 += NR) {
      const TB* bp[NR];
      for (int j = 0; j < NR; ++j) bp[j] = b[std::min(j0 + j, nb - 1)];
      DotTile<MR, NR, TB>(ap, bp, width, sums);
      for (int i = 0; i < MR && i0 + i < na; ++i) {
        for (int j = 0; j < NR && j0 + j < nb; ++j) out[i0 + i][j0 + j] = sums[i * NR + j];
      }
    }
  }
}

// MQ outputs × NV vectors starting at column c0 (kPartial: one vector of `rem` lanes); TS: float,
// or uint16_t bf16 bits.
template <int MQ, int NV, bool kPartial, typename TS>
MLA_TARGET inline void AxpyTile(float* const* out, const float* init, const float* const* coef,
                                const TS* const* src, int nsrc, int c0, int rem) {
  typename V::Vec acc[MQ][NV];
#pragma GCC unroll 4
  for (int q = 0; q < MQ; ++q) {
    const typename V::Vec s = V::Set1(init != nullptr ? init[q] : 0.0f);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (init == nullptr) {
        acc[q][v] = V::Zero();
      } else {
        const float* p = out[q] + c0 + v * V::kWidth;
        acc[q][v] = V::Mul(kPartial ? V::LoadPartial(p, rem) : V::Load(p), s);
      }
    }
  }
  for (int j = 0; j < nsrc; ++j) {
    typename V::Vec sv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const TS* p = src[j] + c0 + v * V::kWidth;
      sv[v] = kPartial ? V::LoadPartial(p, rem) : V::Load(p);
    }
#pragma GCC unroll 4
    for (int q = 0; q < MQ; ++q) {
      const typename V::Vec c = V::Set1(coef[q][j]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[q][v] = V::Fma(c, sv[v], acc[q][v]);
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < MQ; ++q) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = out[q] + c0 + v * V::kWidth;
      if constexpr (kPartial) {
        V::StorePartial(p, acc[q][v], rem);
      } else {
        V::Store(p, acc[q][v]);
      }
    }
  }
}

template <int MQ, typename TS>
MLA_TARGET inline void AxpyColumns(float* const* out, const float* init, const float* const* coef,
                                   const TS* const* src, int nsrc, int width) {
  constexpr int NV = V::kAxpyVectors, W = V::kWidth;
  int c0 = 0;
  for (; c0 + NV * W <= width; c0 += NV * W) {
    AxpyTile<MQ, NV, false, TS>(out, init, coef, src, nsrc, c0, 0);
  }
  for (; c0 + W <= width; c0 += W) AxpyTile<MQ, 1, false, TS>(out, init, coef, src, nsrc, c0, 0);
  if (c0 < width) AxpyTile<MQ, 1, true, TS>(out, init, coef, src, nsrc, c0, width - c0);
}

template <typename TS>
MLA_TARGET void Axpy(float* const* out, int n, const float* init, const float* const* coef,
                     const TS* const* src, int nsrc, int width) {
  static_assert(V::kAxpyQueries == 4);
  for (int q0 = 0; q0 < n; q0 += 4) {
    const float* init_q = init != nullptr ? init + q0 : nullptr;
    switch (std::min(4, n - q0)) {
      case 4:
        AxpyColumns<4, TS>(out + q0, init_q, coef + q0, src, nsrc, width);
        break;
      case 3:
        AxpyColumns<3, TS>(out + q0, init_q, coef + q0, src, nsrc, width);
        break;
      case 2:
        AxpyColumns<2, TS>(out + q0, init_q, coef + q0, src, nsrc, width);
        break;
      default:
        AxpyColumns<1, TS>(out + q0, init_q, coef + q0, src, nsrc, width);
        break;
    }
  }
}

// One query's online-softmax step over a row of kTileRows raw scores `s` (overwritten by the
// probabilities p; lanes ≥ valid become 0). Returns α, the factor for the old accumulator.
MLA_TARGET inline float SoftmaxStep(float* s, int valid, float scale, float* max, float* sum) {
  constexpr int NV = kTileRows / V::kWidth;
  if (valid <= 0) {  // every row of the tile is past this query's causal limit
    for (int j = 0; j < kTileRows; ++j) s[j] = 0.0f;
    return 1.0f;
  }
  const typename V::Vec vscale = V::Set1(scale);
#pragma GCC unroll 2
  for (int v = 0; v < NV; ++v)
    V::Store(s + v * V::kWidth, V::Mul(V::Load(s + v * V::kWidth), vscale));
  float tile_max = s[0];
  for (int j = 1; j < valid; ++j) tile_max = std::max(tile_max, s[j]);
  const float new_max = std::max(*max, tile_max);
  const float alpha = std::exp(*max - new_max);  // exp(−inf) = 0 before the first row
  const typename V::Vec vmax = V::Set1(new_max);
  typename V::Vec total = V::Zero();
#pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) {
    float* p = s + v * V::kWidth;
    const typename V::Vec e = V::KeepFirst(V::Exp(V::Sub(V::Load(p), vmax)), valid - v * V::kWidth);
    V::Store(p, e);
    total = V::Add(total, e);
  }
  *sum = alpha * *sum + V::ReduceAdd(total);
  *max = new_max;
  return alpha;
}

MLA_TARGET void AttendTile(const QueryBlock& qb, const float* const* rows, int num_rows,
                           int64_t row0, int key_width, int value_offset, int value_width,
                           float scale) {
  alignas(64) float s[kMaxQueries][kTileRows];
  float alpha[kMaxQueries];
  const float* q_ptr[kMaxQueries];
  float* s_ptr[kMaxQueries];
  const float* p_ptr[kMaxQueries];
  float* acc_ptr[kMaxQueries];
  const float* row_ptr[kTileRows];
  const float* value_ptr[kTileRows];
  for (int j = 0; j < kTileRows; ++j) {
    row_ptr[j] = rows[std::min(j, num_rows - 1)];
    value_ptr[j] = row_ptr[j] + value_offset;
  }
  for (int i = 0; i < qb.n; ++i) {
    q_ptr[i] = qb.q + i * qb.q_stride;
    s_ptr[i] = s[i];
    p_ptr[i] = s[i];
    acc_ptr[i] = qb.acc + i * qb.acc_stride;
  }
  Dots<float>(q_ptr, qb.n, row_ptr, kTileRows, key_width, s_ptr);
  for (int i = 0; i < qb.n; ++i) {
    int64_t valid = num_rows;
    if (qb.limit != nullptr) valid = std::clamp<int64_t>(qb.limit[i] - row0, 0, num_rows);
    alpha[i] = SoftmaxStep(s[i], static_cast<int>(valid), scale, qb.max + i, qb.sum + i);
  }
  Axpy<float>(acc_ptr, qb.n, alpha, p_ptr, value_ptr, num_rows, value_width);
}

// o[c] *= 1 / (1 + exp(−g[c])).
MLA_TARGET void Gate(float* o, const float* g, int64_t n) {
  const typename V::Vec one = V::Set1(1.0f), zero = V::Zero();
  int64_t c = 0;
  for (; c + V::kWidth <= n; c += V::kWidth) {
    const typename V::Vec e = V::Exp(V::Sub(zero, V::Load(g + c)));
    V::Store(o + c, V::Div(V::Load(o + c), V::Add(one, e)));
  }
  if (c < n) {
    const int rem = static_cast<int>(n - c);
    const typename V::Vec e = V::Exp(V::Sub(zero, V::LoadPartial(g + c, rem)));
    V::StorePartial(o + c, V::Div(V::LoadPartial(o + c, rem), V::Add(one, e)), rem);
  }
}

constexpr TileKernels kTileKernels{&Dots<float>, &Axpy<float>,    &AttendTile,    &Gate,
                                   nullptr,      &Dots<uint16_t>, &Axpy<uint16_t>};
