/* `ddp`: every rank holds full parameters, gradients and optimizer state. Gradients live in
 * one flat buffer laid out in the order backward completes them (blocks L..1, then the root),
 * cut into buckets of ~bucket_bytes; when backward finishes the last unit of a bucket, the
 * bucket is all-reduced in place on the communication stream while backward goes on.
 * Accumulation: every micro-step after the first computes into a second flat buffer that is
 * all-reduced and then added (reduce every micro-step), or, with --accum no-reduce
 * (DDP's no_sync), gradients accumulate locally and only the last micro-step all-reduces.
 * Mixed precision: bf16 compute copies of the fp32 master parameters; every micro-step's
 * gradients go to a bf16 flat buffer, are all-reduced in the reduce dtype (cast when it
 * differs) and folded into the fp32 accumulator once the micro-step's reductions landed. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "state_ranges.h"

typedef struct ddp_state {
  fb_buf *params;        /* [nunits] */
  fb_optim_state *optim; /* [nunits] */
  fb_buf grads;          /* flat accumulator, backward order */
  fb_buf micro;          /* flat gradient of micro-steps > 0 (reduce mode); every micro-step's
                            gradient in the compute dtype with mixed precision */
  fb_buf rcast;          /* mixed precision, reduce dtype != compute dtype: the cast buckets */
  fb_buf *pcopy;         /* [nunits] compute-dtype copies of the parameters (mixed precision) */
  int64_t *goff;         /* [nunits] offset of each unit inside the flat gradient buffers */
  int *bucket_of;        /* [nunits] bucket index */
  int *bucket_last;      /* [nbuckets] unit whose completion closes the bucket */
  int64_t *bucket_off, *bucket_len;
  int nbuckets;
  fb_event *ev_compute, *ev_comm;
  bool pending;          /* all-reduces issued and not yet waited for */
} ddp_state;

static void ddp_teardown(fb_rank *r) {
  ddp_state *s = r->st;
  if (!s) return;
  for (int u = 0; u < r->model->nunits; u++) {
    if (s->params) fb_free(r->dev, &s->params[u], NULL);
    if (s->optim) fb_optim_free(r, &s->optim[u]);
    if (s->pcopy) fb_free(r->dev, &s->pcopy[u], NULL);
  }
  fb_free(r->dev, &s->grads, NULL);
  fb_free(r->dev, &s->micro, NULL);
  fb_free(r->dev, &s->rcast, NULL);
  free(s->pcopy);
  if (s->ev_compute) r->dev->ops->event_destroy(r->dev, s->ev_compute);
  if (s->ev_comm) r->dev->ops->event_destroy(r->dev, s->ev_comm);
  free(s->params);
  free(s->optim);
  free(s->goff);
  free(s->bucket_of);
  free(s->bucket_last);
  free(s->bucket_off);
  free(s->bucket_len);
  free(s);
  r->st = NULL;
}

