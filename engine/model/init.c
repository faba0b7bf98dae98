/* Counter-based initialisation (see init.h). Host-side only: devices receive the values by
 * copy, so every backend starts from bit-identical parameters. Large ranges are filled by the
 * OpenMP threads of the caller (the run's threads per rank), with the same values.
 * The values depend on no C library: the Box-Muller log, sin and cos are our own
 * (init_math.h), sqrt is IEEE's correctly rounded one (an instruction: this file is built with
 * -fno-math-errno) and, built with -ffp-contract=off, no operation is fused into an FMA. So
 * each value is a fixed sequence of IEEE double operations: the same for every glibc/libm
 * version, compiler (gcc, clang), optimisation level, vector width, thread count and x86-64
 * machine; tests/test_init_math.c pins a few bit patterns. (Until this version the values
 * came from glibc's log and cos, whose last bits may change between glibc versions.)
 * The pair loop vectorizes (AVX2 at -march=x86-64-v3): ~3 ns a value on one core here, against
 * ~30 ns for the former scalar libm loop; it is most of a small CPU run's set-up. */
#include "init.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "init_math.h"

static inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Elements 2i and 2i+1 of a parameter: the two outputs (R cos t, R sin t) of one Box-Muller
 * transform of counter i, times std. Inline in both loops below: the scalar ends and the
 * vector body run the same IEEE operations, so a slice equals the same part of the whole. */
static inline void normal_pair(uint64_t key, uint64_t i, double sd, float *even, float *odd) {
  const double two_pi = 6.283185307179586476925286766559;
  uint64_t x = mix64(key + i * 0xD1B54A32D192ED03ull);
  double u1 = (fb_small_u64_to_double(x >> 40) + 1.0) * (1.0 / 16777216.0); /* (0, 1] */
  double u2 = fb_small_u64_to_double(x & 0xFFFFFFull) * (1.0 / 16777216.0); /* [0, 1) */
  double rad = sqrt(-2.0 * fb_log_pos(u1)) * sd, s, c;
  fb_sincos_mid(two_pi * u2, &s, &c);
  *even = (float)(rad * c);
  *odd = (float)(rad * s);
}

/* The serial fill of [start, start+n) of p (the vectorized loop). Built twice, for AVX2
 * (x86-64-v3, the build's baseline) and AVX-512 (x86-64-v4), the one this CPU runs chosen
 * when the program loads: the same IEEE operations on 8 doubles a vector instead of 4 (no FMA
 * either way), so the same bits; ~2.4 -> 1.8 ns a value on one core of an AVX-512 Xeon. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "default")))
#endif
static void param_fill(const fb_param *p, uint64_t seed, int64_t start, int64_t n, float *dst) {
  if (n <= 0) return;
  if (p->init == FB_INIT_ZEROS) {
    memset(dst, 0, (size_t)n * sizeof *dst);
    return;
  }
  if (p->init == FB_INIT_ONES) {
    for (int64_t j = 0; j < n; j++) dst[j] = 1.0f;
    return;
  }
  const uint64_t key = mix64(seed ^ mix64(0x5EEDull + (uint64_t)p->id));
  const double sd = (double)p->std;
  const int64_t end = start + n;
  float spare;
  /* an odd first element is the second half of its pair, an even last one the first half */
  if (start & 1) normal_pair(key, (uint64_t)(start >> 1), sd, &spare, &dst[0]);
  if (end & 1) normal_pair(key, (uint64_t)(end >> 1), sd, &dst[n - 1], &spare);
  const int64_t lo = (start + 1) >> 1, hi = end >> 1; /* whole pairs */
  float *d = dst + (2 * lo - start);
  for (int64_t i = lo; i < hi; i++)
    normal_pair(key, (uint64_t)i, sd, &d[2 * (i - lo)], &d[2 * (i - lo) + 1]);
}

/* The serial fill of unit u's range: parameters in offset order, the gaps between them 0. */
static void unit_fill(const fb_model *m, int u, uint64_t seed, int64_t start, int64_t n,
                      float *dst) {
  const fb_unit *un = &m->units[u];
  const int64_t end = start + n;
  int64_t done = start; /* dst is written up to here */
  for (int i = un->first; i < un->first + un->count; i++) {
    const fb_param *p = &m->params[i];
    int64_t a = p->offset > start ? p->offset : start;
    int64_t b = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (a >= b) continue;
    assert(a >= done && "a unit's parameters are laid out in increasing offsets");
    memset(dst + (done - start), 0, (size_t)(a - done) * sizeof *dst);
    param_fill(p, seed, a - p->offset, b - a, dst + (a - start));
    done = b;
  }
  memset(dst + (done - start), 0, (size_t)(end - done) * sizeof *dst);
}

/* Large ranges are cut into CHUNK-element pieces shared by the caller's OpenMP threads in ONE
 * parallel region per call (a region per parameter costs more in thread wake-ups and barrier
 * spins than it saves on a small model, and much more on a busy machine). Each value depends
 * only on (seed, id, index): the split changes no bit. */
#define CHUNK ((int64_t)1 << 17)

void fb_param_init(const fb_param *p, uint64_t seed, int64_t start, int64_t n, float *dst) {
  const int64_t nc = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 1) if (nc > 1)
  for (int64_t c = 0; c < nc; c++) {
    const int64_t o = c * CHUNK, len = n - o < CHUNK ? n - o : CHUNK;
    param_fill(p, seed, start + o, len, dst + o);
  }
}

void fb_unit_init(const fb_model *m, int u, uint64_t seed, int64_t start, int64_t n, float *dst) {
  const int64_t nc = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 1) if (nc > 1)
  for (int64_t c = 0; c < nc; c++) {
    const int64_t o = c * CHUNK, len = n - o < CHUNK ? n - o : CHUNK;
    unit_fill(m, u, seed, start + o, len, dst + o);
  }
}
