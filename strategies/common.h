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

/* The persistent slice a rank keeps of a flat unit padded to a multiple of W (fsdp, yafsdp):
 * fp32 parameters materialised from the counter-based init, a zeroed fp32 gradient
 * accumulator and the optimizer state, each `shard` = padded / W elements. */
typedef struct fb_slice {
  int64_t padded, shard;
  fb_buf p, g;
  fb_optim_state optim;
} fb_slice;

/* dst (device, n floats) = init values of unit u's flat range [start, start+n). */
fb_status fb_materialize_range(fb_rank *r, int u, int64_t start, int64_t n, float *dst);
fb_status fb_optim_alloc(fb_rank *r, int64_t n, const char *label, fb_optim_state *o);
void fb_optim_free(fb_rank *r, fb_optim_state *o);
/* Applies the optimizer to unit u's flat range [start, start+n): p, g, o->m, o->v point at
 * element `start` (o_off = index of `start` inside o). Parameters' own decay flags apply;
 * gaps and padding are left untouched (they stay zero). */
fb_status fb_optim_update(fb_rank *r, int u, int64_t start, int64_t n, float *p, const float *g,
                          fb_optim_state *o, int64_t o_off);
/* The same, and copy[0, n) (r->pdt, element 0 at `start` like p) = the updated parameters in
 * the compute dtype: under AdamW in mixed precision written by the update itself (adamw_cast,
 * no cast pass), its gaps zeroed when zero_gaps (a fresh buffer) and left alone otherwise
 * (they are zero already); else the update followed by fb_to_pdt of the whole range. The bits
 * are those of fb_optim_update followed by fb_to_pdt either way. */
fb_status fb_optim_update_to(fb_rank *r, int u, int64_t start, int64_t n, float *p,
                             const float *g, fb_optim_state *o, int64_t o_off, void *copy,
                             bool zero_gaps);

/* Exact gradient norm: begin, add every locally owned gradient range, finish. When
 * `sharded`, the bins are all-reduced (exact integer sums) on the comm stream. Sets
 * r->grad_norm and r->clip_coef (min(1, clip / (norm + 1e-6)); 1 when clipping is off). */
fb_status fb_norm_begin(fb_rank *r);
fb_status fb_norm_add(fb_rank *r, const float *g, int64_t n);
fb_status fb_norm_finish(fb_rank *r, bool sharded);

/* Mixed precision. Master parameters and accumulators are fp32; compute uses r->pdt and
 * reductions r->rdt. All three are no-ops when the dtypes are fp32 (the cpu backend).
 *  fb_to_pdt: dst (pdt, n) = src (fp32) on the compute stream (a cast op); when pdt is fp32 it
 *    copies unless dst == src.
 *  fb_for_reduce: the buffer to reduce for gradient g (pdt, n elements): g itself when
 *    rdt == pdt, else *tmp (FB_MEM_COMM, allocated here, freed by the caller) holding the cast.
 *  fb_fold_reduced: acc (fp32) = x (rdt) when overwrite, else acc += x; a cast into a
 *    temporary first when rdt is not fp32. */
fb_status fb_to_pdt(fb_rank *r, int unit, void *dst, const float *src, int64_t n);
fb_status fb_for_reduce(fb_rank *r, int unit, void *g, int64_t n, fb_buf *tmp, void **out);
fb_status fb_fold_reduced(fb_rank *r, int unit, float *acc, const void *x, int64_t n,
                          bool overwrite);
/* The same for x of any dtype (e.g. a bf16 unit gradient folded into fp32 accumulators). */
fb_status fb_fold_dtype(fb_rank *r, int unit, float *acc, const void *x, fb_dtype xdt, int64_t n,
                        bool overwrite);

fb_status fb_slice_init(fb_rank *r, int unit, fb_slice *sl);
/* The same with the unit padded to a multiple of `mult` (a multiple of W; zeropp: 2W). */
fb_status fb_slice_init_padded(fb_rank *r, int unit, fb_slice *sl, int64_t mult);
void fb_slice_free(fb_rank *r, fb_slice *sl);
/* The fp32 masters of a unit whose slices `comm` holds: all-gathered into a temporary (the full
 * parameters may be bf16), the first `numel` values copied to `host` (NULL: gather only). */
fb_status fb_slice_read(fb_rank *r, fb_comm *comm, const fb_slice *sl, int64_t numel,
                        float *host);
/* The optimizer step over every unit's slice: exact global norm (bins all-reduced), clipping,
 * then the update of each slice's range [rank*shard, +shard) of its unit. */
fb_status fb_slices_step(fb_rank *r, fb_slice *(*slice_of)(fb_rank *r, int unit));
/* Its first half: the exact global norm over the slices and the clipping coefficient. */
fb_status fb_slices_norm(fb_rank *r, fb_slice *(*slice_of)(fb_rank *r, int unit));

/* Host copy of a device range (waits for the compute stream). */
fb_status fb_read_range(fb_rank *r, const void *src, int64_t n, float *host);

#endif
