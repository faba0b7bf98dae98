/* `fsdp` (intra-tensor, FSDP1/ZeRO-3 flat layout): each unit is one flat buffer padded to a
 * multiple of W; rank r keeps slice r of the parameters, of the gradient accumulator and of
 * the optimizer state. Before a unit runs forward (and again before its backward, when
 * reshard_after_forward) its slices are all-gathered into a full buffer allocated for the
 * occasion; after its backward the full gradient is reduce-scattered into the slice and both
 * full buffers are freed. Forward prefetch issues the next unit's gather while the current
 * one computes; backward prefetch issues the next backward unit's gather when a unit's
 * backward starts; at most max_inflight gathers are in flight. Padding is zero in parameters,
 * gradients and optimizer state (it is never written).
 * As FSDP1 does: the gathered buffer is allocated for the all-gather (communication) stream and
 * freed after the compute stream (record_stream); a rate limiter (limit_all_gathers) makes the
 * host wait, before a gather, for the free of the unit two gathers back; the hooks' host work
 * is charged through fb_host_work (fb_fsdp_host below).
 * The same machine runs on the groups of a device mesh (fb_fsdp_setup_mesh, for hsdp.c): the
 * units are sliced over a shard group instead of the world (slices, gathers, reduce-scatters,
 * the norm's bins and the optimizer's ranges all use it), and with a replica group each
 * reduce-scatter's output is all-reduced across it on the comm stream before the event the
 * fold waits for (fb_reduce_scatter_mesh, fb_all_reduce_replicas). fsdp is the one-group case:
 * shard = r->comm, no replica group, the very same calls in the same order. */
#include "fsdp.h"
#include "state_ranges.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/device/recorder.h"
#include "common.h"
#include "mesh.h"
#include "unit_gather.h"

typedef struct fsdp_unit {
  fb_slice sl;                /* persistent slices: parameters, gradients, optimizer */
  fb_buf p_full, g_full;      /* transient full buffers (compute dtype) */
  fb_buf g_auto;              /* the backward's per-parameter gradients, before FSDP1 copies
                                 them into the flat unsharded gradient */
  fb_buf p_cast, g_cast;      /* mixed precision: the slice cast for the gather, the gradient
                                 cast for the reduction (reduce dtype) */
  bool p_fresh;               /* p_cast holds the last update's slice, written by AdamW itself
                                 (adamw_cast): the next gather sends it as it is */
  fb_buf rs_tmp;              /* reduce-scatter output folded later (micro-steps > 0, bf16) */
  bool rs_pending, acc_pending, acc_overwrite;
  fb_event *ev_rs, *ev_ready;
} fsdp_unit;

typedef struct fsdp_state {
  fsdp_unit *u;
  fb_gather g;   /* the units' gathers (unit_gather.h) */
  int fold_next; /* unit whose reduction (micro-step > 0) folds at the next post-backward */
  /* the rate limiter's queue of free events (FSDP1's _FreeEventQueue): a ring */
  fb_event **fq;
  int fq_cap, fq_head, fq_len;
  fb_comm_mesh mesh; /* units are sliced over its shard group (r->comm for fsdp), reduced
                        slices all-reduced over its replica group (hsdp; none for fsdp) */
  int divide;        /* FSDP1's gradient predivide factor f at this world (1: no passes) */
  fb_stream *post;   /* FSDP1's post-backward stream, where the divides run (f > 1) */
} fsdp_state;

static const fb_gather_ops gather_ops; /* the gather hooks, below */

/* FSDP1's host work per unit (torch.distributed.fsdp, use_orig_params=True):
 *  - pytorch PR #96958 (2023-03) timed the per-parameter hook work on 400 nn.Parameters in one
 *    FSDP instance: _writeback_orig_params 1.071 ms (2.7 us per parameter, before every
 *    unshard), _use_unsharded_views 4.268 ms (10.7 us, after every unshard), _use_sharded_views
 *    ~2.75 ms (6.9 us, at every reshard);
 *  - pytorch PR #108234 (2023-08): ~235 us from the rate limiter's sync being met to the next
 *    all-gather launch (the rest of _unshard: storage resize, all_gather_into_tensor);
 *  - pytorch PR #83917 (limit_all_gathers): at most 2 all-gathers in flight, the host blocking
 *    on the free event of the unit two gathers back (default True in later FSDP1 releases). */
