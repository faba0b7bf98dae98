/* fsdp's state machine (fsdp.c) on the groups of a device mesh, shared by `fsdp` (one group:
 * the whole world) and `hsdp` (hsdp.c: shard groups inside, replica groups across). It only
 * declares the hooks; the tables are in fsdp.c and hsdp.c. */
#ifndef FB_STRATEGY_FSDP_H
#define FB_STRATEGY_FSDP_H
#include "strategy.h"

/* Sets up fsdp's units sliced over the shard group of the strategy's mesh (mesh.h: --mesh,
 * else 1 x W = r->comm for fsdp; with `node_default`, hsdp's default of a node per shard
 * group); each reduce-scatter's output is then all-reduced over the replica group. */
fb_status fb_fsdp_setup_mesh(fb_rank *r, bool node_default);
void fb_fsdp_teardown(fb_rank *r);
fb_status fb_fsdp_pre_forward(fb_rank *r, int unit);
fb_status fb_fsdp_post_forward(fb_rank *r, int unit);
fb_status fb_fsdp_pre_backward(fb_rank *r, int unit);
fb_status fb_fsdp_post_backward(fb_rank *r, int unit);
fb_status fb_fsdp_step(fb_rank *r);
fb_status fb_fsdp_read_params(fb_rank *r, int unit, float *host_full);
fb_status fb_fsdp_state_ranges(fb_rank *r, bool save, fb_state_range **out, int *n);
/* FSDP1's host work per unit (sources in fsdp.c); HYBRID_SHARD runs the same hooks. */
extern const fb_host_costs fb_fsdp_host;

#endif
