/* The ZeRO stage 1 and 2 machine (zero12.h), shared by zero1.c and zero2.c: replicated
 * parameters, fsdp's slices of master parameters, gradients and optimizer state; the
 * reduce-scatter of a unit's full gradient into the slices (or, with --grad-reduce
 * all-reduce, its all-reduce over every rank, as InternLM does), the folds of later micro-steps,
 * and the step that updates the slices and all-gathers them into every replica (or, with
 * --param-sync broadcast, broadcasts each owner's partition, as InternLM does). When to
 * reduce is the strategies' choice (zero1: after the backward, zero2: as units finish). */
#include "zero12.h"

#include <stdlib.h>
#include <string.h>

#include "mesh.h"
#include "state_ranges.h"

/* dst (pdt, n elements) = the init values of unit u's flat range [0, n), zeros past its end:
 * straight from the init under fp32, else through fp32 chunks cast on the compute stream. */
static fb_status materialize_pdt(fb_rank *r, int u, int64_t n, void *dst) {
  if (r->pdt == FB_F32) return fb_materialize_range(r, u, 0, n, dst);
  const int64_t chunk = (int64_t)1 << 22;
  fb_buf t = {0};
  FB_TRY(fb_alloc(r->dev, (size_t)(n < chunk ? n : chunk) * 4, FB_MEM_TEMP, "params.init", &t));
  fb_status st = FB_OK;
  for (int64_t o = 0; o < n && st == FB_OK; o += chunk) {
    const int64_t c = n - o < chunk ? n - o : chunk;
    st = fb_materialize_range(r, u, o, c, t.ptr);
    if (st == FB_OK) st = fb_to_pdt(r, u, (char *)dst + (size_t)o * fb_psz(r), t.ptr, c);
  }
  fb_free(r->dev, &t, r->compute);
  return st;
}

/* r as a member of its shard group (mesh.h): r itself without --mesh. */
static fb_rank shard_view(const fb_rank *r) {
  return fb_mesh_view(r, &((const fb_zero_state *)r->st)->mesh);
}

static fb_status zunit_init(fb_rank *r, int u, fb_zunit *x) {
  fb_rank v = shard_view(r);
  FB_TRY(fb_slice_init(&v, u, &x->sl));
  const fb_mem_cat cat = r->pdt == FB_F32 ? FB_MEM_PARAM_SHARD : FB_MEM_PARAM_FULL;
  FB_TRY(fb_alloc(r->dev, (size_t)x->sl.padded * fb_psz(r), cat, "params.replica", &x->full));
  FB_TRY(materialize_pdt(r, u, x->sl.padded, x->full.ptr));
  FB_TRY(r->dev->ops->event_create(r->dev, &x->ev_ready));
  FB_TRY(r->dev->ops->event_create(r->dev, &x->ev_rs));
  return r->dev->ops->event_create(r->dev, &x->ev_gather);
}

void fb_zero_teardown(fb_rank *r) {
  fb_zero_state *s = r->st;
  if (!s) return;
  for (int i = 0; s->u && i < r->model->nunits; i++) {
    fb_zunit *x = &s->u[i];
    fb_slice_free(r, &x->sl);
    fb_buf *bufs[] = {&x->full, &x->g_full, &x->g_cast, &x->rs_tmp, &x->p_cast};
    for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++) fb_free(r->dev, bufs[b], NULL);
    fb_event *evs[] = {x->ev_ready, x->ev_rs, x->ev_gather};
    for (int e = 0; e < 3; e++)
      if (evs[e]) r->dev->ops->event_destroy(r->dev, evs[e]);
  }
  free(s->u);
  fb_mesh_close(&s->mesh);
  free(s);
  r->st = NULL;
}

fb_status fb_zero_setup(fb_rank *r) {
  fb_zero_state *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory (%s state)", r->strategy->name);
  r->st = s;
  s->fold_next = -1;
  s->mesh = (fb_comm_mesh){.world = r->comm, .shard = r->comm};
  fb_status st = fb_mesh_open(r, &s->mesh);
  s->u = st == FB_OK ? calloc((size_t)r->model->nunits, sizeof *s->u) : NULL;
  if (st == FB_OK && !s->u)
    st = FB_ERR(FB_ENOMEM, "out of host memory (%s units)", r->strategy->name);
  for (int i = 0; st == FB_OK && i < r->model->nunits; i++) st = zunit_init(r, i, &s->u[i]);
  if (st != FB_OK) fb_zero_teardown(r);
  return st;
}