const fb_host_costs fb_fsdp_host = {
    .check_per_param = 2.7e-6,
    .gather_launch = 235e-6,
    .views_per_param = 10.7e-6,
    .reshard_per_param = 6.9e-6,
    .max_inflight_gathers = 2,
};

void fb_fsdp_teardown(fb_rank *r) {
  fsdp_state *s = r->st;
  if (!s) return;
  if (s->post) r->dev->ops->stream_destroy(r->dev, s->post); /* drains it */
  for (int i = 0; s->u && i < r->model->nunits; i++) {
    fsdp_unit *x = &s->u[i];
    fb_slice_free(r, &x->sl);
    fb_free(r->dev, &x->p_full, NULL);
    fb_free(r->dev, &x->g_full, NULL);
    fb_free(r->dev, &x->g_auto, NULL);
    fb_free(r->dev, &x->rs_tmp, NULL);
    fb_free(r->dev, &x->p_cast, NULL);
    fb_free(r->dev, &x->g_cast, NULL);
    fb_event *evs[] = {x->ev_rs, x->ev_ready};
    for (int e = 0; e < 2; e++)
      if (evs[e]) r->dev->ops->event_destroy(r->dev, evs[e]);
  }
  fb_gather_fini(&s->g, r);
  for (int e = 0; s->fq && e < s->fq_cap; e++)
    if (s->fq[e]) r->dev->ops->event_destroy(r->dev, s->fq[e]);
  free(s->fq);
  free(s->u);
  fb_mesh_close(&s->mesh);
  free(s);
  r->st = NULL;
}

/* The rank as a member of its shard group: what the slice helpers (common.c) read as world,
 * rank and communicator. fsdp: the rank itself. */
static fb_rank shard_view(const fb_rank *r) {
  return fb_mesh_view(r, &((const fsdp_state *)r->st)->mesh);
}

/* FSDP1's gradient divides (torch.distributed.fsdp _runtime_utils._reduce_grad, default hooks'
 * _get_gradient_predivide_factor): the unsharded gradient, in the reduce dtype, is divided by
 * f before the reduce-scatter and the reduced shard by W / f after it (after the replica
 * all-reduce under HYBRID_SHARD), f doubling from 1 while W is divisible by it and W / f > f;
 * a factor of 1 is no pass. Here the loss is already divided by the global token count, so the
 * two passes scale by 1 / f and by f: f is a power of two, so both are exact (a scaled sum of
 * scaled terms rounds as the unscaled one does, barring subnormals) and every strategy keeps
 * its bits, at FSDP1's traffic; the one pass FSDP1 does not make is the second at W = 2 (f = 2,
 * W / f = 1). Both run on a post-backward stream of their own, as FSDP1 runs them: beside the
 * next unit's backward, the collective waiting for the first, the fold and the step for the
 * second (the cast before them stays on the compute stream). FSDP2 (ReduceOp.AVG in the
 * collective), YaFSDP and DeepSpeed do not come here. */
static int fsdp1_predivide(int world) {
  int f = 1;
  while (world % f == 0 && world / f > f) f *= 2;
  return f;
}

/* One divide pass on the post-backward stream, after `after` (recorded on another stream);
 * `after` is then recorded again past it, so whoever waits for it next waits for the pass. */
static fb_status fsdp1_divide(fb_rank *r, int i, fb_event *after, const char *name, void *g,
                              int64_t n, float by) {
  fsdp_state *s = r->st;
  fb_kctx k = fb_rank_kctx(r, s->post, i);
  FB_TRY(fb_stream_wait(r->dev, s->post, after));
  FB_TRY(fb_k_scale(&k, name, g, r->rdt, by, (size_t)n));
  return fb_event_record(r->dev, after, s->post);
}

