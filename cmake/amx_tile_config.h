// Force-included into ggml-cpu's AMX matmul (see cmake/ggml-cpu-tuning.cmake).
//
// GCC 12's <amxtileintrin.h> gives `ldtilecfg` an 8-byte memory operand, so the
// optimizer may treat the stores that fill the rest of the 64-byte tile
// configuration as dead and drop them. ggml's AMX kernel then loads a
// half-zeroed configuration and the first tile load faults (SIGSEGV on every
// quantized batch of more than one row). The same instruction with an operand
// that covers all 64 bytes keeps the stores.
#pragma once
#if defined(__AMX_TILE__) && defined(__x86_64__)
#include <immintrin.h>
#undef _tile_loadconfig
#define _tile_loadconfig(config) \
    __asm__ volatile("ldtilecfg\t%X0" ::"m"(*(const unsigned char(*)[64])(config)))
#endif