fb_status fb_zero_pre_forward(fb_rank *r, int u) {
  fb_zunit *x = &((fb_zero_state *)r->st)->u[u];
  if (x->gathering) { /* the step's all-gather of the updated slices */
    FB_TRY(fb_stream_wait(r->dev, r->compute, x->ev_gather));
    x->gathering = false;
  }
  r->view[u].params = x->full.ptr;
  return FB_OK;
}

fb_status fb_zero_post_forward(fb_rank *r, int u) {
  (void)r, (void)u;
  return FB_OK;
}

fb_status fb_zero_pre_backward(fb_rank *r, int u) {
  fb_zunit *x = &((fb_zero_state *)r->st)->u[u];
  FB_TRY(fb_zero_pre_forward(r, u));
  const bool keep = x->g_full.ptr && r->cfg->accum == FB_ACCUM_NO_REDUCE && r->micro > 0;
  if (!x->g_full.ptr)
    FB_TRY(fb_alloc(r->dev, (size_t)x->sl.padded * fb_psz(r), FB_MEM_GRAD_FULL, "grads.unsharded",
                    &x->g_full));
  r->view[u].grads = x->g_full.ptr;
  if (keep) return FB_OK;
  fb_kctx k = fb_rank_kctx(r, r->compute, u);
  return fb_k_memset0(&k, "zero_grad", x->g_full.ptr, x->g_full.bytes);
}

/* Waits for unit u's reduce-scatter; folds its output when it went to a temporary. */
static fb_status zero_fold(fb_rank *r, int u) {
  fb_zero_state *s = r->st;
  fb_zunit *x = &s->u[u];
  if (s->fold_next == u) s->fold_next = -1;
  if (x->rs_pending) {
    FB_TRY(fb_stream_wait(r->dev, r->compute, x->ev_rs));
    x->rs_pending = false;
  }
  if (!x->acc_pending) return FB_OK;
  FB_TRY(fb_fold_reduced(r, u, x->sl.g.ptr, x->rs_tmp.ptr, x->sl.shard, x->acc_overwrite));
  fb_free(r->dev, &x->rs_tmp, r->compute);
  x->acc_pending = false;
  return FB_OK;
}

fb_status fb_zero_fold_all(fb_rank *r) {
  for (int i = 0; i < r->model->nunits; i++) FB_TRY(zero_fold(r, i));
  return FB_OK;
}

/* Unit u's gradient `send` (padded, rdt) summed into this rank's slice `dst`, on the comm
 * stream: a reduce-scatter over the shard group (then an all-reduce across replicas), or with
 * --grad-reduce all-reduce the whole gradient summed in place over every rank (InternLM's
 * reduce_tensor over the data-parallel group) and this rank's slice copied out. Both sum the
 * ranks in the same order on the local communicator: the same bits. */
static fb_status reduce_to_slice(fb_rank *r, fb_zero_state *s, int u, void *send, void *dst) {
  fb_zunit *x = &s->u[u];
  const size_t shard = (size_t)x->sl.shard, esz = fb_dtype_size(r->rdt);
  if (strcmp(r->cfg->grad_reduce, "all-reduce")) {
    FB_TRY(fb_reduce_scatter_mesh(&s->mesh, r->commst, u, send, dst, shard, r->rdt));
    return fb_all_reduce_replicas(&s->mesh, r->commst, u, dst, shard, r->rdt);
  }
  FB_TRY(fb_all_reduce(r->comm, r->commst, u, send, send, (size_t)x->sl.padded, r->rdt));
  const size_t own = (size_t)s->mesh.shard->rank * shard * esz;
  return fb_copy_d2d(r->dev, r->commst, dst, (const char *)send + own, shard * esz);
}