fb_status fb_fsdp_setup_mesh(fb_rank *r) {
  const fb_model *m = r->model;
  fsdp_state *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory (fsdp state)");
  s->fold_next = -1;
  s->mesh = (fb_comm_mesh){.world = r->comm, .shard = r->comm};
  s->divide = fsdp1_predivide(r->world);
  r->st = s;
  fb_status st = fb_mesh_open(r, &s->mesh);
  if (st != FB_OK) goto fail;
  if (s->divide > 1) {
    FB_CHECK_GOTO(st, r->dev->ops->stream_create(r->dev, FB_STREAM_COMM, &s->post), fail);
    if (r->rec) fb_recorder_stream(r->rec, s->post, "compute (post-backward)"); /* kernels */
  }
  fb_rank v = shard_view(r);
  s->u = calloc((size_t)m->nunits, sizeof *s->u);
  if (!s->u) {
    st = FB_ERR(FB_ENOMEM, "out of host memory (fsdp units)");
    goto fail;
  }
  FB_CHECK_GOTO(st, fb_gather_init(&s->g, r, &gather_ops), fail);
  for (int i = 0; i < m->nunits; i++) {
    fsdp_unit *x = &s->u[i];
    FB_CHECK_GOTO(st, fb_slice_init(&v, i, &x->sl), fail);
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &x->ev_rs), fail);
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &x->ev_ready), fail);
  }
  /* every free enqueues and every gather dequeues down to the limit: nunits + 2 suffice */
  s->fq_cap = m->nunits + 2;
  s->fq = calloc((size_t)s->fq_cap, sizeof *s->fq);
  if (!s->fq) {
    st = FB_ERR(FB_ENOMEM, "out of host memory (fsdp free events)");
    goto fail;
  }
  for (int e = 0; e < s->fq_cap; e++)
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &s->fq[e]), fail);
  return FB_OK;
fail:
  fb_fsdp_teardown(r);
  return st;
}

static fb_status fsdp_setup(fb_rank *r) { return fb_fsdp_setup_mesh(r); }

/* The rate limiter: with max_inflight_gathers free events queued, the host waits for the
 * oldest (event.synchronize(): the compute stream has passed that unit's free). */
static fb_status limit_gathers(fb_rank *r) {
  fsdp_state *s = r->st;
  const int max = fb_fsdp_host.max_inflight_gathers;
  if (max <= 0 || s->fq_len < max) return FB_OK;
  fb_event *oldest = s->fq[s->fq_head];
  s->fq_head = (s->fq_head + 1) % s->fq_cap;
  s->fq_len--;
  return fb_event_sync(r->dev, oldest);
}

/* Enqueues a free event recorded on the compute stream after a unit's free. */
static fb_status enqueue_free(fb_rank *r) {
  fsdp_state *s = r->st;
  if (fb_fsdp_host.max_inflight_gathers <= 0) return FB_OK;
  if (s->fq_len == s->fq_cap) { /* cannot happen (see setup); keep the oldest bound anyway */
    FB_TRY(fb_event_sync(r->dev, s->fq[s->fq_head]));
    s->fq_head = (s->fq_head + 1) % s->fq_cap;
    s->fq_len--;
  }
  fb_event *e = s->fq[(s->fq_head + s->fq_len) % s->fq_cap];
  FB_TRY(fb_event_record(r->dev, e, r->compute));
  s->fq_len++;
  return FB_OK;
}

/* The gather hook (unit_gather.h): the all-gather of unit i's slices on the comm stream into
 * a full buffer allocated for the occasion, behind FSDP1's host work and rate limiter. */
static fb_status issue_gather(fb_rank *r, int i, fb_event *done) {
  fsdp_state *s = r->st;
  fsdp_unit *x = &s->u[i];
  const double k = (double)r->model->units[i].count;
  fb_host_work(r->dev, k * fb_fsdp_host.check_per_param, "fsdp.pre_unshard");
  void *send = x->sl.p.ptr;
  if (r->pdt != FB_F32) { /* mixed precision: gather the slice in the compute dtype */
    if (!x->p_fresh) { /* else the optimizer step wrote it (fsdp_update) */
      FB_TRY(fb_alloc(r->dev, (size_t)x->sl.shard * fb_psz(r), FB_MEM_COMM, "params.cast",
                      &x->p_cast));
      FB_TRY(fb_to_pdt(r, i, x->p_cast.ptr, x->sl.p.ptr, x->sl.shard));
    }
    x->p_fresh = false;
    send = x->p_cast.ptr;
  }
  FB_TRY(limit_gathers(r));
  fb_host_work(r->dev, fb_fsdp_host.gather_launch, "fsdp.unshard");
  /* allocated for the all-gather stream, as FSDP1's unshard stream does */
  FB_TRY(fb_alloc_on(r->dev, r->commst, (size_t)x->sl.padded * fb_psz(r), FB_MEM_PARAM_FULL,
                     "params.gathered", &x->p_full));
  /* the comm stream must see the shard as the compute stream left it (after the optimizer) */
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  FB_TRY(fb_all_gather(s->mesh.shard, r->commst, i, send, x->p_full.ptr, (size_t)x->sl.shard,
                       r->pdt));
  FB_TRY(fb_event_record(r->dev, done, r->commst));
  fb_free(r->dev, &x->p_cast, r->commst);
  fb_host_work(r->dev, k * fb_fsdp_host.views_per_param, "fsdp.unsharded_views");
  return FB_OK;
}

