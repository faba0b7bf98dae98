/* fsdp's state machine (fsdp.c) on the groups of a device mesh, shared by `fsdp` (one group:
 * the whole world) and `hsdp` (hsdp.c: shard groups inside, replica groups across). It only
 * declares the hooks; the tables are in fsdp.c and hsdp.c. */
#ifndef FB_STRATEGY_FSDP_H
#define FB_STRATEGY_FSDP_H
#include "strategy.h"

/* Sets up fsdp's units sliced over `shard` (the slices, the gathers and the reduce-scatters;
 * r->comm for fsdp). With `replica` (NULL: none) each reduce-scatter's output is then
 * all-reduced over it. Takes both communicators: those other than r->comm are destroyed at
 * teardown (or here when setup fails). */
fb_status fb_fsdp_setup_groups(fb_rank *r, fb_comm *shard, fb_comm *replica);
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
