/* One rank's training step (see executor.h). The hook order is documented in
 * strategies/strategy.h and is the same for every strategy and device. */
#include "executor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../model/transformer.h"
#include "../device/recorder.h"
#include "fault.h"

fb_status fb_exec_init(fb_exec *e, fb_rank *r, const fb_data *data) {
  memset(e, 0, sizeof *e);
  const fb_run_config *c = r->cfg;
  e->r = r;
  e->data = data;
  e->micro_batch = c->micro_batch;
  e->seq = c->seq;
  const size_t n = (size_t)e->micro_batch * e->seq;
  e->h_tokens = malloc(n * sizeof(int32_t));
  e->h_targets = malloc(n * sizeof(int32_t));
  if (!e->h_tokens || !e->h_targets) {
    fb_exec_fini(e);
    return FB_ERR(FB_ENOMEM, "out of host memory (input staging)");
  }
  fb_status st;
  FB_CHECK_GOTO(st, fb_alloc(r->dev, n * 4, FB_MEM_TEMP, "inputs.tokens", &e->tokens), fail);
  FB_CHECK_GOTO(st, fb_alloc(r->dev, n * 4, FB_MEM_TEMP, "inputs.targets", &e->targets), fail);
  FB_CHECK_GOTO(st, fb_alloc(r->dev, sizeof(double), FB_MEM_TEMP, "loss", &e->loss), fail);
  return FB_OK;
fail:
  fb_exec_fini(e);
  return st;
}

void fb_exec_fini(fb_exec *e) {
  if (e->r) {
    fb_free(e->r->dev, &e->tokens, NULL);
    fb_free(e->r->dev, &e->targets, NULL);
    fb_free(e->r->dev, &e->loss, NULL);
  }
  free(e->h_tokens);
  free(e->h_targets);
  e->h_tokens = e->h_targets = NULL;
}

double fb_lr_at(const fb_run_config *c, int step) {
  if (c->warmup > 0 && step < c->warmup) return c->lr * (double)(step + 1) / c->warmup;
  if (!strcmp(c->schedule, "constant")) return c->lr;
  int decay = c->steps - c->warmup;
  if (decay <= 1) return c->lr;
  double p = (double)(step - c->warmup) / (decay - 1);
  if (p > 1) p = 1;
  return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * p));
}

static fb_status load_inputs(fb_exec *e, int step, int micro) {
  fb_rank *r = e->r;
  const int per_rank = r->cfg->batch / r->world;
  const int first = r->rank * per_rank + micro * e->micro_batch;
  for (int i = 0; i < e->micro_batch; i++)
    fb_data_sequence(e->data, step, first + i, e->seq, e->h_tokens + (size_t)i * e->seq,
                     e->h_targets + (size_t)i * e->seq);
  const size_t bytes = (size_t)e->micro_batch * e->seq * 4;
  FB_TRY(fb_copy_h2d(r->dev, r->compute, e->tokens.ptr, e->h_tokens, bytes));
  return fb_copy_h2d(r->dev, r->compute, e->targets.ptr, e->h_targets, bytes);
}

/* Tells the recorder which part of the step the next ops belong to (the trace's spans). */
static void phase(fb_rank *r, fb_rec_phase p) {
  if (r->rec) fb_recorder_phase(r->rec, p);
}

static fb_status micro_step(fb_exec *e, fb_tf *t) {
  fb_rank *r = e->r;
  const fb_strategy *S = r->strategy;
  const int L = r->model->spec.layers;
  phase(r, FB_PHASE_FORWARD);
  FB_TRY(S->pre_forward(r, 0));
  FB_TRY(fb_tf_encoder_fwd(t, r->view[0].params));
  FB_TRY(S->post_forward(r, 0));
  for (int u = 1; u <= L; u++) {
    FB_TRY(S->pre_forward(r, u));
    FB_TRY(fb_tf_block_fwd(t, u, r->view[u].params));
    FB_TRY(S->post_forward(r, u));
  }
  fb_fault_point(r->rank, r->step + 1, FB_FAULT_FORWARD); /* tests only (FSDPBENCH_FAULT) */
  phase(r, FB_PHASE_BACKWARD);
  FB_TRY(S->pre_backward(r, 0));
  FB_TRY(fb_tf_head(t, r->view[0].params, r->view[0].grads));
  for (int u = L; u >= 1; u--) {
    FB_TRY(S->pre_backward(r, u));
    FB_TRY(fb_tf_block_bwd(t, u, r->view[u].params, r->view[u].grads));
    FB_TRY(S->post_backward(r, u));
  }
  FB_TRY(fb_tf_encoder_bwd(t, r->view[0].grads));
  fb_status st = S->post_backward(r, 0);
  phase(r, FB_PHASE_NONE);
  return st;
}

fb_status fb_exec_step(fb_exec *e, int step, double *loss_sum) {
  fb_rank *r = e->r;
  const fb_run_config *c = r->cfg;
  const int n_micro = c->batch / r->world / e->micro_batch;
  const float dscale = 1.0f / (float)((double)c->batch * c->seq);
  double local = 0;
  r->step = step;
  r->n_micro = n_micro;
  if (r->rec) fb_recorder_step_begin(r->rec, step, 0);
  for (int m = 0; m < n_micro; m++) {
    r->micro = m;
    if (r->rec && m > 0) fb_recorder_micro(r->rec, m);
    fb_kctx k = fb_rank_kctx(r, r->compute, -1);
    FB_TRY(load_inputs(e, step, m));
    FB_TRY(fb_k_memset0(&k, "zero_loss", e->loss.ptr, sizeof(double)));
    fb_tf t;
    fb_status st = fb_tf_begin(&t, r->model, r->dev, r->compute, r->pdt, e->micro_batch, e->seq,
                               c->recompute, e->tokens.ptr, e->targets.ptr, dscale,
                               e->loss.ptr);
    t.recompute_layers = c->recompute_layers;
    t.recompute_passes = c->recompute_passes;
    t.logits = r->logits;
    if (st == FB_OK) st = micro_step(e, &t);
    fb_tf_end(&t);
    FB_TRY(st);
    double l = 0;
    FB_TRY(fb_copy_d2h(r->dev, r->compute, &l, e->loss.ptr, sizeof l));
    local += l;
  }
  r->lr = (float)fb_lr_at(c, step);
  phase(r, FB_PHASE_OPTIMIZER);
  FB_TRY(r->strategy->optimizer_step(r));
  phase(r, FB_PHASE_NONE);
  FB_TRY(fb_stream_sync(r->dev, r->commst));
  FB_TRY(fb_stream_sync(r->dev, r->compute));
  *loss_sum = r->dev->simulated ? NAN : local;
  return FB_OK;
}