static void *gathered_params(fb_rank *r, int i) { return ((fsdp_state *)r->st)->u[i].p_full.ptr; }

/* Frees unit i's gathered parameters after the compute stream (record_stream). */
static fb_status reshard(fb_rank *r, int i) {
  fsdp_unit *x = &((fsdp_state *)r->st)->u[i];
  fb_host_work(r->dev, (double)r->model->units[i].count * fb_fsdp_host.reshard_per_param,
               "fsdp.reshard");
  fb_free(r->dev, &x->p_full, r->compute);
  return enqueue_free(r);
}

static const fb_gather_ops gather_ops = {
    .issue = issue_gather, .params = gathered_params, .reshard = reshard};

static fb_status release(fb_rank *r, int i) {
  return fb_gather_release(&((fsdp_state *)r->st)->g, r, i);
}

fb_status fb_fsdp_pre_forward(fb_rank *r, int i) {
  return fb_gather_pre_forward(&((fsdp_state *)r->st)->g, r, i);
}

/* ZeRO-2: no reshard after forward; accumulation without reshard keeps units gathered too */
static bool keep_gathered(const fb_rank *r) {
  return !r->cfg->reshard_after_forward || r->cfg->accum == FB_ACCUM_NO_RESHARD;
}

fb_status fb_fsdp_post_forward(fb_rank *r, int i) {
  return keep_gathered(r) ? FB_OK : release(r, i);
}

/* Folds unit i's finished reduce-scatter (a micro-step > 0) into its slice: the compute
 * stream waits for it (on a GPU it ran beside the next unit's backward). */
static fb_status fold_unit(fb_rank *r, int i) {
  fsdp_state *s = r->st;
  fsdp_unit *x = &s->u[i];
  if (s->fold_next == i) s->fold_next = -1;
  if (!x->acc_pending) return FB_OK;
  FB_TRY(fb_stream_wait(r->dev, r->compute, x->ev_rs));
  x->rs_pending = false;
  FB_TRY(fb_fold_reduced(r, i, x->sl.g.ptr, x->rs_tmp.ptr, x->sl.shard, x->acc_overwrite));
  fb_free(r->dev, &x->rs_tmp, r->compute);
  x->acc_pending = false;
  return FB_OK;
}

/* Folds finished reduce-scatters of micro-steps > 0 into the slices. */
static fb_status fold_pending(fb_rank *r, bool all) {
  fsdp_state *s = r->st;
  for (int i = 0; i < r->model->nunits; i++) {
    fsdp_unit *x = &s->u[i];
    if (x->rs_pending) {
      FB_TRY(fb_stream_wait(r->dev, r->compute, x->ev_rs));
      x->rs_pending = false;
    }
    if (x->acc_pending && all) {
      FB_TRY(fb_fold_reduced(r, i, x->sl.g.ptr, x->rs_tmp.ptr, x->sl.shard, x->acc_overwrite));
      fb_free(r->dev, &x->rs_tmp, r->compute);
      x->acc_pending = false;
    }
  }
  return FB_OK;
}

