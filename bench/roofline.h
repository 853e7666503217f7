// Machine ceilings measured in the same run as a benchmark (PERF.md): streaming read
// bandwidth over all threads, peak f32 FMA and bf16 dot throughput. Each takes well under a second.
#pragma once

namespace strata::bench {

// Bytes per second of a parallel streaming read (sum) over `bytes` of memory (≥ 4× LLC).
double MeasureReadBandwidth(long bytes = 1L << 30);
// f32 FLOP/s of register-resident FMA chains over all threads (AVX-512 when the CPU has it).
double MeasurePeakF32Flops();
// FLOP/s of vdpbf16ps chains over all threads (the ceiling of bf16 products,
// --cpu-matmul-precision bf16); 0 on CPUs without AVX512_BF16.
double MeasurePeakBf16DotFlops();

}  // namespace strata::bench
