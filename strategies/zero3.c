/* `zero3` (inter-tensor, DeepSpeed ZeRO-3 style ownership): every parameter tensor is owned
 * whole by one rank under a balanced partition (zero3_partition.h). A rank keeps only its own
 * tensors — parameters, gradient accumulator, optimizer state — packed per unit. Before a unit
 * runs (forward, and backward again after a reshard) a full unit buffer is allocated and every
 * owner broadcasts its tensors into it; after the unit's backward each tensor's gradient is
 * reduced (summed in rank order) to its owner; each owner updates only its tensors.
 * Forward / backward prefetch, reshard_after_forward, max_inflight and the three accumulation
 * modes behave as in `fsdp`. Alignment gaps stay zero in the full buffers.
 * On a mesh (--mesh RxS, MiCS): tensors are owned within each shard group of S consecutive
 * ranks (the partition over S), broadcasts stay in the group, a tensor's gradient is reduced
 * to its owner in the group and the owned tensors are then all-reduced across the replicas.
 * What it does not do: split a tensor across ranks (that is `fsdp`). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mesh.h"
#include "state_ranges.h"
#include "unit_gather.h"
#include "zero3_partition.h"

/* ---- the partition (pure) -------------------------------------------------------------- */

/* Whether parameter a goes before b in the largest-first order. */
static bool larger_first(const fb_param *a, const fb_param *b) {
  return a->numel != b->numel ? a->numel > b->numel : a->id < b->id;
}

void fb_zero3_partition(const fb_model *m, int world, int *owner, int64_t *load) {
  assert(world >= 1);
  for (int w = 0; w < world; w++) load[w] = 0;
  for (int i = 0; i < m->nparams; i++) owner[i] = -1;
  for (int done = 0; done < m->nparams; done++) {
    int best = -1; /* the largest parameter not yet assigned */
    for (int i = 0; i < m->nparams; i++)
      if (owner[i] < 0 && (best < 0 || larger_first(&m->params[i], &m->params[best]))) best = i;
    int to = 0; /* the least-loaded rank, lowest on ties */
    for (int w = 1; w < world; w++)
      if (load[w] < load[to]) to = w;
    owner[best] = to;
    load[to] += m->params[best].numel;
  }
}

double fb_zero3_imbalance(const int64_t *load, int world) {
  int64_t total = 0, max = 0;
  for (int w = 0; w < world; w++) {
    total += load[w];
    if (load[w] > max) max = load[w];
  }
  return total > 0 ? (double)max * world / (double)total : 1.0;
}

/* ---- per-rank state ---------------------------------------------------------------------- */

typedef struct z3_unit {
  int64_t owned;              /* elements of this unit's tensors this rank owns (packed) */
  fb_buf p_own, g_own;        /* persistent: owned parameters and gradient accumulators */
  fb_optim_state optim;       /* persistent: optimizer state of the owned tensors */
  fb_buf p_full, g_full;      /* transient full unit buffers (compute dtype) */
  fb_buf g_cast;              /* mixed precision: the unit gradient in the reduce dtype */
  fb_buf red_tmp;             /* reduce output folded later (micro-steps > 0, or bf16) */
  bool red_pending, acc_pending, acc_overwrite;
  fb_event *ev_red, *ev_ready;
} z3_unit;

typedef struct z3_state {
  z3_unit *u;
  int *owner;       /* [nparams] rank owning each tensor */
  int64_t *packed;  /* [nparams] offset of an owned tensor inside its unit's packed buffers */
  int64_t *load;    /* [shard group size] */
  fb_gather g;      /* the units' gathers (unit_gather.h) */
  fb_comm_mesh mesh; /* --mesh: tensors owned within its shard group, reduced ones then
                        all-reduced across the replicas; r->comm without it */
} z3_state;

/* This rank's place in the group that owns the tensors (the world without --mesh). */
static int me(const z3_state *s) { return s->mesh.shard->rank; }

static const fb_gather_ops gather_ops; /* the gather hooks, below */

