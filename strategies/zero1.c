/* `zero1` (DeepSpeed ZeRO stage 1): parameters and gradients replicated, optimizer state
 * sharded. Every rank keeps the full parameters (compute dtype) and, during backward, the full
 * gradient of every unit; rank r owns slice r (fsdp's padded flat layout) of the fp32 master
 * parameters, of the fp32 gradient accumulator and of the optimizer state. Once the backward
 * of a reducing micro-step has finished, every unit's full gradient is reduce-scattered into
 * the owners' slices (rank order 0..W-1 on the local communicator, as fsdp) and freed; the
 * step updates each rank's slice and all-gathers the slices into everyone's full parameters.
 * The machinery is shared with zero2 (zero12.c, fb_zero_*); this file decides when to reduce.
 * Accumulation: reduce (every micro-step; later micro-steps reduce into a temporary that is
 * added to the slice) or no-reduce (DeepSpeed's stage 1 communicates only at the accumulation
 * boundary: gradients accumulate locally, the last micro-step reduces them). no-reshard is
 * refused: the parameters are replicated and never resharded.
 * The reductions wait for the whole backward unless --overlap-grad-reduce (DeepSpeed's
 * overlap_comm) issues each as its unit finishes; --param-sync broadcast rebuilds the replicas
 * by one broadcast per owner, --grad-reduce all-reduce sums the whole gradient on every rank
 * (both InternLM's). It does not bucket units together, or
 * model DeepSpeed's host work: no public per-hook figure is cited here (host = NULL). */
#include "zero12.h"

static fb_status z1_setup(fb_rank *r) {
  const fb_run_config *c = r->cfg;
  const int n_micro = c->batch / r->world / c->micro_batch;
  if (n_micro > 1 && c->accum == FB_ACCUM_NO_RESHARD)
    return FB_ERR(FB_EUSAGE, "--accum: 'no-reshard' is not available with zero1 (parameters are "
                  "replicated, never resharded); allowed: reduce, no-reduce");
  return fb_zero_setup(r);
}

/* At a reducing micro-step (every one, or the last under --accum no-reduce): with
 * --overlap-grad-reduce each unit's gradient is reduce-scattered as its backward ends (zero2's
 * schedule); else nothing is reduced until the root, the last unit of the backward, completes,
 * then every unit, in the order backward completed them. */
static fb_status z1_post_backward(fb_rank *r, int u) {
  r->view[u].grads = NULL;
  const bool last_micro = r->micro == r->n_micro - 1;
  if (r->cfg->accum == FB_ACCUM_NO_REDUCE && !last_micro) return FB_OK;
  if (r->cfg->overlap_grad_reduce)
    FB_TRY(fb_zero_reduce(r, u));
  else if (u == 0)
    for (int i = r->model->nunits - 1; i >= 0; i--) FB_TRY(fb_zero_reduce(r, i));
  if (u != 0) return FB_OK;
  /* folded before the next micro-step; after the last one the step folds them */
  return last_micro ? FB_OK : fb_zero_fold_all(r);
}

const fb_strategy fb_strategy_zero1 = {
    .name = "zero1",
    .summary = "ZeRO-1: replicated params and grads, sharded optimizer; reduce-scatter after "
               "backward",
    .setup = z1_setup,
    .teardown = fb_zero_teardown,
    .pre_forward = fb_zero_pre_forward,
    .post_forward = fb_zero_post_forward,
    .pre_backward = fb_zero_pre_backward,
    .post_backward = z1_post_backward,
    .optimizer_step = fb_zero_step,
    .read_params = fb_zero_read_params,
    .host = NULL,
    .accum_modes = 1u << FB_ACCUM_NO_REDUCE, /* DeepSpeed stage 1: reduce at the boundary */
    .memory = "4P + 16P/W: params 4P replicated; fp32 master + grad shard + AdamW 16P/W; "
              "+ full grads 4P during backward",
    .tunes_grad_overlap = true,
    .param_sync = true,
    .grad_all_reduce = true,
    .mesh = true,
    .state_ranges = fb_zero_state_ranges,
    .state_loaded = fb_zero_state_loaded,
};
