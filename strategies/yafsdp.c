/* `yafsdp`: the sharding of fsdp (1/W slice of every flat unit) with YaFSDP's memory and
 * overlap discipline. Two full-unit parameter buffers, sized to the largest unit, are
 * preallocated and used alternately; gradients use two preallocated block buffers plus one
 * for the root unit (its gradient lives from the head's backward to the embedding's). The
 * communication stream runs ahead: when unit i starts its forward, unit i+1's all-gather is
 * issued; when unit i starts its backward (the pre-backward trigger), unit i-1's all-gather
 * is issued; the reduce-scatter of unit i overlaps the backward of unit i-1. A released unit
 * stays resident in its buffer until another gather takes it, so the backward starts with
 * the root and the last block still gathered (no all-gather for them). Events guard
 * every buffer reuse (a gather never overwrites a buffer whose unit still computes; a
 * gradient buffer is not zeroed before its previous reduce-scatter finished). Nothing is
 * allocated during a step. Accumulation across micro-steps reduces every micro-step;
 * keeping units gathered or gradients unsharded across micro-steps needs every unit
 * resident, which two buffers cannot hold: use fsdp for those modes.
 * Host work per unit (ya_host): re-pointing the unit's parameters at its buffer after each
 * gather; no rate limiter (the two buffers bound the run-ahead through stream waits), no
 * allocation during a step, no resharding. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "state_ranges.h"

typedef struct ya_unit {
  fb_slice sl;        /* persistent slices: parameters, gradients, optimizer */
  fb_buf rs_tmp;
  int slot;           /* parameter buffer holding it, -1 when not resident */
  bool in_use;        /* between acquire and release: its buffer may not be taken */
  bool gathering, acc_pending, acc_overwrite;
  fb_event *ev_gather, *ev_ready;
} ya_unit;

typedef struct ya_state {
  ya_unit *u;
  fb_buf pbuf[2], gbuf[3];      /* gbuf[2] is the root's gradient buffer */
  fb_buf pcast[2], gcast[3];    /* mixed precision: slice cast for each gather buffer, gradient
                                   cast (reduce dtype) for each gradient buffer */
  int owner[2];                 /* unit resident in each parameter buffer (-1 none) */
  int last_slot;
  fb_event *p_free[2], *g_free[3];
  bool g_busy[3];               /* a reduce-scatter may still read the gradient buffer */
} ya_state;

/* YaFSDP's per-unit host work: its hooks make the unit's parameters views of the buffer the
 * unit was gathered into (materialize_params), costed as FSDP1's measurement of the same
 * operation, 10.7 us per parameter (pytorch PR #96958: _use_unsharded_views 4.268 ms for 400
 * parameters). It has no writeback check, keeps the buffer instead of resharding views and
 * has no rate limiter. Its gather launch path has no public figure: 0 (op dispatch still
 * costs host_op_us per op, as for every strategy). */
static const fb_host_costs ya_host = {.views_per_param = 10.7e-6};

static void ya_teardown(fb_rank *r) {
  ya_state *s = r->st;
  if (!s) return;
  fb_device *d = r->dev;
  for (int i = 0; s->u && i < r->model->nunits; i++) {
    ya_unit *x = &s->u[i];
    fb_slice_free(r, &x->sl);
    fb_free(d, &x->rs_tmp, NULL);
    if (x->ev_gather) d->ops->event_destroy(d, x->ev_gather);
    if (x->ev_ready) d->ops->event_destroy(d, x->ev_ready);
  }
  for (int b = 0; b < 2; b++) {
    fb_free(d, &s->pbuf[b], NULL);
    fb_free(d, &s->pcast[b], NULL);
    if (s->p_free[b]) d->ops->event_destroy(d, s->p_free[b]);
  }
  for (int b = 0; b < 3; b++) {
    fb_free(d, &s->gbuf[b], NULL);
    fb_free(d, &s->gcast[b], NULL);
    if (s->g_free[b]) d->ops->event_destroy(d, s->g_free[b]);
  }
  free(s->u);
  free(s);
  r->st = NULL;
}