fb_status fb_fsdp_pre_backward(fb_rank *r, int i) {
  fsdp_state *s = r->st;
  fsdp_unit *x = &s->u[i];
  FB_TRY(fb_gather_pre_backward(&s->g, r, i));
  const bool accumulate_local = r->cfg->accum == FB_ACCUM_NO_REDUCE && r->micro > 0;
  if (!x->g_full.ptr) {
    FB_TRY(fb_alloc(r->dev, (size_t)x->sl.padded * fb_psz(r), FB_MEM_GRAD_FULL, "grads.unsharded",
                    &x->g_full));
  }
  r->view[i].grads = x->g_full.ptr;
  if (accumulate_local) return FB_OK;
  /* FSDP1: the unit's parameters are views of its flat parameter, so autograd produces each
   * parameter's gradient on its own and assembles the flat unsharded gradient from them
   * (split's backward, a concatenation) before the post-backward hook reduces it
   * (runtime-mechanisms.md 2.5 and 6: "unsharded grad P (autograd, default stream)").
   * YaFSDP's gradients are views of its gradient buffer: no such copy. */
  FB_TRY(fb_alloc(r->dev, (size_t)x->sl.padded * fb_psz(r), FB_MEM_GRAD_FULL, "grads.autograd",
                  &x->g_auto));
  r->view[i].grads = x->g_auto.ptr;
  fb_kctx k = fb_rank_kctx(r, r->compute, i);
  return fb_k_memset0(&k, "zero_grad", x->g_auto.ptr, x->g_auto.bytes);
}

fb_status fb_fsdp_post_backward(fb_rank *r, int i) {
  fsdp_state *s = r->st;
  fsdp_unit *x = &s->u[i];
  const fb_accum_mode mode = r->cfg->accum;
  const bool last_micro = r->micro == r->n_micro - 1;
  r->view[i].grads = NULL;
  if (x->g_auto.ptr) { /* the flat gradient, assembled from the per-parameter ones */
    fb_kctx k = fb_rank_kctx(r, r->compute, i);
    FB_TRY(fb_k_copy(&k, "flat_grad_cat", x->g_full.ptr, x->g_auto.ptr, x->g_auto.bytes));
    fb_free(r->dev, &x->g_auto, r->compute);
  }
  /* parameters: keep across micro-steps in no-reshard mode, else reshard now */
  if (!(mode == FB_ACCUM_NO_RESHARD && !last_micro)) FB_TRY(release(r, i));
  if (mode == FB_ACCUM_NO_REDUCE && !last_micro) return FB_OK; /* keep unsharded grads */
  /* reduce-scatter: micro-step 0 (or the single no-reduce reduction) straight into the slice,
   * later micro-steps into a temporary added once it lands; a reduction in bf16 always lands
   * in a temporary that is folded (up-cast) into the fp32 slice */
  const bool first = r->micro == 0 || mode == FB_ACCUM_NO_REDUCE;
  const bool direct = first && r->rdt == FB_F32;
  void *send, *dst = x->sl.g.ptr;
  FB_TRY(fb_for_reduce(r, i, x->g_full.ptr, x->sl.padded, &x->g_cast, &send));
  if (!direct) {
    FB_TRY(fb_alloc(r->dev, (size_t)x->sl.shard * fb_dtype_size(r->rdt), FB_MEM_COMM,
                    "grads.rs_out", &x->rs_tmp));
    dst = x->rs_tmp.ptr;
  }
  const float f = (float)s->divide;
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  if (f > 1) FB_TRY(fsdp1_divide(r, i, x->ev_ready, "grad_predivide", send, x->sl.padded, 1 / f));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  /* hsdp: the shard's sum over this replica, then over the replicas (comm.h fb_comm_mesh) */
  FB_TRY(fb_reduce_scatter_mesh(&s->mesh, r->commst, i, send, dst, (size_t)x->sl.shard, r->rdt));
  FB_TRY(fb_all_reduce_replicas(&s->mesh, r->commst, i, dst, (size_t)x->sl.shard, r->rdt));
  FB_TRY(fb_event_record(r->dev, x->ev_rs, r->commst));
  if (f > 1) FB_TRY(fsdp1_divide(r, i, x->ev_rs, "grad_postdivide", dst, x->sl.shard, f));
  x->rs_pending = true;
  x->acc_pending = !direct;
  x->acc_overwrite = first;
  /* FSDP1 accumulates each reduction into the saved shard right after it (on its
   * post-backward stream): fold the previous unit's now, so at most two reduction outputs
   * are alive, not one per unit until the micro-step ends */
  if (!direct) {
    if (s->fold_next >= 0) FB_TRY(fold_unit(r, s->fold_next));
    s->fold_next = i;
  }
  fb_free(r->dev, &x->g_full, r->commst);
  fb_free(r->dev, &x->g_cast, r->commst);
  /* the micro-step ends with the root: fold the finished reductions before the next one */
  if (i == 0 && !last_micro) FB_TRY(fold_pending(r, true));
  return FB_OK;
}

