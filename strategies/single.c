/* `single`: one rank holds everything — parameters, gradients, optimizer state — and runs
 * AdamW on all of it. The reference every other strategy must reproduce. With several
 * micro-steps, micro-step 0 writes the gradient accumulator directly and later micro-steps
 * compute into a fresh unit buffer that is then added, so the sum order equals a W-rank
 * reduction in rank order (acc = g0; acc += g1; ...). With bf16 compute it keeps a bf16 copy
 * of the fp32 master parameters (refreshed after each update) and folds each micro-step's
 * bf16 unit gradient into the fp32 accumulator. */
#include <stdlib.h>

#include "common.h"
#include "state_ranges.h"

typedef struct single_state {
  fb_buf *params, *grads; /* [nunits] */
  fb_optim_state *optim;  /* [nunits] */
  fb_buf *tmp;            /* [nunits] unit gradient of micro-steps > 0 (root's lives long) */
  fb_buf *pcopy;          /* [nunits] bf16 compute copies (mixed precision only) */
} single_state;

static void single_teardown(fb_rank *r) {
  single_state *s = r->st;
  if (!s) return;
  for (int u = 0; u < r->model->nunits; u++) {
    if (s->params) fb_free(r->dev, &s->params[u], NULL);
    if (s->grads) fb_free(r->dev, &s->grads[u], NULL);
    if (s->optim) fb_optim_free(r, &s->optim[u]);
    if (s->tmp) fb_free(r->dev, &s->tmp[u], NULL);
    if (s->pcopy) fb_free(r->dev, &s->pcopy[u], NULL);
  }
  free(s->tmp);
  free(s->pcopy);
  free(s->params);
  free(s->grads);
  free(s->optim);
  free(s);
  r->st = NULL;
}

static fb_status single_setup(fb_rank *r) {
  const int n = r->model->nunits;
  single_state *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory (single state)");
  r->st = s;
  s->params = calloc((size_t)n, sizeof *s->params);
  s->grads = calloc((size_t)n, sizeof *s->grads);
  s->optim = calloc((size_t)n, sizeof *s->optim);
  s->tmp = calloc((size_t)n, sizeof *s->tmp);
  s->pcopy = calloc((size_t)n, sizeof *s->pcopy);
  if (!s->params || !s->grads || !s->optim || !s->tmp || !s->pcopy) {
    single_teardown(r);
    return FB_ERR(FB_ENOMEM, "out of host memory (single state)");
  }
  fb_status st;
  for (int u = 0; u < n; u++) {
    const int64_t len = r->model->units[u].numel;
    FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)len * 4, FB_MEM_PARAM_SHARD, "params", &s->params[u]),
                  fail);
    FB_CHECK_GOTO(st, fb_materialize_range(r, u, 0, len, s->params[u].ptr), fail);
    FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)len * 4, FB_MEM_GRAD_SHARD, "grads", &s->grads[u]),
                  fail);
    FB_CHECK_GOTO(st, fb_optim_alloc(r, len, "optim", &s->optim[u]), fail);
    if (r->pdt != FB_F32) {
      FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)len * fb_psz(r), FB_MEM_PARAM_FULL,
                                 "params.compute_copy", &s->pcopy[u]), fail);
      FB_CHECK_GOTO(st, fb_to_pdt(r, u, s->pcopy[u].ptr, s->params[u].ptr, len), fail);
    }
  }
  return FB_OK;
fail:
  single_teardown(r);
  return st;
}

static void *compute_params(single_state *s, const fb_rank *r, int u) {
  return r->pdt == FB_F32 ? s->params[u].ptr : s->pcopy[u].ptr;
}

static fb_status single_pre_forward(fb_rank *r, int u) {
  single_state *s = r->st;
  r->view[u].params = compute_params(s, r, u);
  return FB_OK;
}

static fb_status single_post_forward(fb_rank *r, int u) { return FB_OK; }

static fb_status single_pre_backward(fb_rank *r, int u) {
  single_state *s = r->st;
  const size_t bytes = (size_t)r->model->units[u].numel * fb_psz(r);
  fb_kctx k = fb_rank_kctx(r, r->compute, u);
  r->view[u].params = compute_params(s, r, u);
  if (r->micro == 0 && r->pdt == FB_F32) {
    r->view[u].grads = s->grads[u].ptr;
    return fb_k_memset0(&k, "zero_grad", s->grads[u].ptr, bytes);
  }
  FB_TRY(fb_alloc(r->dev, bytes, FB_MEM_GRAD_FULL, "grads.micro", &s->tmp[u]));
  r->view[u].grads = s->tmp[u].ptr;
  return fb_k_memset0(&k, "zero_grad", s->tmp[u].ptr, bytes);
}

static fb_status single_post_backward(fb_rank *r, int u) {
  single_state *s = r->st;
  r->view[u].grads = NULL;
  if (r->micro == 0 && r->pdt == FB_F32) return FB_OK;
  fb_status st = fb_fold_dtype(r, u, s->grads[u].ptr, s->tmp[u].ptr, r->pdt,
                               r->model->units[u].numel, r->micro == 0);
  fb_free(r->dev, &s->tmp[u], r->compute);
  return st;
}

static fb_status single_step(fb_rank *r) {
  single_state *s = r->st;
  FB_TRY(fb_norm_begin(r));
  for (int u = 0; u < r->model->nunits; u++)
    FB_TRY(fb_norm_add(r, s->grads[u].ptr, r->model->units[u].numel));
  FB_TRY(fb_norm_finish(r, false));
  for (int u = 0; u < r->model->nunits; u++) {
    /* mixed precision: the update writes the compute copy too (its gaps stay zero) */
    FB_TRY(fb_optim_update_to(r, u, 0, r->model->units[u].numel, s->params[u].ptr,
                              s->grads[u].ptr, &s->optim[u], 0,
                              r->pdt != FB_F32 ? s->pcopy[u].ptr : NULL, false));
  }
  return FB_OK;
}

static fb_status single_read_params(fb_rank *r, int u, float *host) {
  single_state *s = r->st;
  return host ? fb_read_range(r, s->params[u].ptr, r->model->units[u].numel, host) : FB_OK;
}

static fb_status single_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  single_state *s = r->st;
  return fb_ranges_replicas(r, save, s->params, s->optim, out, n);
}

const fb_strategy fb_strategy_single = {
    .name = "single",
    .summary = "one rank holds everything (the reference)",
    .setup = single_setup,
    .teardown = single_teardown,
    .pre_forward = single_pre_forward,
    .post_forward = single_post_forward,
    .pre_backward = single_pre_backward,
    .post_backward = single_post_backward,
    .optimizer_step = single_step,
    .read_params = single_read_params,
    .one_rank = true,
    .state_ranges = single_ranges,
    .memory = "16P: fp32 params 4P + grads 4P + AdamW 8P",
};