static fb_status ya_setup(fb_rank *r) {
  const fb_model *m = r->model;
  const fb_run_config *c = r->cfg;
  const int n_micro = c->batch / r->world / c->micro_batch;
  if (n_micro > 1 && c->accum != FB_ACCUM_REDUCE)
    return FB_ERR(FB_EUSAGE, "--accum: '%s' is not available with yafsdp (two preallocated "
                  "buffers cannot keep every unit resident; use --strategy fsdp)",
                  c->accum == FB_ACCUM_NO_RESHARD ? "no-reshard" : "no-reduce");
  if (!c->reshard_after_forward)
    return FB_ERR(FB_EUSAGE, "--reshard-after-forward: false is not available with yafsdp "
                  "(two preallocated buffers; use --strategy fsdp for ZeRO-2)");
  ya_state *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory (yafsdp state)");
  r->st = s;
  fb_status st = FB_OK;
  s->u = calloc((size_t)m->nunits, sizeof *s->u);
  if (!s->u) {
    st = FB_ERR(FB_ENOMEM, "out of host memory (yafsdp units)");
    goto fail;
  }
  int64_t max_all = 0, max_block = 0, max_shard = 0;
  for (int i = 0; i < m->nunits; i++) {
    ya_unit *x = &s->u[i];
    FB_CHECK_GOTO(st, fb_slice_init(r, i, &x->sl), fail);
    x->slot = -1;
    if (x->sl.padded > max_all) max_all = x->sl.padded;
    if (i > 0 && x->sl.padded > max_block) max_block = x->sl.padded;
    if (x->sl.shard > max_shard) max_shard = x->sl.shard;
    if (n_micro > 1 || r->rdt != FB_F32)
      FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)x->sl.shard * fb_dtype_size(r->rdt), FB_MEM_COMM,
                                 "grads.rs_out", &x->rs_tmp), fail);
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &x->ev_gather), fail);
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &x->ev_ready), fail);
  }
  for (int b = 0; b < 2; b++) {
    FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)max_all * fb_psz(r), FB_MEM_PARAM_FULL,
                               "params.pingpong", &s->pbuf[b]), fail);
    if (r->pdt != FB_F32)
      FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)max_shard * fb_psz(r), FB_MEM_COMM,
                                 "params.cast", &s->pcast[b]), fail);
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &s->p_free[b]), fail);
    s->owner[b] = -1;
  }
  for (int b = 0; b < 3; b++) {
    int64_t len = b < 2 ? max_block : s->u[0].sl.padded;
    FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)len * fb_psz(r), FB_MEM_GRAD_FULL,
                               b < 2 ? "grads.pingpong" : "grads.root", &s->gbuf[b]), fail);
    if (r->rdt != r->pdt)
      FB_CHECK_GOTO(st, fb_alloc(r->dev, (size_t)len * fb_dtype_size(r->rdt), FB_MEM_COMM,
                                 "grads.reduce_cast", &s->gcast[b]), fail);
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &s->g_free[b]), fail);
  }
  s->last_slot = 1;
  return FB_OK;
fail:
  ya_teardown(r);
  return st;
}

/* Issues unit i's all-gather into a parameter buffer no unit is using, once it is free, unless
 * a buffer still holds unit i: YaFSDP keeps a released unit's parameters in its buffer until
 * another gather takes it, so the last units of forward (the root for the head, the last
 * block) start the backward without an all-gather (runtime-mechanisms.md 4.1, pre-backward). */
