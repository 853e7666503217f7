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

// Scores of the lane block's queries against SR rows: s[j][lane] = scale · qᵀ[·][lane] · r[j]
// (the row's values broadcast, kLaneQueries / kWidth query vectors per row).
template <int SR>
MLA_TARGET inline void LaneScores(const float* qt, const float* const* r, int key_width,
                                  float scale, float (*s)[kLaneQueries]) {
  constexpr int NQ = kLaneQueries / V::kWidth;
  typename V::Vec acc[SR][NQ];
#pragma GCC unroll 8
  for (int j = 0; j < SR; ++j) {
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) acc[j][v] = V::Zero();
  }
  for (int k = 0; k < key_width; ++k) {
    typename V::Vec q[NQ];
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) q[v] = V::Load(qt + k * kLaneQueries + v * V::kWidth);
#pragma GCC unroll 8
    for (int j = 0; j < SR; ++j) {
      const typename V::Vec b = V::Set1(r[j][k]);
#pragma GCC unroll 4
      for (int v = 0; v < NQ; ++v) acc[j][v] = V::Fma(q[v], b, acc[j][v]);
    }
  }
  const typename V::Vec vscale = V::Set1(scale);
#pragma GCC unroll 8
  for (int j = 0; j < SR; ++j) {
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) V::Store(s[j] + v * V::kWidth, V::Mul(acc[j][v], vscale));
  }
}

// acc[c][lane] = alpha[lane] · acc[c][lane] + Σ_{j < num_rows} p[j][lane] · r[j][c] for CB
// columns from c0 (each element the same instruction sequence whatever CB). One base pointer
// per row and one for the accumulators (constant offsets): with a pointer per column GCC ran
// out of registers and bounced the probabilities through the stack (PV at a third of the rate).
template <int CB>
MLA_TARGET inline void LaneValues(float* acc, const typename V::Vec* alpha,
                                  const float (*p)[kLaneQueries], const float* const* r,
                                  int num_rows, int c0) {
  constexpr int NQ = kLaneQueries / V::kWidth, W = V::kWidth;
  float* const out = acc + c0 * kLaneQueries;
  typename V::Vec a[CB][NQ];
#pragma GCC unroll 8
  for (int c = 0; c < CB; ++c) {
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) {
      a[c][v] = V::Mul(V::Load(out + c * kLaneQueries + v * W), alpha[v]);
    }
  }
  for (int j = 0; j < num_rows; ++j) {
    const float* const pj = p[j];
    const float* const vr = r[j] + c0;
    typename V::Vec pv[NQ];
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) pv[v] = V::Load(pj + v * W);
#pragma GCC unroll 8
    for (int c = 0; c < CB; ++c) {
      const typename V::Vec b = V::Set1(vr[c]);
#pragma GCC unroll 4
      for (int v = 0; v < NQ; ++v) a[c][v] = V::Fma(pv[v], b, a[c][v]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < CB; ++c) {
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) V::Store(out + c * kLaneQueries + v * W, a[c][v]);
  }
}

MLA_TARGET void AttendLanes(const LaneBlock& lb, const float* const* rows, int num_rows,
                            int64_t row0, int key_width, int value_offset, int value_width,
                            float scale) {
  constexpr int NQ = kLaneQueries / V::kWidth, SR = V::kLaneScoreRows, CB = V::kLaneValueCols;
  static_assert(kLaneTileRows % SR == 0);
  alignas(64) float s[kLaneTileRows][kLaneQueries];
  // Scores in base 2 (scale · log₂e folded in; max and sum live in that domain), SR rows at a
  // time (rows past num_rows repeat the last one and are never read).
  const float scale2 = scale * 1.44269504088896341f;
  for (int j0 = 0; j0 < num_rows; j0 += SR) {
    const float* r[SR];
    for (int j = 0; j < SR; ++j) r[j] = rows[std::min(j0 + j, num_rows - 1)];
    LaneScores<SR>(lb.qt, r, key_width, scale2, s + j0);
  }
  // Causal mask and the online softmax, lane-wise.
  typename V::Vec limit[NQ], old_max[NQ], new_max[NQ], alpha[NQ], sum[NQ];
#pragma GCC unroll 4
  for (int v = 0; v < NQ; ++v) {
    limit[v] = V::Load(lb.limit + v * V::kWidth);
    old_max[v] = new_max[v] = V::Load(lb.max + v * V::kWidth);
  }
  for (int j = 0; j < num_rows; ++j) {
    const int64_t row = row0 + j;
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) {
      typename V::Vec sj = V::Load(s[j] + v * V::kWidth);
      if (row >= lb.min_limit) {
        sj = V::MaskFromRow(sj, limit[v], static_cast<float>(row - lb.min_limit));
        V::Store(s[j] + v * V::kWidth, sj);
      }
      new_max[v] = V::Max(new_max[v], sj);
    }
  }
  typename V::Vec base[NQ];
#pragma GCC unroll 4
  for (int v = 0; v < NQ; ++v) {
    // A lane with no row yet keeps max −inf; its p and α are 2^(−inf − 0) = 0.
    base[v] = V::ZeroIfNegInf(new_max[v]);
    alpha[v] = V::Exp2(V::Sub(old_max[v], base[v]));
    sum[v] = V::Mul(alpha[v], V::Load(lb.sum + v * V::kWidth));
  }
  for (int j = 0; j < num_rows; ++j) {
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) {
      const typename V::Vec p = V::Exp2(V::Sub(V::Load(s[j] + v * V::kWidth), base[v]));
      V::Store(s[j] + v * V::kWidth, p);
      sum[v] = V::Add(sum[v], p);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < NQ; ++v) {
    V::Store(lb.max + v * V::kWidth, new_max[v]);
    V::Store(lb.sum + v * V::kWidth, sum[v]);
  }
  const float* value_rows[kLaneTileRows];
  for (int j = 0; j < num_rows; ++j) value_rows[j] = rows[j] + value_offset;
  int c0 = 0;
  for (; c0 + CB <= value_width; c0 += CB) {
    LaneValues<CB>(lb.acc, alpha, s, value_rows, num_rows, c0);
  }
  for (; c0 < value_width; ++c0) LaneValues<1>(lb.acc, alpha, s, value_rows, num_rows, c0);
}

constexpr TileKernels kTileKernels{&Dots<float>, &Axpy<float>,    &AttendTile,     &Gate,
                                   nullptr,      &Dots<uint16_t>, &Axpy<uint16_t>, &AttendLanes};