static fb_status ddp_setup(fb_rank *r) {
  const fb_model *m = r->model;
  const int n = m->nunits;
  ddp_state *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory (ddp state)");
  r->st = s;
  s->params = calloc((size_t)n, sizeof *s->params);
  s->optim = calloc((size_t)n, sizeof *s->optim);
  s->goff = calloc((size_t)n, sizeof *s->goff);
  s->bucket_of = calloc((size_t)n, sizeof *s->bucket_of);
  s->bucket_last = calloc((size_t)n, sizeof *s->bucket_last);
  s->bucket_off = calloc((size_t)n, sizeof *s->bucket_off);
  s->bucket_len = calloc((size_t)n, sizeof *s->bucket_len);
  s->pcopy = calloc((size_t)n, sizeof *s->pcopy);
  fb_status st = FB_OK;
  if (!s->params || !s->optim || !s->goff || !s->bucket_of || !s->bucket_last ||
      !s->bucket_off || !s->bucket_len || !s->pcopy) {
    st = FB_ERR(FB_ENOMEM, "out of host memory (ddp state)");
    goto fail;
  }
  /* completion order: L, L-1, ..., 1, 0 */
  int64_t off = 0, cur = 0;
  const int64_t cap = r->cfg->bucket_bytes / 4 > 0 ? r->cfg->bucket_bytes / 4 : 1;
  for (int i = 0; i < n; i++) {
    int u = (i < n - 1) ? n - 1 - i : 0;
    s->goff[u] = off;
    s->bucket_of[u] = s->nbuckets;
    off += m->units[u].numel;
    cur += m->units[u].numel;
    if (cur >= cap || i == n - 1) {
      s->bucket_last[s->nbuckets] = u;
      s->bucket_len[s->nbuckets] = cur;
      s->bucket_off[s->nbuckets] = off - cur;
      s->nbuckets++;
      cur = 0;
    }
  }
  for (int u = 0; u < n; u++) {
    const int64_t len = m->units[u].numel;
    FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)len * 4, FB_MEM_PARAM_SHARD, "params",
                               &s->params[u]), fail);
    FB_CHECK_GOTO(st, fb_materialize_range(r, u, 0, len, s->params[u].ptr), fail);
    FB_CHECK_GOTO(st, fb_optim_alloc(r, len, "optim", &s->optim[u]), fail);
    if (r->pdt != FB_F32) {
      FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)len * fb_psz(r), FB_MEM_PARAM_FULL,
                                 "params.compute_copy", &s->pcopy[u]), fail);
      FB_CHECK_GOTO(st, fb_to_pdt(r, u, s->pcopy[u].ptr, s->params[u].ptr, len), fail);
    }
  }
  FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)off * 4, FB_MEM_GRAD_SHARD, "grads", &s->grads),
                fail);
  if (r->pdt != FB_F32) {
    FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)off * fb_psz(r), FB_MEM_GRAD_FULL,
                               "grads.compute", &s->micro), fail);
    if (r->rdt != r->pdt)
      FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)off * fb_dtype_size(r->rdt), FB_MEM_COMM,
                                 "grads.reduce_cast", &s->rcast), fail);
  }
  FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &s->ev_compute), fail);
  FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &s->ev_comm), fail);
  return FB_OK;
fail:
  ddp_teardown(r);
  return st;
}

static void *compute_params(ddp_state *s, const fb_rank *r, int u) {
  return r->pdt == FB_F32 ? s->params[u].ptr : s->pcopy[u].ptr;
}

static fb_status ddp_pre_forward(fb_rank *r, int u) {
  ddp_state *s = r->st;
  r->view[u].params = compute_params(s, r, u);
  return FB_OK;
}

static fb_status ddp_post_forward(fb_rank *r, int u) { return FB_OK; }

/* Which flat buffer this micro-step's gradients go to (elements of the compute dtype). */
static char *micro_grads(fb_rank *r) {
  ddp_state *s = r->st;
  const bool into_acc = r->pdt == FB_F32 && (r->micro == 0 || r->cfg->accum == FB_ACCUM_NO_REDUCE);
  return into_acc ? s->grads.ptr : s->micro.ptr;
}

static bool reduce_now(const fb_rank *r) {
  return r->cfg->accum != FB_ACCUM_NO_REDUCE || r->micro == r->n_micro - 1;
}

static fb_status ddp_pre_backward(fb_rank *r, int u) {
  ddp_state *s = r->st;
  const fb_model *m = r->model;
  r->view[u].params = compute_params(s, r, u);
  if (u == 0 && r->micro > 0 && r->cfg->accum != FB_ACCUM_NO_REDUCE && !s->micro.ptr) {
    int64_t total = s->grads.bytes / 4;
    FB_TRY(fb_alloc(r->dev, (size_t)total * 4, FB_MEM_GRAD_FULL, "grads.micro", &s->micro));
  }
  char *g = micro_grads(r) + (size_t)s->goff[u] * fb_psz(r);
  r->view[u].grads = g;
  /* no_reduce micro-steps > 0 accumulate into the previous gradient: no zeroing then */
  if (r->cfg->accum == FB_ACCUM_NO_REDUCE && r->micro > 0) return FB_OK;
  fb_kctx k = fb_rank_kctx(r, r->compute, u);
  return fb_k_memset0(&k, "zero_grad", g, (size_t)m->units[u].numel * fb_psz(r));
}

static fb_status ddp_post_backward(fb_rank *r, int u) {
  ddp_state *s = r->st;
  r->view[u].grads = NULL;
  const int b = s->bucket_of[u];
  if (s->bucket_last[b] != u || !reduce_now(r)) return FB_OK;
  char *g = micro_grads(r) + (size_t)s->bucket_off[b] * fb_psz(r);
  fb_dtype dt = r->pdt;
  if (r->pdt != FB_F32 && r->rdt != r->pdt) { /* mixed precision: reduce in the reduce dtype */
    fb_kctx k = fb_rank_kctx(r, r->compute, u);
    char *c = (char *)s->rcast.ptr + (size_t)s->bucket_off[b] * fb_dtype_size(r->rdt);
    FB_TRY(fb_k_cast(&k, c, r->rdt, g, r->pdt, (size_t)s->bucket_len[b]));
    g = c;
    dt = r->rdt;
  }
  if (r->world == 1) return FB_OK;
  FB_TRY(fb_event_record(r->dev, s->ev_compute, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, s->ev_compute));
  FB_TRY(fb_all_reduce(r->comm, r->commst, u, g, g, (size_t)s->bucket_len[b], dt));
  s->pending = true;
  return FB_OK;
}

