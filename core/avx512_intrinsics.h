// <immintrin.h> for translation units with AVX-512 code paths (compiled per function with
// __attribute__((target(...))) and chosen at run time, see core/cpu_features.h).
//
// GCC 12 reports its own _mm512_undefined_* placeholders inside the AVX-512 intrinsics as
// "(maybe) used uninitialized" (a known false positive), which -Werror turns into build
// failures. Include this header instead of <immintrin.h>; it silences exactly those two
// warnings for the including file.
#pragma once

#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