static fb_slice *slice_of(fb_rank *r, int i) { return &((fsdp_state *)r->st)->u[i].sl; }

/* The update of unit i's slice (v: the shard view). Under AdamW in mixed precision it is one
 * pass that also writes the slice in the compute dtype (adamw_cast) into p_cast, which the
 * unit's next gather (the next forward's) sends instead of casting the slice again: the same
 * bits as the update followed by that cast. The copy lives from the step to that gather, while
 * no activation does (the step's peak is not raised); the backward's gather casts as before. */
static fb_status fsdp_update(fb_rank *v, fsdp_unit *x, int i) {
  const int64_t start = (int64_t)v->rank * x->sl.shard;
  if (v->pdt == FB_F32 || strcmp(v->cfg->optimizer, "adamw") || x->p_cast.ptr)
    return fb_optim_update(v, i, start, x->sl.shard, x->sl.p.ptr, x->sl.g.ptr, &x->sl.optim, 0);
  FB_TRY(fb_alloc(v->dev, (size_t)x->sl.shard * fb_psz(v), FB_MEM_COMM, "params.cast",
                  &x->p_cast));
  FB_TRY(fb_optim_update_to(v, i, start, x->sl.shard, x->sl.p.ptr, x->sl.g.ptr, &x->sl.optim, 0,
                            x->p_cast.ptr, true));
  x->p_fresh = true;
  return FB_OK;
}

/* The exact norm's bins are summed over the shard group only: its slices partition every
 * unit once, and every replica holds the same reduced slices. */
fb_status fb_fsdp_step(fb_rank *r) {
  fsdp_state *s = r->st;
  FB_TRY(fold_pending(r, true));
  /* the slices need no zeroing: the next step's first reduce-scatter overwrites them */
  fb_rank v = shard_view(r);
  fb_status st = fb_slices_norm(&v, slice_of);
  for (int i = 0; i < r->model->nunits && st == FB_OK; i++) st = fsdp_update(&v, &s->u[i], i);
  r->grad_norm = v.grad_norm;
  r->clip_coef = v.clip_coef;
  return st;
}

/* Checkpoints: this rank's slices, numbered within its shard group; to save, the first replica
 * group writes (the others hold the same slices). */
fb_status fb_fsdp_state_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  fsdp_state *s = r->st;
  *out = NULL, *n = 0;
  if (save && !fb_mesh_saves(&s->mesh)) return FB_OK;
  fb_rank v = shard_view(r);
  return fb_ranges_slices(&v, slice_of, out, n);
}

fb_status fb_fsdp_read_params(fb_rank *r, int i, float *host) {
  fsdp_state *s = r->st;
  return fb_slice_read(r, s->mesh.shard, &s->u[i].sl, r->model->units[i].numel, host);
}

const fb_strategy fb_strategy_fsdp = {
    .name = "fsdp",
    .summary = "flat unit buffers sliced across ranks: all-gather, reduce-scatter, prefetch",
    .setup = fsdp_setup,
    .teardown = fb_fsdp_teardown,
    .pre_forward = fb_fsdp_pre_forward,
    .post_forward = fb_fsdp_post_forward,
    .pre_backward = fb_fsdp_pre_backward,
    .post_backward = fb_fsdp_post_backward,
    .optimizer_step = fb_fsdp_step,
    .read_params = fb_fsdp_read_params,
    .host = &fb_fsdp_host,
    .tunes_prefetch = true,
    .tunes_reshard = true,
    .accum_modes = 1u << FB_ACCUM_NO_RESHARD | 1u << FB_ACCUM_NO_REDUCE,
    .shards_all = true,
    .state_ranges = fb_fsdp_state_ranges,
    .memory = "16P/W (flat units padded to a multiple of W) + gathered units in flight",
};
