/* The state_ranges hook (strategy.h) for the layouts strategies share: padded flat slices
 * (fsdp, yafsdp and friends), full replicas (single, ddp) and whole tensors owned by ranks
 * (zero3). Each returns a malloc'd array the caller frees. It does not move any data. */
#ifndef FB_STATE_RANGES_H
#define FB_STATE_RANGES_H
#include "common.h"

/* Slice r of every unit, [rank*shard, +shard) clipped to the unit (padding is not state). */
fb_status fb_ranges_slices(fb_rank *r, fb_slice *(*slice_of)(fb_rank *r, int unit),
                           fb_state_range **out, int *n);
/* Full units (params[u], optim[u]) on every rank: all of it to load; to save, rank k writes
 * the k-th of W equal pieces of each unit. */
fb_status fb_ranges_replicas(fb_rank *r, bool save, const fb_buf *params,
                             const fb_optim_state *optim, fb_state_range **out, int *n);
/* Ranges of `cnt` elements starting at `start` with state at p, m, v: appends one. */
fb_status fb_ranges_push(fb_state_range **v, int *n, int *cap, int unit, int64_t start,
                         int64_t cnt, float *p, const fb_optim_state *o, int64_t o_off);

#endif
