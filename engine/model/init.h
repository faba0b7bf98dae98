/* Deterministic parameter initialisation: the value of element i of parameter p is a pure
 * function of (seed, p->id, i) — a counter-based generator (SplitMix64 finaliser of counter
 * i/2, Box-Muller on its two 24-bit halves; elements 2k and 2k+1 are the transform's cos and
 * sin outputs). Any slice can be generated alone and equals the same slice of the full
 * initialisation, which is what makes sharded ("meta") init exact. */
#ifndef FB_INIT_H
#define FB_INIT_H
#include <stdint.h>

#include "model.h"

/* dst[j] = value of element (start + j) of p, j < n. */
void fb_param_init(const fb_param *p, uint64_t seed, int64_t start, int64_t n, float *dst);
/* dst[j] = element (start + j) of unit u's flat buffer (gaps and world padding are 0). */
void fb_unit_init(const fb_model *m, int u, uint64_t seed, int64_t start, int64_t n, float *dst);

#endif