static fb_status gather(fb_rank *r, int i) {
  ya_state *s = r->st;
  if (i < 0) return FB_OK;
  ya_unit *x = &s->u[i];
  if (x->slot >= 0) return FB_OK; /* resident */
  int b = 1 - s->last_slot;
  if (s->owner[b] >= 0 && s->u[s->owner[b]].in_use) b = s->last_slot;
  if (s->owner[b] >= 0) {
    if (s->u[s->owner[b]].in_use)
      return FB_ERR(FB_EINTERNAL, "yafsdp: buffer %d still holds unit %d in use when unit %d "
                    "is gathered", b, s->owner[b], i);
    s->u[s->owner[b]].slot = -1; /* evicted: its next use gathers again */
  }
  s->last_slot = b;
  s->owner[b] = i;
  x->slot = b;
  x->gathering = true;
  void *send = x->sl.p.ptr;
  if (r->pdt != FB_F32) { /* the previous gather from this cast buffer was waited for */
    FB_TRY(fb_to_pdt(r, i, s->pcast[b].ptr, x->sl.p.ptr, x->sl.shard));
    send = s->pcast[b].ptr;
  }
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute)); /* shard as the optimizer left it */
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  FB_TRY(fb_stream_wait(r->dev, r->commst, s->p_free[b])); /* previous occupant done */
  FB_TRY(fb_all_gather(r->comm, r->commst, i, send, s->pbuf[b].ptr, (size_t)x->sl.shard, r->pdt));
  FB_TRY(fb_event_record(r->dev, x->ev_gather, r->commst));
  fb_host_work(r->dev, (double)r->model->units[i].count * ya_host.views_per_param,
               "yafsdp.materialize_params");
  return FB_OK;
}

static fb_status acquire(fb_rank *r, int i, int next) {
  ya_state *s = r->st;
  ya_unit *x = &s->u[i];
  FB_TRY(gather(r, i));
  x->in_use = true;
  if (next != i) FB_TRY(gather(r, next)); /* the comm stream runs ahead by one unit */
  if (x->gathering) {
    FB_TRY(fb_stream_wait(r->dev, r->compute, x->ev_gather));
    x->gathering = false;
  }
  r->view[i].params = s->pbuf[x->slot].ptr;
  return FB_OK;
}

/* The unit is done with its buffer for now; the parameters stay there (resident) until a
 * gather of another unit takes the buffer. */
static fb_status release(fb_rank *r, int i) {
  ya_state *s = r->st;
  ya_unit *x = &s->u[i];
  if (x->slot < 0 || !x->in_use) return FB_OK;
  FB_TRY(fb_event_record(r->dev, s->p_free[x->slot], r->compute));
  x->in_use = false;
  r->view[i].params = NULL;
  return FB_OK;
}

/* After the optimizer changes the shards (or a readback borrows a buffer), nothing is
 * resident any more. */
static void evict_all(ya_state *s, int nunits) {
  for (int i = 0; i < nunits; i++) s->u[i].slot = -1, s->u[i].in_use = false;
  s->owner[0] = s->owner[1] = -1;
}

static fb_status ya_pre_forward(fb_rank *r, int i) {
  int next = fb_next_fwd_unit(r->model, i);
  return acquire(r, i, next < 0 ? 0 : next);
}

static fb_status ya_post_forward(fb_rank *r, int i) { return release(r, i); }

static int gslot(int i) { return i == 0 ? 2 : i % 2; }

static fb_status ya_pre_backward(fb_rank *r, int i) {
  ya_state *s = r->st;
  if (i != 0) FB_TRY(release(r, 0)); /* the head is done with the root's parameters */
  FB_TRY(acquire(r, i, fb_next_bwd_unit(r->model, i)));
  const int g = gslot(i);
  if (s->g_busy[g]) { /* the previous reduce-scatter from this buffer must have finished */
    FB_TRY(fb_stream_wait(r->dev, r->compute, s->g_free[g]));
    s->g_busy[g] = false;
  }
  r->view[i].grads = s->gbuf[g].ptr;
  fb_kctx k = fb_rank_kctx(r, r->compute, i);
  return fb_k_memset0(&k, "zero_grad", s->gbuf[g].ptr, (size_t)s->u[i].sl.padded * fb_psz(r));
}

