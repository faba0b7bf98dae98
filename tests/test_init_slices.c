/* Deterministic initialisation is a pure function of (seed, parameter, index): any slice of
 * any parameter generated alone equals the same slice of the full initialisation, unit ranges
 * across parameter boundaries match parameter by parameter, gaps are zero, different seeds or
 * parameters differ, and the values have the requested spread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/config/config.h"
#include "engine/model/init.h"

int main(void) {
  fb_model_spec spec;
  fb_model m;
  CHECK_OK(fb_model_spec_load("debug-llama", &spec));
  CHECK_OK(fb_model_build(&spec, &m));
  uint64_t x = 99;
  for (int i = 0; i < m.nparams; i++) {
    const fb_param *p = &m.params[i];
    float *full = malloc(p->numel * sizeof *full), *part = malloc(p->numel * sizeof *part);
    fb_param_init(p, 7, 0, p->numel, full);
    for (int k = 0; k < 5; k++) {
      x = x * 6364136223846793005ull + 1;
      int64_t a = (int64_t)((x >> 20) % (uint64_t)p->numel);
      int64_t n = 1 + (int64_t)((x >> 40) % (uint64_t)(p->numel - a));
      fb_param_init(p, 7, a, n, part);
      CHECK(!memcmp(part, full + a, n * sizeof *part), "%s slice [%lld, +%lld) differs", p->name,
            (long long)a, (long long)n);
    }
    if (p->init == FB_INIT_NORMAL && p->numel > 10000) {
      double s = 0, s2 = 0;
      for (int64_t j = 0; j < p->numel; j++) s += full[j], s2 += (double)full[j] * full[j];
      double mean = s / p->numel, sd = sqrt(s2 / p->numel - mean * mean);
      CHECK(fabs(mean) < 0.05 * p->std && fabs(sd / p->std - 1) < 0.05,
            "%s: mean %.3g sd %.4g, want 0 and %.4g", p->name, mean, sd, p->std);
      float *other = malloc(p->numel * sizeof *other);
      fb_param_init(p, 8, 0, p->numel, other);
      CHECK(memcmp(other, full, p->numel * sizeof *other), "%s: seed 7 and 8 agree", p->name);
      free(other);
    }
    free(full);
    free(part);
  }
  /* unit ranges, including world padding past the end, against parameter-wise init */
  for (int u = 0; u < m.nunits; u++) {
    const fb_unit *un = &m.units[u];
    const int64_t padded = un->numel + 5;
    float *flat = calloc(padded, sizeof *flat), *piece = malloc(padded * sizeof *piece);
    for (int i = un->first; i < un->first + un->count; i++)
      fb_param_init(&m.params[i], 7, 0, m.params[i].numel, flat + m.params[i].offset);
    for (int64_t a = 0; a < padded; a += padded / 3 + 1) {
      int64_t n = padded - a < padded / 3 + 1 ? padded - a : padded / 3 + 1;
      int64_t valid = a < un->numel ? (un->numel - a < n ? un->numel - a : n) : 0;
      memset(piece, 0xff, n * sizeof *piece);
      if (valid) fb_unit_init(&m, u, 7, a, valid, piece);
      for (int64_t j = valid; j < n; j++) piece[j] = 0;
      CHECK(!memcmp(piece, flat + a, n * sizeof *piece), "unit %d range [%lld, +%lld) differs",
            u, (long long)a, (long long)n);
    }
    free(flat);
    free(piece);
  }
  fb_model_free(&m);
  return fb_test_done("test_init_slices");
}
