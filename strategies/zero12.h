/* The ZeRO stage 1 and 2 machine (zero12.c), the hooks zero1.c and zero2.c are made of. */
#ifndef FB_STRATEGY_ZERO12_H
#define FB_STRATEGY_ZERO12_H
#include "common.h"

/* ZeRO stages 1 and 2 (zero1.c, zero2.c): parameters replicated, optimizer state (and, for
 * stage 2, gradients) sharded as fsdp's slices. A unit keeps fsdp's fb_slice — fp32 master
 * slice, fp32 gradient shard, optimizer state, 1/W of the padded flat unit each — and its full
 * parameters in the compute dtype, padded: under fp32 they are the replicated parameters
 * (FB_MEM_PARAM_SHARD, as ddp's), under bf16 a compute copy (FB_MEM_PARAM_FULL, as ddp's). A
 * full gradient (FB_MEM_GRAD_FULL) lives from the unit's pre-backward to its reduce-scatter,
 * which the strategy issues (fb_zero_reduce) when it chooses. The step folds the reductions,
 * takes the exact norm over the shards, updates the slices and all-gathers each into every
 * rank's full parameters; a unit's next use waits for its gather. r->st is an fb_zero_state.
 * On a mesh (--mesh RxS, mesh.h) the slices are 1/S of the shard group's, the reduce-scatter
 * runs in the shard group and its output is all-reduced across the replicas, the step's
 * all-gather stays in the shard group. */
typedef struct fb_zunit {
  fb_slice sl;
  fb_buf full;                   /* replicated parameters (pdt, padded) */
  fb_buf g_full;                 /* full gradient (pdt, padded) until its reduce-scatter */
  fb_buf g_cast, rs_tmp, p_cast; /* reduce-dtype cast, reduction output to fold, gather cast */
  bool gathering, rs_pending, acc_pending, acc_overwrite;
  fb_event *ev_ready, *ev_rs, *ev_gather;
} fb_zunit;

typedef struct fb_zero_state {
  fb_zunit *u;   /* [nunits] */
  fb_comm_mesh mesh; /* --mesh: slices over its shard group, reductions then across replicas */
  int fold_next; /* unit whose reduction output is folded at the next reduction, -1 none */
} fb_zero_state;

fb_status fb_zero_setup(fb_rank *r);
void fb_zero_teardown(fb_rank *r);
/* r->view[u].params = the full parameters, once the compute stream waited for their gather. */
fb_status fb_zero_pre_forward(fb_rank *r, int u);
fb_status fb_zero_post_forward(fb_rank *r, int u);
/* The parameters, and r->view[u].grads = the full gradient: zeroed, or kept as it is when
 * --accum no-reduce accumulates a micro-step > 0 into it. */
fb_status fb_zero_pre_backward(fb_rank *r, int u);
/* Reduce-scatters unit u's full gradient (in r->rdt) on the comm stream into its gradient
 * shard (micro-step 0 or a no-reduce reduction, fp32) or into a temporary that a later fold
 * adds (overwrites at micro-step 0); frees the full gradient after the comm stream. The
 * previous temporary is folded then: at most two are alive. */
fb_status fb_zero_reduce(fb_rank *r, int u);
/* Waits for every issued reduce-scatter and folds the temporaries into the shards. */
fb_status fb_zero_fold_all(fb_rank *r);
fb_status fb_zero_step(fb_rank *r);
fb_status fb_zero_read_params(fb_rank *r, int u, float *host);
/* Checkpoints: the slices' ranges; after a load, the replicas gathered from them. */
fb_status fb_zero_state_ranges(fb_rank *r, bool save, fb_state_range **out, int *n);
fb_status fb_zero_state_loaded(fb_rank *r);

#endif
