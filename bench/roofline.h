// Machine ceilings measured in the same run as a benchmark (PERF.md): streaming read
// bandwidth over all threads, and peak f32 FMA throughput. Each takes well under a second.
#pragma once

namespace strata::bench {

// Bytes per second of a parallel streaming read (sum) over `bytes` of memory (≥ 4× LLC).
double MeasureReadBandwidth(long bytes = 1L << 30);
// f32 FLOP/s of register-resident FMA chains over all threads (AVX-512 when the CPU has it).
double MeasurePeakF32Flops();

}  // namespace strata::bench