fb_status fb_zero_reduce(fb_rank *r, int u) {
  fb_zero_state *s = r->st;
  fb_zunit *x = &s->u[u];
  const bool first = r->micro == 0 || r->cfg->accum == FB_ACCUM_NO_REDUCE;
  const bool direct = first && r->rdt == FB_F32;
  void *send, *dst = x->sl.g.ptr;
  FB_TRY(fb_for_reduce(r, u, x->g_full.ptr, x->sl.padded, &x->g_cast, &send));
  if (!direct) {
    FB_TRY(fb_alloc(r->dev, (size_t)x->sl.shard * fb_dtype_size(r->rdt), FB_MEM_COMM,
                    "grads.rs_out", &x->rs_tmp));
    dst = x->rs_tmp.ptr;
  }
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute)); /* the gradient is complete */
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  FB_TRY(reduce_to_slice(r, s, u, send, dst));
  FB_TRY(fb_event_record(r->dev, x->ev_rs, r->commst));
  x->rs_pending = true;
  x->acc_pending = !direct;
  x->acc_overwrite = first;
  fb_free(r->dev, &x->g_full, r->commst);
  fb_free(r->dev, &x->g_cast, r->commst);
  if (direct) return FB_OK;
  if (s->fold_next >= 0) FB_TRY(zero_fold(r, s->fold_next));
  s->fold_next = u;
  return FB_OK;
}

/* All-gathers unit u's slice into every rank's full parameters, once the compute stream is
 * done with them. Under mixed precision the slice is sent in the compute dtype: cast first,
 * or, with `update`, the step's update of the slice writes that copy itself (adamw_cast). */
static fb_status zero_gather(fb_rank *r, int u, fb_zunit *x, bool update) {
  const fb_comm_mesh *mesh = &((fb_zero_state *)r->st)->mesh;
  void *send = x->sl.p.ptr;
  const int64_t start = (int64_t)mesh->shard->rank * x->sl.shard;
  if (r->pdt != FB_F32) {
    FB_TRY(fb_alloc(r->dev, (size_t)x->sl.shard * fb_psz(r), FB_MEM_COMM, "params.cast",
                    &x->p_cast));
    send = x->p_cast.ptr;
  }
  if (update)
    FB_TRY(fb_optim_update_to(r, u, start, x->sl.shard, x->sl.p.ptr, x->sl.g.ptr,
                              &x->sl.optim, 0, r->pdt != FB_F32 ? x->p_cast.ptr : NULL, true));
  else if (r->pdt != FB_F32)
    FB_TRY(fb_to_pdt(r, u, x->p_cast.ptr, x->sl.p.ptr, x->sl.shard));
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  FB_TRY(fb_all_gather(mesh->shard, r->commst, u, send, x->full.ptr, (size_t)x->sl.shard,
                       r->pdt));
  FB_TRY(fb_event_record(r->dev, x->ev_gather, r->commst));
  fb_free(r->dev, &x->p_cast, r->commst);
  x->gathering = true;
  return FB_OK;
}

static fb_slice *zero_slice(fb_rank *r, int u) { return &((fb_zero_state *)r->st)->u[u].sl; }

/* Packs this rank's slice of every unit, in the compute dtype, into pk (updating it first with
 * `update`), on the compute stream. */
static fb_status pack_own(fb_rank *r, const fb_zero_state *s, bool update, char *pk) {
  const int64_t me = s->mesh.shard->rank;
  for (int u = 0; u < r->model->nunits; u++) {
    fb_slice *sl = &s->u[u].sl;
    const bool cast = r->pdt != FB_F32;
    if (update)
      FB_TRY(fb_optim_update_to(r, u, me * sl->shard, sl->shard, sl->p.ptr, sl->g.ptr,
                                &sl->optim, 0, cast ? pk : NULL, true));
    if (!cast)
      FB_TRY(fb_copy_d2d(r->dev, r->compute, pk, sl->p.ptr, (size_t)sl->shard * 4));
    else if (!update)
      FB_TRY(fb_to_pdt(r, u, pk, sl->p.ptr, sl->shard));
    pk += (size_t)sl->shard * fb_psz(r);
  }
  return FB_OK;
}

/* --param-sync broadcast (InternLM's broadcast_params): every owner broadcasts its whole
 * partition, all units packed in one buffer, in shard-group rank order; each rank unpacks
 * root j's into slice j of every unit's replica, then the next forward waits for the last
 * (not overlapped). Two buffers of a partition (FB_MEM_COMM): this rank's, sent when its turn
 * comes, and one that receives every other root's (its unpack runs on the comm stream before
 * the next broadcast overwrites it). The same bits as the all-gathers. */