static void z3_teardown(fb_rank *r) {
  z3_state *s = r->st;
  if (!s) return;
  for (int i = 0; s->u && i < r->model->nunits; i++) {
    z3_unit *x = &s->u[i];
    fb_free(r->dev, &x->p_own, NULL);
    fb_free(r->dev, &x->g_own, NULL);
    fb_free(r->dev, &x->p_full, NULL);
    fb_free(r->dev, &x->g_full, NULL);
    fb_free(r->dev, &x->red_tmp, NULL);
    fb_free(r->dev, &x->g_cast, NULL);
    fb_optim_free(r, &x->optim);
    fb_event *evs[] = {x->ev_red, x->ev_ready};
    for (int e = 0; e < 2; e++)
      if (evs[e]) r->dev->ops->event_destroy(r->dev, evs[e]);
  }
  fb_gather_fini(&s->g, r);
  free(s->u);
  free(s->owner);
  free(s->packed);
  free(s->load);
  fb_mesh_close(&s->mesh);
  free(s);
  r->st = NULL;
}

/* Copies the init values of every owned tensor of unit i into its packed slot. */
static fb_status materialize_owned(fb_rank *r, int i) {
  z3_state *s = r->st;
  const fb_unit *un = &r->model->units[i];
  z3_unit *x = &s->u[i];
  for (int p = un->first; p < un->first + un->count; p++) {
    if (s->owner[p] != me(s)) continue;
    const fb_param *pp = &r->model->params[p];
    FB_TRY(fb_materialize_range(r, i, pp->offset, pp->numel, (float *)x->p_own.ptr + s->packed[p]));
  }
  return FB_OK;
}

static fb_status z3_setup(fb_rank *r) {
  const fb_model *m = r->model;
  z3_state *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory (zero3 state)");
  r->st = s;
  s->mesh = (fb_comm_mesh){.world = r->comm, .shard = r->comm};
  fb_status st = fb_mesh_open(r, false, &s->mesh);
  if (st != FB_OK) goto fail;
  const int group = s->mesh.shard->world;
  s->u = calloc((size_t)m->nunits, sizeof *s->u);
  s->owner = calloc((size_t)(m->nparams > 0 ? m->nparams : 1), sizeof *s->owner);
  s->packed = calloc((size_t)(m->nparams > 0 ? m->nparams : 1), sizeof *s->packed);
  s->load = calloc((size_t)group, sizeof *s->load);
  if (!s->u || !s->owner || !s->packed || !s->load) {
    st = FB_ERR(FB_ENOMEM, "out of host memory (zero3 partition)");
    goto fail;
  }
  FB_CHECK_GOTO(st, fb_gather_init(&s->g, r, &gather_ops), fail);
  fb_zero3_partition(m, group, s->owner, s->load);
  r->zero3_imbalance = fb_zero3_imbalance(s->load, group);

  for (int i = 0; i < m->nunits; i++) {
    z3_unit *x = &s->u[i];
    const fb_unit *un = &m->units[i];
    for (int p = un->first; p < un->first + un->count; p++) {
      s->packed[p] = -1;
      if (s->owner[p] != me(s)) continue;
      s->packed[p] = x->owned;
      x->owned += m->params[p].numel;
    }
    const size_t bytes = (size_t)x->owned * 4;
    if (x->owned > 0) {
      fb_kctx k = fb_rank_kctx(r, r->compute, i);
      FB_CHECK_GOTO(st, fb_alloc(r->dev, bytes, FB_MEM_PARAM_SHARD, "zero3.params", &x->p_own),
                    fail);
      FB_CHECK_GOTO(st, materialize_owned(r, i), fail);
      FB_CHECK_GOTO(st, fb_alloc(r->dev, bytes, FB_MEM_GRAD_SHARD, "zero3.grads", &x->g_own),
                    fail);
      FB_CHECK_GOTO(st, fb_k_memset0(&k, "zero_grad", x->g_own.ptr, bytes), fail);
      FB_CHECK_GOTO(st, fb_optim_alloc(r, x->owned, "zero3.optim", &x->optim), fail);
    }
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &x->ev_red), fail);
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &x->ev_ready), fail);
  }
  return FB_OK;
fail:
  z3_teardown(r);
  return st;
}

/* ---- parameters: broadcast from the owners ------------------------------------------------ */

/* The gather hook (unit_gather.h): zero the alignment gaps of a full unit buffer, owners
 * stage their tensors into it, one broadcast per tensor from its owner, on the comm stream. */