static fb_status fold(fb_rank *r) {
  ya_state *s = r->st;
  for (int g = 0; g < 3; g++)
    if (s->g_busy[g]) {
      FB_TRY(fb_stream_wait(r->dev, r->compute, s->g_free[g]));
      s->g_busy[g] = false;
    }
  for (int i = 0; i < r->model->nunits; i++) {
    ya_unit *x = &s->u[i];
    if (!x->acc_pending) continue;
    FB_TRY(fb_fold_reduced(r, i, x->sl.g.ptr, x->rs_tmp.ptr, x->sl.shard, x->acc_overwrite));
    x->acc_pending = false;
  }
  return FB_OK;
}

static fb_status ya_post_backward(fb_rank *r, int i) {
  ya_state *s = r->st;
  ya_unit *x = &s->u[i];
  const int g = gslot(i);
  r->view[i].grads = NULL;
  FB_TRY(release(r, i));
  const bool direct = r->micro == 0 && r->rdt == FB_F32;
  void *send = s->gbuf[g].ptr;
  if (r->rdt != r->pdt) { /* gcast[g] is free: its last reduction was waited for */
    fb_kctx k = fb_rank_kctx(r, r->compute, i);
    FB_TRY(fb_k_cast(&k, s->gcast[g].ptr, r->rdt, send, r->pdt, (size_t)x->sl.padded));
    send = s->gcast[g].ptr;
  }
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute)); /* gradients complete */
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  FB_TRY(fb_reduce_scatter(r->comm, r->commst, i, send, direct ? x->sl.g.ptr : x->rs_tmp.ptr,
                           (size_t)x->sl.shard, r->rdt));
  FB_TRY(fb_event_record(r->dev, s->g_free[g], r->commst));
  s->g_busy[g] = true;
  x->acc_pending = !direct;
  x->acc_overwrite = r->micro == 0;
  if (i == 0 && r->micro < r->n_micro - 1) FB_TRY(fold(r));
  return FB_OK;
}

static fb_slice *slice_of(fb_rank *r, int i) { return &((ya_state *)r->st)->u[i].sl; }

static fb_status ya_step(fb_rank *r) {
  FB_TRY(fold(r));
  evict_all(r->st, r->model->nunits);
  return fb_slices_step(r, slice_of);
}

static fb_status ya_read_params(fb_rank *r, int i, float *host) {
  ya_state *s = r->st;
  ya_unit *x = &s->u[i];
  /* after the step both parameter buffers are free: borrow one for the fp32 readback when it
   * is large enough (compute dtype fp32), else take a temporary */
  fb_buf tmp = {0};
  void *full = s->pbuf[0].ptr;
  evict_all(s, r->model->nunits);
  fb_status st = FB_OK;
  if (r->pdt != FB_F32) {
    st = fb_alloc(r->dev, (size_t)x->sl.padded * 4, FB_MEM_TEMP, "readback", &tmp);
    full = tmp.ptr;
  }
  if (st == FB_OK) st = fb_stream_wait(r->dev, r->commst, s->p_free[0]);
  if (st == FB_OK)
    st = fb_comm_unrecorded(r->comm, r->commst, FB_COLL_ALL_GATHER, x->sl.p.ptr, full,
                            (size_t)x->sl.shard, FB_F32, 0);
  if (st == FB_OK) st = fb_stream_sync(r->dev, r->commst);
  if (st == FB_OK && host) st = fb_read_range(r, full, r->model->units[i].numel, host);
  fb_free(r->dev, &tmp, NULL);
  return st;
}

static fb_status ya_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  (void)save; /* slices are disjoint: the same ranges save and load */
  return fb_ranges_slices(r, slice_of, out, n);
}

const fb_strategy fb_strategy_yafsdp = {
    .name = "yafsdp",
    .summary = "fsdp slices with two preallocated ping-pong buffers, comm stream running ahead",
    .setup = ya_setup,
    .teardown = ya_teardown,
    .pre_forward = ya_pre_forward,
    .post_forward = ya_post_forward,
    .pre_backward = ya_pre_backward,
    .post_backward = ya_post_backward,
    .optimizer_step = ya_step,
    .read_params = ya_read_params,
    .host = &ya_host,
    .shards_all = true,
    .state_ranges = ya_ranges,
    .memory = "16P/W + two preallocated unit buffers of params and two of grads",
};
