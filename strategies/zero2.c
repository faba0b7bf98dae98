/* `zero2` (DeepSpeed ZeRO stage 2): parameters replicated, gradients and optimizer state
 * sharded. Every rank keeps the full parameters (compute dtype); rank r owns slice r (fsdp's
 * padded flat layout) of the fp32 master parameters, of the fp32 gradient accumulator and of
 * the optimizer state. As each unit's backward completes, its full gradient is reduce-scattered
 * on the comm stream into the owners' slices (rank order 0..W-1 on the local communicator, as
 * fsdp), overlapping the next unit's backward, and freed: besides the shard only the root's
 * gradient (alive from the head to the embedding backward) and the current unit's exist. The
 * step updates each rank's slice and all-gathers the slices into everyone's full parameters.
 * The machinery is shared with zero1 (zero12.c, fb_zero_*); this file decides when to reduce.
 * Accumulation: reduce only (later micro-steps reduce into a temporary added to the slice).
 * no-reduce is refused, as DeepSpeed refuses no_sync with ZeRO stage 2 (keeping full gradients
 * across micro-steps is zero1); no-reshard too (parameters are never resharded).
 * It does not bucket units together or model DeepSpeed's host work (its per-parameter gradient
 * hooks): no public per-hook figure is cited here (host = NULL). */
#include "zero12.h"

static fb_status z2_setup(fb_rank *r) {
  const fb_run_config *c = r->cfg;
  const int n_micro = c->batch / r->world / c->micro_batch;
  if (n_micro > 1 && c->accum != FB_ACCUM_REDUCE)
    return FB_ERR(FB_EUSAGE, "--accum: '%s' is not available with zero2 (%s); allowed: reduce",
                  c->accum == FB_ACCUM_NO_RESHARD ? "no-reshard" : "no-reduce",
                  c->accum == FB_ACCUM_NO_RESHARD
                      ? "parameters are replicated, never resharded"
                      : "gradients are sharded as backward goes; use --strategy zero1 to keep "
                        "them unsharded across micro-steps");
  return fb_zero_setup(r);
}

static fb_status z2_post_backward(fb_rank *r, int u) {
  r->view[u].grads = NULL;
  FB_TRY(fb_zero_reduce(r, u));
  /* the micro-step ends with the root: fold its reductions before the next one */
  return u == 0 && r->micro < r->n_micro - 1 ? fb_zero_fold_all(r) : FB_OK;
}

const fb_strategy fb_strategy_zero2 = {
    .name = "zero2",
    .summary = "ZeRO-2: replicated params, sharded grads and optimizer; per-unit reduce-scatter "
               "in backward",
    .setup = z2_setup,
    .teardown = fb_zero_teardown,
    .pre_forward = fb_zero_pre_forward,
    .post_forward = fb_zero_post_forward,
    .pre_backward = fb_zero_pre_backward,
    .post_backward = z2_post_backward,
    .optimizer_step = fb_zero_step,
    .read_params = fb_zero_read_params,
    .host = NULL,
    .memory = "4P + 16P/W: params 4P replicated; fp32 master + grad shard + AdamW 16P/W; "
              "+ full grads of the root and one unit",
    .param_sync = true,
    .grad_all_reduce = true,
    .mesh = true,
    .state_ranges = fb_zero_state_ranges,
    .state_loaded = fb_zero_state_loaded,
};