static fb_status issue_gather(fb_rank *r, int i, fb_event *done) {
  z3_state *s = r->st;
  z3_unit *x = &s->u[i];
  const fb_unit *un = &r->model->units[i];
  const size_t ps = fb_psz(r);
  /* written on the comm stream, freed after compute: DeepSpeed allocates it for its all-gather
   * stream and record_streams it on the compute stream (caching-allocator model: per-stream
   * pools, held blocks) */
  FB_TRY(fb_alloc_on(r->dev, r->commst, (size_t)un->numel * ps, FB_MEM_PARAM_FULL,
                     "zero3.gathered", &x->p_full));
  /* the comm stream must see the owned tensors as the compute stream left them (optimizer) */
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  fb_kctx k = fb_rank_kctx(r, r->commst, i);
  char *full = x->p_full.ptr; /* elements of the compute dtype */
  int64_t end = 0; /* alignment gaps (before each tensor and at the tail) are zeroed */
  for (int p = un->first; p <= un->first + un->count; p++) {
    const int64_t next = p < un->first + un->count ? r->model->params[p].offset : un->numel;
    if (next > end)
      FB_TRY(fb_k_memset0(&k, "zero3.zero_gaps", full + end * ps, (size_t)(next - end) * ps));
    if (p < un->first + un->count) end = next + r->model->params[p].numel;
  }
  for (int p = un->first; p < un->first + un->count; p++) {
    if (s->owner[p] != me(s)) continue;
    const fb_param *pp = &r->model->params[p];
    const float *own = (float *)x->p_own.ptr + s->packed[p];
    if (r->pdt == FB_F32)
      FB_TRY(fb_k_copy(&k, "zero3.stage", full + pp->offset * ps, own, (size_t)pp->numel * 4));
    else /* mixed precision: owners broadcast their fp32 master tensors cast to bf16 */
      FB_TRY(fb_k_cast(&k, full + pp->offset * ps, r->pdt, own, FB_F32, (size_t)pp->numel));
  }
  /* one launch for the unit's per-tensor broadcasts (ncclGroupStart/End on nccl) */
  FB_TRY(fb_comm_group_start(s->mesh.shard));
  fb_status st = FB_OK;
  for (int p = un->first; p < un->first + un->count && st == FB_OK; p++) {
    const fb_param *pp = &r->model->params[p];
    st = fb_broadcast(s->mesh.shard, r->commst, i, full + pp->offset * ps, (size_t)pp->numel,
                      r->pdt, s->owner[p]);
  }
  fb_status ge = fb_comm_group_end(s->mesh.shard);
  FB_TRY(st != FB_OK ? st : ge);
  return fb_event_record(r->dev, done, r->commst);
}

static void *gathered_params(fb_rank *r, int i) { return ((z3_state *)r->st)->u[i].p_full.ptr; }

static fb_status reshard(fb_rank *r, int i) {
  z3_unit *x = &((z3_state *)r->st)->u[i];
  fb_free(r->dev, &x->p_full, r->compute); /* compute waited the gather: its order covers both */
  return FB_OK;
}

static const fb_gather_ops gather_ops = {
    .issue = issue_gather, .params = gathered_params, .reshard = reshard};

static fb_status release(fb_rank *r, int i) {
  return fb_gather_release(&((z3_state *)r->st)->g, r, i);
}

static fb_status z3_pre_forward(fb_rank *r, int i) {
  return fb_gather_pre_forward(&((z3_state *)r->st)->g, r, i);
}

static fb_status z3_post_forward(fb_rank *r, int i) {
  return r->cfg->reshard_after_forward ? release(r, i) : FB_OK;
}

/* ---- gradients: reduce to the owners ------------------------------------------------------ */

/* Makes the compute stream wait for finished reductions; folds the temporaries of micro-steps
 * > 0 into the accumulators, unit by unit (each unit has at most one pending). */
static fb_status fold_pending(fb_rank *r) {
  z3_state *s = r->st;
  for (int i = 0; i < r->model->nunits; i++) {
    z3_unit *x = &s->u[i];
    if (x->red_pending) {
      FB_TRY(fb_stream_wait(r->dev, r->compute, x->ev_red));
      x->red_pending = false;
    }
    if (x->acc_pending) {
      FB_TRY(fb_fold_reduced(r, i, x->g_own.ptr, x->red_tmp.ptr, x->owned, x->acc_overwrite));
      fb_free(r->dev, &x->red_tmp, r->compute);
      x->acc_pending = false;
    }
  }
  return FB_OK;
}

