// MLA prefill's expanded form (mla_prefill.h) with bf16 products, for MatmulPrecision::kBf16:
// flash attention as GPU engines compute it — the expansion [k_nope ; v] = kv_b_proj · c, the
// scores q · k and the sum P · v as bf16 products with f32 sums (q, k, v and the softmax weights
// P rounded to bf16), the online softmax, its sums and the output in f32. Internal to
// kernels/cpu (mla_prefill.cc calls it).
//
// The products run on 16 × 16 tiles in AMX's operand layouts (internal/amx_tiles.h): on AMX
// tiles where the CPU has AMX-BF16, else with vdpbf16ps on the same packed tiles (AVX512-BF16,
// e.g. AMD Zen 4/5).
//
// Numerics: ~2⁻⁸ relative error of the output scale (four bf16 roundings on the way). A query's
// result depends only on its sequence's rows and its own position — context rows are taken in
// fixed 128-row steps from row 0 and a tile's sums run over k in one order — so it does not
// depend on the batch, on the prompt's chunking (within this form) or on the thread count.
#pragma once

#include "kernels/cpu/mla_prefill.h"

namespace strata::kernels::cpu::internal {

// True when MlaPrefill's expanded items run here: kBf16 precision where it takes effect
// (Bf16MatmulSupported: AVX512-BF16 at the ISA cap) and a key (dn + dr) of at most
// kMlaBf16MaxKeyWidth values; wider keys (no released model) keep the f32 form.
inline constexpr int kMlaBf16MaxKeyWidth = 1024;
bool MlaPrefillUsesBf16(const MlaDims& dims);

// The expanded work item of head h of `seq` (all its new tokens): writes seq.o's columns of h.
void RunExpandedItemBf16(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
                         const MlaPrefillSequence& seq, int h);

// Every head of `seq` with the threads sharing each head (ParallelFor inside: call it outside
// one); the same outputs as RunExpandedItemBf16 for each head, bit for bit.
void RunExpandedSplitBf16(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
                          const MlaPrefillSequence& seq);

// The 32-query blocks the split shares out (more than one: worth splitting).
int64_t MlaBf16QueryBlocks(int64_t num_new_tokens);

}  // namespace strata::kernels::cpu::internal
