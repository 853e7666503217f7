// Machine ceilings measured in the same run as a benchmark (docs/performance.md): streaming read
// bandwidth over all threads, peak f32 FMA, bf16 dot and AMX bf16 throughput. Each takes well under
// a second.
#pragma once

namespace strata::bench {

// Bytes per second of a parallel streaming read (sum) over `bytes` of memory (≥ 4× LLC).
double MeasureReadBandwidth(long bytes = 1L << 30);
// f32 FLOP/s of register-resident FMA chains over all threads (AVX-512 when the CPU has it).
double MeasurePeakF32Flops();
// FLOP/s of vdpbf16ps chains over all threads (the ceiling of bf16 products,
// --cpu-matmul-precision bf16); 0 on CPUs without AVX512_BF16.
double MeasurePeakBf16DotFlops();
// FLOP/s of AMX tdpbf16ps chains over all threads (the ceiling of bf16 products on AMX CPUs); 0
// without AMX-BF16 (CpuFeatures::amx_bf16) or below the AVX512_BF16 ISA cap.
double MeasurePeakAmxBf16Flops();

// One thread's AMX ceiling loop: tdpbf16ps on four accumulator tiles from two resident operand
// tiles (16 × 32 bf16), kAmxBf16ChainFlops per iteration; returns a sum to keep. Needs
// CpuFeatures::amx_bf16.
inline constexpr double kAmxBf16ChainFlops = 4.0 * 16 * 16 * 32 * 2;
float AmxBf16Chains(long iterations);

}  // namespace strata::bench
