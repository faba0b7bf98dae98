/* Shared state_ranges layouts (state_ranges.h). */
#include "state_ranges.h"

#include <stdlib.h>

static float *at(const fb_buf *b, int64_t off) { return b->ptr ? (float *)b->ptr + off : NULL; }

fb_status fb_ranges_push(fb_state_range **v, int *n, int *cap, int unit, int64_t start,
                         int64_t cnt, float *p, const fb_optim_state *o, int64_t o_off) {
  if (cnt <= 0) return FB_OK;
  if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 16;
    fb_state_range *t = realloc(*v, (size_t)nc * sizeof *t);
    if (!t) return FB_ERR(FB_ENOMEM, "out of host memory (state ranges)");
    *v = t, *cap = nc;
  }
  (*v)[(*n)++] = (fb_state_range){.unit = unit, .start = start, .n = cnt, .p = p,
                                  .m = o ? at(&o->m, o_off) : NULL,
                                  .v = o ? at(&o->v, o_off) : NULL};
  return FB_OK;
}

fb_status fb_ranges_slices(fb_rank *r, fb_slice *(*slice_of)(fb_rank *r, int unit),
                           fb_state_range **out, int *n) {
  int cap = 0;
  *out = NULL, *n = 0;
  for (int u = 0; u < r->model->nunits; u++) {
    fb_slice *sl = slice_of(r, u);
    const int64_t start = (int64_t)r->rank * sl->shard, numel = r->model->units[u].numel;
    const int64_t cnt = start >= numel ? 0 : (numel - start < sl->shard ? numel - start : sl->shard);
    fb_status st = fb_ranges_push(out, n, &cap, u, start, cnt, at(&sl->p, 0), &sl->optim, 0);
    if (st != FB_OK) {
      free(*out);
      return st;
    }
  }
  return FB_OK;
}

fb_status fb_ranges_replicas(fb_rank *r, bool save, const fb_buf *params,
                             const fb_optim_state *optim, fb_state_range **out, int *n) {
  int cap = 0;
  *out = NULL, *n = 0;
  for (int u = 0; u < r->model->nunits; u++) {
    const int64_t numel = r->model->units[u].numel;
    int64_t lo = 0, hi = numel;
    if (save) { /* replicas share the writing: piece `rank` of W */
      const int64_t piece = (numel + r->world - 1) / r->world;
      lo = (int64_t)r->rank * piece;
      hi = lo + piece < numel ? lo + piece : numel;
    }
    fb_status st = fb_ranges_push(out, n, &cap, u, lo, hi - lo, at(&params[u], lo),
                                  optim ? &optim[u] : NULL, lo);
    if (st != FB_OK) {
      free(*out);
      return st;
    }
  }
  return FB_OK;
}