static fb_status z3_pre_backward(fb_rank *r, int i) {
  z3_state *s = r->st;
  z3_unit *x = &s->u[i];
  FB_TRY(fb_gather_pre_backward(&s->g, r, i));
  /* no-reduce mode keeps the unsharded gradient of earlier micro-steps: accumulate into it */
  const bool fresh = !x->g_full.ptr;
  if (fresh)
    FB_TRY(fb_alloc(r->dev, (size_t)r->model->units[i].numel * fb_psz(r), FB_MEM_GRAD_FULL,
                    "zero3.grads.unsharded", &x->g_full));
  r->view[i].grads = x->g_full.ptr;
  if (!fresh && r->cfg->accum == FB_ACCUM_NO_REDUCE && r->micro > 0) return FB_OK;
  fb_kctx k = fb_rank_kctx(r, r->compute, i);
  return fb_k_memset0(&k, "zero_grad", x->g_full.ptr, x->g_full.bytes);
}

static fb_status z3_post_backward(fb_rank *r, int i) {
  z3_state *s = r->st;
  z3_unit *x = &s->u[i];
  const fb_unit *un = &r->model->units[i];
  const fb_accum_mode mode = r->cfg->accum;
  const bool last_micro = r->micro == r->n_micro - 1;
  r->view[i].grads = NULL;
  /* parameters: kept across micro-steps in no-reshard mode, else resharded now */
  if (!(mode == FB_ACCUM_NO_RESHARD && !last_micro)) FB_TRY(release(r, i));
  if (mode == FB_ACCUM_NO_REDUCE && !last_micro) return FB_OK; /* keep unsharded grads */
  /* a previous micro-step's reduction of this unit must be folded before a new one lands */
  if (x->red_pending || x->acc_pending) FB_TRY(fold_pending(r));
  /* micro-step 0 (or the only no-reduce reduction) lands straight in the accumulator; later
   * micro-steps land in a temporary that is added once the reduction finished, so the sum
   * order is acc = g0 (rank order) then acc += reduction of each later micro-step */
  /* (a reduction in bf16 always lands in a temporary that is folded into the fp32 accumulator) */
  const bool first = r->micro == 0 || mode == FB_ACCUM_NO_REDUCE;
  const bool direct = first && r->rdt == FB_F32;
  const size_t rs = fb_dtype_size(r->rdt);
  char *acc = x->g_own.ptr;
  if (!direct && x->owned > 0) {
    FB_TRY(fb_alloc(r->dev, (size_t)x->owned * rs, FB_MEM_COMM, "zero3.reduce_out",
                    &x->red_tmp));
    acc = x->red_tmp.ptr;
  }
  void *send;
  FB_TRY(fb_for_reduce(r, i, x->g_full.ptr, un->numel, &x->g_cast, &send));
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  char *g = send;
  FB_TRY(fb_comm_group_start(s->mesh.shard)); /* the unit's per-tensor reduces: one launch */
  fb_status st = FB_OK;
  for (int p = un->first; p < un->first + un->count && st == FB_OK; p++) {
    const fb_param *pp = &r->model->params[p];
    const int root = s->owner[p];
    /* non-owners' recv is ignored by reduce: they pass their own send buffer */
    char *recv = root == me(s) ? acc + s->packed[p] * rs : g + pp->offset * rs;
    st = fb_reduce_mesh(&s->mesh, r->commst, i, g + pp->offset * rs, recv, (size_t)pp->numel,
                        r->rdt, root);
  }
  fb_status ge = fb_comm_group_end(s->mesh.shard);
  FB_TRY(st != FB_OK ? st : ge);
  /* on a mesh: the owned tensors (packed) summed across the replicas, one all-reduce; the
   * replica group's members own the same tensors */
  if (x->owned > 0)
    FB_TRY(fb_all_reduce_replicas(&s->mesh, r->commst, i, acc, (size_t)x->owned, r->rdt));
  FB_TRY(fb_event_record(r->dev, x->ev_red, r->commst));
  x->red_pending = true;
  x->acc_pending = !direct && x->owned > 0;
  x->acc_overwrite = first;
  fb_free(r->dev, &x->g_full, r->commst);
  fb_free(r->dev, &x->g_cast, r->commst);
  /* the micro-step ends with the root: fold the finished reductions before the next one */
  if (i == 0 && !last_micro) FB_TRY(fold_pending(r));
  return FB_OK;
}

/* ---- optimizer ------------------------------------------------------------------------------ */