/* Waits for the all-reduces and folds a reduce-mode micro-step into the accumulator. */
static fb_status finish_micro(fb_rank *r) {
  ddp_state *s = r->st;
  if (s->pending) {
    FB_TRY(fb_event_record(r->dev, s->ev_comm, r->commst));
    FB_TRY(fb_stream_wait(r->dev, r->compute, s->ev_comm));
    s->pending = false;
  }
  return FB_OK;
}

static fb_status ddp_step(fb_rank *r) {
  ddp_state *s = r->st;
  FB_TRY(finish_micro(r));
  FB_TRY(fb_norm_begin(r));
  FB_TRY(fb_norm_add(r, s->grads.ptr, (int64_t)(s->grads.bytes / 4)));
  FB_TRY(fb_norm_finish(r, false));
  for (int u = 0; u < r->model->nunits; u++) {
    /* mixed precision: the update writes the compute copy too (its gaps stay zero) */
    FB_TRY(fb_optim_update_to(r, u, 0, r->model->units[u].numel, s->params[u].ptr,
                              (float *)s->grads.ptr + s->goff[u], &s->optim[u], 0,
                              r->pdt != FB_F32 ? s->pcopy[u].ptr : NULL, false));
  }
  if (r->pdt == FB_F32) fb_free(r->dev, &s->micro, r->compute); /* mixed: kept for the run */
  return FB_OK;
}

/* Called by the executor through post_backward(0) at the end of each micro-step: the root is
 * the last unit, so the micro-step's reductions are all issued once it returns. */
static fb_status ddp_post_backward_root(fb_rank *r, int u) {
  FB_TRY(ddp_post_backward(r, u));
  ddp_state *s = r->st;
  if (u == 0 && r->pdt != FB_F32 && reduce_now(r)) {
    /* mixed precision: the reduced micro-step gradient lands in the fp32 accumulator */
    FB_TRY(finish_micro(r));
    const bool cast = r->rdt != r->pdt;
    const bool first = r->micro == 0 || r->cfg->accum == FB_ACCUM_NO_REDUCE;
    return fb_fold_dtype(r, -1, s->grads.ptr, cast ? s->rcast.ptr : s->micro.ptr,
                         cast ? r->rdt : r->pdt, (int64_t)(s->grads.bytes / 4), first);
  }
  if (u != 0 || r->micro == 0 || r->cfg->accum == FB_ACCUM_NO_REDUCE) return FB_OK;
  FB_TRY(finish_micro(r));
  fb_kctx k = fb_rank_kctx(r, r->compute, -1);
  return fb_k_acc_f32(&k, s->grads.ptr, s->micro.ptr, s->grads.bytes / 4);
}

static fb_status ddp_read_params(fb_rank *r, int u, float *host) {
  ddp_state *s = r->st;
  return host ? fb_read_range(r, s->params[u].ptr, r->model->units[u].numel, host) : FB_OK;
}

static fb_status ddp_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  ddp_state *s = r->st;
  return fb_ranges_replicas(r, save, s->params, s->optim, out, n);
}

const fb_strategy fb_strategy_ddp = {
    .name = "ddp",
    .summary = "full replicas, bucketed gradient all-reduce overlapped with backward",
    .setup = ddp_setup,
    .teardown = ddp_teardown,
    .pre_forward = ddp_pre_forward,
    .post_forward = ddp_post_forward,
    .pre_backward = ddp_pre_backward,
    .post_backward = ddp_post_backward_root,
    .optimizer_step = ddp_step,
    .read_params = ddp_read_params,
    /* DDP's hooks (the Reducer's per-parameter autograd hooks) run in C++: no per-unit host
     * work beyond op dispatch (host_op_us) is modelled */
    .host = NULL,
    .accum_modes = 1u << FB_ACCUM_NO_REDUCE, /* no_sync: reduce at the last micro-step */
    .state_ranges = ddp_ranges,
    .memory = "16P: fp32 params 4P + grads 4P + AdamW 8P, all replicated",
};
