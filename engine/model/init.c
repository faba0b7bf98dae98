/* Counter-based initialisation (see init.h). Host-side only: devices receive the values by
 * copy, so every backend starts from bit-identical parameters. */
#include "init.h"

#include <math.h>
#include <string.h>

static inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fb_param_init(const fb_param *p, uint64_t seed, int64_t start, int64_t n, float *dst) {
  if (p->init == FB_INIT_ZEROS) {
    memset(dst, 0, (size_t)n * sizeof *dst);
    return;
  }
  if (p->init == FB_INIT_ONES) {
    for (int64_t j = 0; j < n; j++) dst[j] = 1.0f;
    return;
  }
  const uint64_t key = mix64(seed ^ mix64(0x5EEDull + (uint64_t)p->id));
  const double two_pi = 6.283185307179586476925286766559;
  for (int64_t j = 0; j < n; j++) {
    uint64_t x = mix64(key + (uint64_t)(start + j) * 0xD1B54A32D192ED03ull);
    double u1 = ((double)(x >> 40) + 1.0) * (1.0 / 16777216.0); /* (0, 1] */
    double u2 = (double)(x & 0xFFFFFFull) * (1.0 / 16777216.0); /* [0, 1) */
    double z = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
    dst[j] = (float)(z * (double)p->std);
  }
}

void fb_unit_init(const fb_model *m, int u, uint64_t seed, int64_t start, int64_t n, float *dst) {
  memset(dst, 0, (size_t)n * sizeof *dst);
  const fb_unit *un = &m->units[u];
  const int64_t end = start + n;
  for (int i = un->first; i < un->first + un->count; i++) {
    const fb_param *p = &m->params[i];
    int64_t a = p->offset > start ? p->offset : start;
    int64_t b = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (a < b) fb_param_init(p, seed, a - p->offset, b - a, dst + (a - start));
  }
}
