/* Pieces every strategy uses: flat-shard layout, materialising a range of a unit from the
 * counter-based init (so a rank builds only its shard), optimizer state and the update of a
 * range that may cross parameter boundaries (weight decay per parameter), the exact global
 * gradient norm and clipping, and parameter readback for the final sum.
 * Nothing here issues collectives except fb_norm_finish (all-reduce of the norm bins). */
#ifndef FB_STRATEGY_COMMON_H
#define FB_STRATEGY_COMMON_H
#include "strategy.h"

static inline int64_t fb_round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

typedef struct fb_optim_state {
  fb_buf m, v; /* AdamW moments (SGD: m = momentum, v empty) */
} fb_optim_state;

/* dst (device, n floats) = init values of unit u's flat range [start, start+n). */
fb_status fb_materialize_range(fb_rank *r, int u, int64_t start, int64_t n, float *dst);
fb_status fb_optim_alloc(fb_rank *r, int64_t n, const char *label, fb_optim_state *o);
void fb_optim_free(fb_rank *r, fb_optim_state *o);
/* Applies the optimizer to unit u's flat range [start, start+n): p, g, o->m, o->v point at
 * element `start` (o_off = index of `start` inside o). Parameters' own decay flags apply;
 * gaps and padding are left untouched (they stay zero). */
fb_status fb_optim_update(fb_rank *r, int u, int64_t start, int64_t n, float *p, const float *g,
                          fb_optim_state *o, int64_t o_off);

/* Exact gradient norm: begin, add every locally owned gradient range, finish. When
 * `sharded`, the bins are all-reduced (exact integer sums) on the comm stream. Sets
 * r->grad_norm and r->clip_coef (min(1, clip / (norm + 1e-6)); 1 when clipping is off). */
fb_status fb_norm_begin(fb_rank *r);
fb_status fb_norm_add(fb_rank *r, const float *g, int64_t n);
fb_status fb_norm_finish(fb_rank *r, bool sharded);

/* Host copy of a device range (waits for the compute stream). */
fb_status fb_read_range(fb_rank *r, const void *src, int64_t n, float *host);

#endif