static fb_status z3_step(fb_rank *r) {
  z3_state *s = r->st;
  const fb_model *m = r->model;
  FB_TRY(fold_pending(r));
  fb_rank v = fb_mesh_view(r, &s->mesh); /* bins over the shard group: replicas hold the same */
  FB_TRY(fb_norm_begin(&v));
  for (int i = 0; i < m->nunits; i++)
    if (s->u[i].owned > 0) FB_TRY(fb_norm_add(&v, s->u[i].g_own.ptr, s->u[i].owned));
  FB_TRY(fb_norm_finish(&v, true));
  r->grad_norm = v.grad_norm;
  r->clip_coef = v.clip_coef;
  for (int i = 0; i < m->nunits; i++) {
    z3_unit *x = &s->u[i];
    const fb_unit *un = &m->units[i];
    for (int p = un->first; p < un->first + un->count; p++) {
      if (s->owner[p] != me(s)) continue;
      const fb_param *pp = &m->params[p];
      const int64_t q = s->packed[p];
      FB_TRY(fb_optim_update(r, i, pp->offset, pp->numel, (float *)x->p_own.ptr + q,
                             (const float *)x->g_own.ptr + q, &x->optim, q));
    }
  }
  return FB_OK;
}

/* Readback (not part of the algorithm, so not recorded): rank 0 assembles the unit from the
 * owners' broadcasts through the raw communicator and device ops. */
static fb_status z3_read_params(fb_rank *r, int i, float *host) {
  z3_state *s = r->st;
  z3_unit *x = &s->u[i];
  const fb_unit *un = &r->model->units[i];
  fb_buf full = {0};
  FB_TRY(fb_alloc(r->dev, (size_t)un->numel * 4, FB_MEM_TEMP, "zero3.readback", &full));
  fb_status st = fb_stream_sync(r->dev, r->compute); /* the optimizer's writes are done */
  float *f = full.ptr;
  if (st == FB_OK) st = fb_memset0(r->dev, r->commst, f, full.bytes);
  for (int p = un->first; p < un->first + un->count && st == FB_OK; p++) {
    if (s->owner[p] != me(s)) continue;
    const fb_param *pp = &r->model->params[p];
    st = fb_copy_d2d(r->dev, r->commst, f + pp->offset, (float *)x->p_own.ptr + s->packed[p],
                     (size_t)pp->numel * 4);
  }
  for (int p = un->first; p < un->first + un->count && st == FB_OK; p++) {
    const fb_param *pp = &r->model->params[p];
    st = fb_comm_unrecorded(s->mesh.shard, r->commst, FB_COLL_BROADCAST, f + pp->offset,
                            f + pp->offset, (size_t)pp->numel, FB_F32, s->owner[p]);
  }
  if (st == FB_OK) st = fb_stream_sync(r->dev, r->commst);
  if (st == FB_OK && host) st = fb_copy_d2h(r->dev, r->commst, host, f, full.bytes);
  fb_free(r->dev, &full, NULL);
  return st;
}

/* Every owned tensor, whole, from the packed buffers (owners are disjoint in a shard group:
 * save = load; on a mesh the first replica saves). */
static fb_status zero3_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  z3_state *s = r->st;
  int cap = 0;
  *out = NULL, *n = 0;
  if (save && !fb_mesh_saves(&s->mesh)) return FB_OK;
  for (int p = 0; p < r->model->nparams; p++) {
    if (s->owner[p] != me(s)) continue;
    const fb_param *pp = &r->model->params[p];
    z3_unit *x = &s->u[pp->unit];
    fb_status st = fb_ranges_push(out, n, &cap, pp->unit, pp->offset, pp->numel,
                                  (float *)x->p_own.ptr + s->packed[p], &x->optim, s->packed[p]);
    if (st != FB_OK) {
      free(*out);
      return st;
    }
  }
  return FB_OK;
}

const fb_strategy fb_strategy_zero3 = {
    .name = "zero3",
    .summary = "whole tensors owned by ranks: broadcast from owners, reduce to owners",
    .setup = z3_setup,
    .teardown = z3_teardown,
    .pre_forward = z3_pre_forward,
    .post_forward = z3_post_forward,
    .pre_backward = z3_pre_backward,
    .post_backward = z3_post_backward,
    .optimizer_step = z3_step,
    .read_params = z3_read_params,
    /* DeepSpeed's per-module hook work and its CPU-blocking fetch limit (2 events in flight)
     * have no public per-hook figure here: not modelled (only op dispatch, host_op_us) */
    .host = NULL,
    .accum_modes = 1u << FB_ACCUM_NO_RESHARD | 1u << FB_ACCUM_NO_REDUCE,
    .shards_all = true,
    .mesh = true,
    .state_ranges = zero3_ranges,
    .memory = "16P/W (whole tensors per owner: up to the imbalance x 16P/W)",
};