static fb_status zero_sync_broadcast(fb_rank *r, bool update) {
  fb_zero_state *s = r->st;
  fb_comm *g = s->mesh.shard;
  size_t part = 0;
  for (int u = 0; u < r->model->nunits; u++) part += (size_t)s->u[u].sl.shard;
  fb_buf own = {0}, rx = {0};
  fb_status st = fb_alloc(r->dev, part * fb_psz(r), FB_MEM_COMM, "params.partition", &own);
  if (st == FB_OK)
    st = fb_alloc(r->dev, part * fb_psz(r), FB_MEM_COMM, "params.partition_recv", &rx);
  if (st == FB_OK) st = pack_own(r, s, update, own.ptr);
  fb_zunit *x0 = &s->u[0];
  if (st == FB_OK) st = fb_event_record(r->dev, x0->ev_ready, r->compute);
  if (st == FB_OK) st = fb_stream_wait(r->dev, r->commst, x0->ev_ready);
  for (int j = 0; st == FB_OK && j < g->world; j++) {
    char *buf = j == g->rank ? own.ptr : rx.ptr;
    st = fb_broadcast(g, r->commst, -1, buf, part, r->pdt, j);
    for (int u = 0; st == FB_OK && u < r->model->nunits; u++) {
      const size_t b = (size_t)s->u[u].sl.shard * fb_psz(r);
      st = fb_copy_d2d(r->dev, r->commst, (char *)s->u[u].full.ptr + (size_t)j * b, buf, b);
      buf += b;
    }
  }
  for (int u = 0; st == FB_OK && u < r->model->nunits; u++) {
    st = fb_event_record(r->dev, s->u[u].ev_gather, r->commst);
    s->u[u].gathering = st == FB_OK;
  }
  fb_free(r->dev, &rx, r->commst);
  fb_free(r->dev, &own, r->commst);
  return st;
}

static bool by_broadcast(const fb_rank *r) { return !strcmp(r->cfg->param_sync, "broadcast"); }

fb_status fb_zero_step(fb_rank *r) {
  fb_zero_state *s = r->st;
  FB_TRY(fb_zero_fold_all(r));
  /* the shards need no zeroing: the next step's first reductions overwrite them */
  fb_rank v = shard_view(r); /* the bins over the shard group: every replica holds the same */
  FB_TRY(fb_slices_norm(&v, zero_slice));
  r->grad_norm = v.grad_norm;
  r->clip_coef = v.clip_coef;
  if (by_broadcast(r)) return zero_sync_broadcast(r, true);
  for (int i = 0; i < r->model->nunits; i++) FB_TRY(zero_gather(r, i, &s->u[i], true));
  return FB_OK;
}

fb_status fb_zero_state_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  /* slices are disjoint in a shard group: the same ranges save (the first replica's) and load */
  *out = NULL, *n = 0;
  if (save && !fb_mesh_saves(&((fb_zero_state *)r->st)->mesh)) return FB_OK;
  fb_rank v = shard_view(r);
  return fb_ranges_slices(&v, zero_slice, out, n);
}

/* After a checkpoint load: the replicas from the loaded slices, as after a step. */
fb_status fb_zero_state_loaded(fb_rank *r) {
  fb_zero_state *s = r->st;
  if (by_broadcast(r))
    FB_TRY(zero_sync_broadcast(r, false));
  else
    for (int i = 0; i < r->model->nunits; i++) FB_TRY(zero_gather(r, i, &s->u[i], false));
  FB_TRY(fb_stream_sync(r->dev, r->commst));
  for (int i = 0; i < r->model->nunits; i++) s->u[i].gathering = false;
  return FB_OK;
}

/* The fp32 masters, gathered into a temporary (the full parameters may be bf16). */
fb_status fb_zero_read_params(fb_rank *r, int u, float *host) {
  const fb_zero_state *s = r->st;
  return fb_slice_read(r, s->mesh.shard, &s->u[u].sl, r->model->units[u].numel, host);
}
