/* `fsdp2` (PyTorch FSDP2, fully_shard): per-parameter dim-0 sharding. Every parameter of a
 * unit is split on its first dimension across the W ranks, its rows padded up to a multiple of
 * W (DTensor Shard(0)); a rank keeps its rows of every parameter, concatenated per unit
 * (`S` elements: fp32 master, fp32 gradient accumulator, optimizer state). Per unit:
 *  - unshard: copy-in (the rank's shards, cast to the compute dtype, into one all-gather
 *    input), one all-gather into a rank-major output [rank][param shards], then copy-out on the
 *    compute stream into the unit's flat unsharded parameters (model order, what the kernels
 *    read); in forward the all-gather output is kept until the next unit's copy-out, as FSDP2
 *    keeps its AllGatherResult, otherwise the comm stream waits for the copy-out and frees it;
 *  - reduce: chunk_cat of the unit's gradient rows (padded, rank-major, cast to the reduce
 *    dtype) into a reduce-scatter input on the compute stream, one reduce-scatter on the comm
 *    stream (straight into the fp32 accumulator for the step's first fp32 reduction, else into
 *    an output); at the next unit's post-backward the compute stream waits for it, folds the
 *    output into the accumulator and the input and output are freed.
 * Every buffer is freed on the stream that allocated it after waits on the other streams'
 * events: no record_stream, no rate limiter. Reshard after forward for every block; the root
 * unit (embeddings, final norm, head) stays gathered from its forward to its backward (FSDP2's
 * root default). Mechanisms: ../shared/gpu-data/runtime-mechanisms.md, section 3.
 * What it does not model: FSDP2's host work per unit (no public per-hook figures), separate
 * copy-in / all-gather / reduce-scatter streams (one comm stream serves all three), the
 * in-place all-gather (its input is a slice of the output; here a separate buffer).
 * On a mesh (--mesh RxS: FSDP2 on a 2-D DeviceMesh, HSDP): everything above runs on the shard
 * group of S ranks (rows padded to a multiple of S), and each reduce-scatter's output is then
 * all-reduced across the replicas. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mesh.h"
#include "state_ranges.h"
#include "unit_gather.h"

typedef struct f2_unit {
  int64_t *soff;          /* [count + 1] offset of each parameter's shard inside the rank's S */
  int64_t S;              /* shard elements per rank: sum of ceil(rows / W) * cols */
  fb_buf p, g;            /* persistent fp32 shards: parameters, gradient accumulator */
  fb_optim_state optim;
  fb_buf ag_out;          /* all-gather output W*S (compute dtype), comm stream */
  fb_buf full;            /* unsharded parameters, unit flat layout (compute dtype) */
  fb_buf g_full;          /* unsharded gradients (compute dtype) */
  fb_buf g_acc;           /* no-reduce with bf16 compute: fp32 accumulated unsharded grads */
  fb_buf rs_in;           /* reduce-scatter input W*S (reduce dtype), compute stream */
  fb_buf rs_out;          /* reduce-scatter output S (reduce dtype), comm stream, folded later */
  bool fold_pending, fold_overwrite;
  fb_event *ev_ready, *ev_copyout, *ev_rs, *ev_fold;
} f2_unit;

typedef struct f2_state {
  f2_unit *u;
  fb_gather g;   /* the param group's lifecycle (unit_gather.h) */
  int held;      /* unit whose all-gather output forward keeps until the next copy-out, or -1 */
  int rs_prev;   /* unit whose reduce-scatter input waits to be freed, or -1 */
  fb_comm_mesh mesh; /* --mesh: the hooks run on its shard group (group_hook below) */
} f2_state;

static const fb_gather_ops gather_ops; /* the unshard hooks, below */

static int64_t rows_per_rank(const fb_rank *r, const fb_param *pp) {
  return (pp->rows + r->world - 1) / r->world;
}

/* Rows of parameter pp that rank c holds for real (the rest of its shard is padding). */
static int64_t real_rows(const fb_rank *r, const fb_param *pp, int c) {
  const int64_t q = rows_per_rank(r, pp), left = pp->rows - (int64_t)c * q;
  return left <= 0 ? 0 : left < q ? left : q;
}

static void f2_teardown(fb_rank *r) {
  f2_state *s = r->st;
  if (!s) return;
  for (int i = 0; s->u && i < r->model->nunits; i++) {
    f2_unit *x = &s->u[i];
    fb_buf *bufs[] = {&x->p,      &x->g,     &x->ag_out, &x->full,
                      &x->g_full, &x->g_acc, &x->rs_in,  &x->rs_out};
    for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++) fb_free(r->dev, bufs[b], NULL);
    fb_optim_free(r, &x->optim);
    fb_event *evs[] = {x->ev_ready, x->ev_copyout, x->ev_rs, x->ev_fold};
    for (int e = 0; e < 4; e++)
      if (evs[e]) r->dev->ops->event_destroy(r->dev, evs[e]);
    free(x->soff);
  }
  fb_gather_fini(&s->g, r);
  free(s->u);
  fb_mesh_close(&s->mesh);
  free(s);
  r->st = NULL;
}

/* The shard layout of unit i and its persistent state: the rank's real rows of every
 * parameter from the counter-based init, padding rows zero. */
static fb_status unit_init(fb_rank *r, int i) {
  f2_unit *x = &((f2_state *)r->st)->u[i];
  const fb_unit *un = &r->model->units[i];
  x->soff = calloc((size_t)un->count + 1, sizeof *x->soff);
  if (!x->soff) return FB_ERR(FB_ENOMEM, "out of host memory (fsdp2 layout)");
  for (int k = 0; k < un->count; k++) {
    const fb_param *pp = &r->model->params[un->first + k];
    x->soff[k + 1] = x->soff[k] + rows_per_rank(r, pp) * pp->cols;
  }
  x->S = x->soff[un->count];
  const size_t bytes = (size_t)x->S * 4;
  fb_kctx k = fb_rank_kctx(r, r->compute, i);
  FB_TRY(fb_alloc(r->dev, bytes, FB_MEM_PARAM_SHARD, "fsdp2.params.shard", &x->p));
  FB_TRY(fb_k_memset0(&k, "zero_params", x->p.ptr, bytes));
  for (int j = 0; j < un->count; j++) {
    const fb_param *pp = &r->model->params[un->first + j];
    const int64_t q = rows_per_rank(r, pp), n = real_rows(r, pp, r->rank) * pp->cols;
    FB_TRY(fb_materialize_range(r, i, pp->offset + (int64_t)r->rank * q * pp->cols, n,
                                (float *)x->p.ptr + x->soff[j]));
  }
  FB_TRY(fb_alloc(r->dev, bytes, FB_MEM_GRAD_SHARD, "fsdp2.grads.shard", &x->g));
  FB_TRY(fb_k_memset0(&k, "zero_grad", x->g.ptr, bytes));
  FB_TRY(fb_optim_alloc(r, x->S, "fsdp2.optim.shard", &x->optim));
  fb_event **evs[] = {&x->ev_ready, &x->ev_copyout, &x->ev_rs, &x->ev_fold};
  for (int e = 0; e < 4; e++) FB_TRY(r->dev->ops->event_create(r->dev, evs[e]));
  return FB_OK;
}

static fb_status f2_setup(fb_rank *r) {
  f2_state *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory (fsdp2 state)");
  s->held = s->rs_prev = -1;
  s->mesh = (fb_comm_mesh){.world = r->comm, .shard = r->comm};
  r->st = s;
  fb_status st = fb_mesh_open(r, false, &s->mesh);
  fb_rank v = fb_mesh_view(r, &s->mesh); /* the layout is the shard group's */
  s->u = st == FB_OK ? calloc((size_t)r->model->nunits, sizeof *s->u) : NULL;
  if (st == FB_OK && !s->u) st = FB_ERR(FB_ENOMEM, "out of host memory (fsdp2 units)");
  if (st == FB_OK) st = fb_gather_init(&s->g, &v, &gather_ops);
  for (int i = 0; st == FB_OK && i < r->model->nunits; i++) st = unit_init(&v, i);
  if (st != FB_OK) f2_teardown(r);
  return st;
}

/* ---- copies between the flat unit layout and the rank-major collective buffers ------------ */

/* dst (dt, n) = src (st): a copy when the dtypes agree, else a cast; src NULL: zeros. */
static fb_status piece(const fb_kctx *k, const char *name, char *dst, fb_dtype dt,
                       const char *src, fb_dtype st, int64_t n) {
  if (n <= 0) return FB_OK;
  if (!src) return fb_k_memset0(k, name, dst, (size_t)n * fb_dtype_size(dt));
  if (dt == st) return fb_k_copy(k, name, dst, src, (size_t)n * fb_dtype_size(dt));
  return fb_k_cast(k, dst, dt, src, st, (size_t)n);
}

/* Between unit i's flat layout `flat` (fdt) and the rank-major `rm` (bdt, W blocks of S, block
 * c holding rows [c*q, (c+1)*q) of every parameter), on the compute stream. to_flat: the
 * copy-out (real rows); else chunk_cat (rows, then zero padding). PyTorch runs each as one
 * kernel (split_with_sizes_copy, _chunk_cat): the sim prices one op of the same bytes; an
 * executing device moves it piece by piece. */
static fb_status transpose(fb_rank *r, int i, bool to_flat, char *flat, fb_dtype fdt, char *rm,
                           fb_dtype bdt) {
  const f2_unit *x = &((f2_state *)r->st)->u[i];
  const fb_unit *un = &r->model->units[i];
  const char *name = to_flat ? "fsdp2.copy_out" : "fsdp2.chunk_cat";
  const size_t fs = fb_dtype_size(fdt), bs = fb_dtype_size(bdt);
  fb_kctx k = fb_rank_kctx(r, r->compute, i);
  if (r->dev->simulated) /* both kernels move the padded W*S elements */
    return to_flat ? piece(&k, name, flat, fdt, rm, bdt, (int64_t)r->world * x->S)
                   : piece(&k, name, rm, bdt, flat, fdt, (int64_t)r->world * x->S);
  for (int c = 0; c < r->world; c++)
    for (int j = 0; j < un->count; j++) {
      const fb_param *pp = &r->model->params[un->first + j];
      const int64_t q = rows_per_rank(r, pp), n = real_rows(r, pp, c) * pp->cols;
      char *f = flat + (size_t)(pp->offset + (int64_t)c * q * pp->cols) * fs;
      char *b = rm + (size_t)((int64_t)c * x->S + x->soff[j]) * bs;
      if (to_flat) FB_TRY(piece(&k, name, f, fdt, b, bdt, n));
      if (to_flat) continue;
      FB_TRY(piece(&k, name, b, bdt, f, fdt, n));
      FB_TRY(piece(&k, name, b + (size_t)n * bs, bdt, NULL, bdt, q * pp->cols - n));
    }
  return FB_OK;
}

/* ---- parameters: copy-in, all-gather, copy-out ------------------------------------------- */

/* The unshard hook (unit_gather.h): unit i's copy-in and all-gather on the comm stream. */
static fb_status issue_gather(fb_rank *r, int i, fb_event *done) {
  f2_unit *x = &((f2_state *)r->st)->u[i];
  const size_t ps = fb_psz(r);
  fb_buf in = {0};
  /* the comm stream must see the shard as the compute stream left it (after the optimizer) */
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  FB_TRY(fb_alloc_on(r->dev, r->commst, (size_t)x->S * ps, FB_MEM_COMM, "fsdp2.ag_input", &in));
  fb_kctx k = fb_rank_kctx(r, r->commst, i);
  fb_status st = piece(&k, "fsdp2.copy_in", in.ptr, r->pdt, x->p.ptr, FB_F32, x->S);
  if (st == FB_OK)
    st = fb_alloc_on(r->dev, r->commst, (size_t)x->S * r->world * ps, FB_MEM_COMM,
                     "fsdp2.ag_output", &x->ag_out);
  if (st == FB_OK)
    st = fb_all_gather(r->comm, r->commst, i, in.ptr, x->ag_out.ptr, (size_t)x->S, r->pdt);
  if (st == FB_OK) st = fb_event_record(r->dev, done, r->commst);
  fb_free(r->dev, &in, r->commst);
  return st;
}

/* Frees unit i's all-gather output once the comm stream has waited for its copy-out. */
static fb_status drop_ag_out(fb_rank *r, int i) {
  f2_unit *x = &((f2_state *)r->st)->u[i];
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_copyout));
  fb_free(r->dev, &x->ag_out, r->commst);
  return FB_OK;
}

/* The all-gather output forward kept for the next unit: freed now. */
static fb_status flush_held(fb_rank *r) {
  f2_state *s = r->st;
  const int h = s->held;
  s->held = -1;
  return h >= 0 ? drop_ag_out(r, h) : FB_OK;
}

/* Once the compute stream waited for unit i's all-gather: copy out into the unsharded
 * parameters. Forward keeps the all-gather output until the next unit's copy-out. */
static fb_status copy_out(fb_rank *r, int i, bool forward) {
  f2_state *s = r->st;
  f2_unit *x = &s->u[i];
  FB_TRY(flush_held(r));
  FB_TRY(fb_alloc(r->dev, (size_t)r->model->units[i].numel * fb_psz(r), FB_MEM_PARAM_FULL,
                  "fsdp2.unsharded_params", &x->full));
  FB_TRY(transpose(r, i, true, x->full.ptr, r->pdt, x->ag_out.ptr, r->pdt));
  FB_TRY(fb_event_record(r->dev, x->ev_copyout, r->compute));
  if (forward) s->held = i;
  else FB_TRY(drop_ag_out(r, i));
  return FB_OK;
}

static void *unsharded_params(fb_rank *r, int i) { return ((f2_state *)r->st)->u[i].full.ptr; }

/* Frees unit i's unsharded parameters (compute stream: allocated and used there). */
static fb_status reshard(fb_rank *r, int i) {
  fb_free(r->dev, &((f2_state *)r->st)->u[i].full, r->compute);
  return FB_OK;
}

static const fb_gather_ops gather_ops = {
    .issue = issue_gather, .landed = copy_out, .params = unsharded_params, .reshard = reshard};

static fb_status release(fb_rank *r, int i) {
  return fb_gather_release(&((f2_state *)r->st)->g, r, i);
}

static fb_status f2_pre_forward(fb_rank *r, int i) {
  return fb_gather_pre_forward(&((f2_state *)r->st)->g, r, i);
}

/* The root (unit 0) is not resharded after forward; neither is anything under ZeRO-2
 * (--reshard-after-forward false) or no-reshard accumulation. */
static fb_status f2_post_forward(fb_rank *r, int i) {
  const bool keep = i == 0 || !r->cfg->reshard_after_forward ||
                    r->cfg->accum == FB_ACCUM_NO_RESHARD;
  return keep ? FB_OK : release(r, i);
}

/* ---- gradients: chunk_cat, reduce-scatter, fold ------------------------------------------ */

/* no-reduce keeps unsharded gradients across micro-steps; with a low-precision compute dtype
 * and an fp32 reduce dtype FSDP2 keeps them upcast to fp32 (to_accumulated_grad_if_needed). */
static bool upcast_accum(const fb_rank *r) {
  return r->cfg->accum == FB_ACCUM_NO_REDUCE && r->n_micro > 1 && r->pdt != r->rdt &&
         r->rdt == FB_F32;
}

static fb_status f2_pre_backward(fb_rank *r, int i) {
  f2_state *s = r->st;
  f2_unit *x = &s->u[i];
  FB_TRY(flush_held(r)); /* the end of forward */
  FB_TRY(fb_gather_pre_backward(&s->g, r, i));
  if (x->g_full.ptr) { /* no-reduce, micro-step > 0: accumulate into the kept gradients */
    r->view[i].grads = x->g_full.ptr;
    return FB_OK;
  }
  FB_TRY(fb_alloc(r->dev, (size_t)r->model->units[i].numel * fb_psz(r), FB_MEM_GRAD_FULL,
                  "fsdp2.unsharded_grads", &x->g_full));
  r->view[i].grads = x->g_full.ptr;
  fb_kctx k = fb_rank_kctx(r, r->compute, i);
  return fb_k_memset0(&k, "zero_grad", x->g_full.ptr, x->g_full.bytes);
}

/* The compute stream waits for the previous unit's reduce-scatter (FSDP2 does so before it
 * drops that reduction's input), folds its output into the fp32 accumulator when it did not
 * land there, and frees both buffers on the streams that allocated them. */
static fb_status retire_prev(fb_rank *r) {
  f2_state *s = r->st;
  if (s->rs_prev < 0) return FB_OK;
  const int i = s->rs_prev;
  f2_unit *x = &s->u[i];
  s->rs_prev = -1;
  FB_TRY(fb_stream_wait(r->dev, r->compute, x->ev_rs));
  fb_free(r->dev, &x->rs_in, r->compute);
  if (!x->fold_pending) return FB_OK;
  x->fold_pending = false;
  FB_TRY(fb_fold_reduced(r, i, x->g.ptr, x->rs_out.ptr, x->S, x->fold_overwrite));
  FB_TRY(fb_event_record(r->dev, x->ev_fold, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_fold));
  fb_free(r->dev, &x->rs_out, r->commst);
  return FB_OK;
}

/* Reduce-scatters unit i's gradient `g` (gdt): chunk_cat into the input, one reduce-scatter
 * into the accumulator (first reduction of the step in fp32) or into an output folded there
 * at the next retire_prev (in FSDP2 the reduce-scatter stream adds it; a cpu device runs
 * kernels on the issuing thread, so the fold is ordered on the compute stream instead). */
static fb_status reduce(fb_rank *r, int i, const void *g, fb_dtype gdt) {
  f2_state *s = r->st;
  f2_unit *x = &s->u[i];
  const size_t rs = fb_dtype_size(r->rdt);
  const bool first = r->micro == 0 || r->cfg->accum == FB_ACCUM_NO_REDUCE;
  const bool direct = first && r->rdt == FB_F32;
  FB_TRY(retire_prev(r));
  FB_TRY(fb_alloc(r->dev, (size_t)x->S * r->world * rs, FB_MEM_COMM, "fsdp2.rs_input",
                  &x->rs_in));
  FB_TRY(transpose(r, i, false, (char *)g, gdt, x->rs_in.ptr, r->rdt));
  fb_free(r->dev, &x->g_full, r->compute);
  fb_free(r->dev, &x->g_acc, r->compute);
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  if (!direct)
    FB_TRY(fb_alloc_on(r->dev, r->commst, (size_t)x->S * rs, FB_MEM_COMM, "fsdp2.rs_output",
                       &x->rs_out));
  void *dst = direct ? x->g.ptr : x->rs_out.ptr;
  /* r is the shard group's view (group_hook): on a mesh, then across the replicas */
  FB_TRY(fb_reduce_scatter_mesh(&s->mesh, r->commst, i, x->rs_in.ptr, dst, (size_t)x->S, r->rdt));
  FB_TRY(fb_all_reduce_replicas(&s->mesh, r->commst, i, dst, (size_t)x->S, r->rdt));
  FB_TRY(fb_event_record(r->dev, x->ev_rs, r->commst));
  x->fold_pending = !direct;
  x->fold_overwrite = first;
  s->rs_prev = i;
  return FB_OK;
}

static fb_status f2_post_backward(fb_rank *r, int i) {
  f2_unit *x = &((f2_state *)r->st)->u[i];
  const fb_accum_mode mode = r->cfg->accum;
  const bool last_micro = r->micro == r->n_micro - 1;
  r->view[i].grads = NULL;
  if (!(mode == FB_ACCUM_NO_RESHARD && !last_micro)) FB_TRY(release(r, i));
  if (upcast_accum(r)) { /* fp32 accumulated unsharded gradients */
    if (!x->g_acc.ptr)
      FB_TRY(fb_alloc(r->dev, (size_t)r->model->units[i].numel * 4, FB_MEM_GRAD_FULL,
                      "fsdp2.grads.accumulated", &x->g_acc));
    FB_TRY(fb_fold_dtype(r, i, x->g_acc.ptr, x->g_full.ptr, r->pdt,
                         r->model->units[i].numel, r->micro == 0));
    fb_free(r->dev, &x->g_full, r->compute);
  }
  if (mode == FB_ACCUM_NO_REDUCE && !last_micro) return FB_OK; /* keep unsharded grads */
  if (x->g_acc.ptr) FB_TRY(reduce(r, i, x->g_acc.ptr, FB_F32));
  else FB_TRY(reduce(r, i, x->g_full.ptr, r->pdt));
  /* the micro-step ends with the root: the compute stream waits for the last reduction
   * (finalize_backward), which follows every earlier one on the comm stream */
  return i == 0 ? retire_prev(r) : FB_OK;
}

/* ---- optimizer and readback -------------------------------------------------------------- */

static fb_status f2_step(fb_rank *r) {
  f2_state *s = r->st;
  const fb_model *m = r->model;
  FB_TRY(retire_prev(r));
  FB_TRY(fb_norm_begin(r)); /* padding rows are zero: each element counted once */
  for (int i = 0; i < m->nunits; i++) FB_TRY(fb_norm_add(r, s->u[i].g.ptr, s->u[i].S));
  FB_TRY(fb_norm_finish(r, true));
  for (int i = 0; i < m->nunits; i++) {
    f2_unit *x = &s->u[i];
    const fb_unit *un = &m->units[i];
    for (int j = 0; j < un->count; j++) {
      const fb_param *pp = &m->params[un->first + j];
      const int64_t n = real_rows(r, pp, r->rank) * pp->cols, o = x->soff[j];
      const int64_t start = pp->offset + (int64_t)r->rank * rows_per_rank(r, pp) * pp->cols;
      if (n > 0)
        FB_TRY(fb_optim_update(r, i, start, n, (float *)x->p.ptr + o, (const float *)x->g.ptr + o,
                               &x->optim, o));
    }
  }
  return FB_OK;
}

/* Checkpoints: the rank's real rows of every parameter (disjoint in a shard group: save =
 * load; on a mesh the first replica saves). */
static fb_status f2_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  f2_state *s = r->st;
  const fb_model *m = r->model;
  int cap = 0;
  *out = NULL, *n = 0;
  if (save && !fb_mesh_saves(&s->mesh)) return FB_OK;
  for (int i = 0; i < m->nunits; i++) {
    f2_unit *x = &s->u[i];
    for (int j = 0; j < m->units[i].count; j++) {
      const fb_param *pp = &m->params[m->units[i].first + j];
      const int64_t cnt = real_rows(r, pp, r->rank) * pp->cols, o = x->soff[j];
      const int64_t start = pp->offset + (int64_t)r->rank * rows_per_rank(r, pp) * pp->cols;
      fb_status st = fb_ranges_push(out, n, &cap, i, start, cnt, (float *)x->p.ptr + o, &x->optim, o);
      if (st != FB_OK) {
        free(*out);
        return st;
      }
    }
  }
  return FB_OK;
}

/* Host: the unit's flat layout (gaps zero) from the rank-major gathered shards. */
static void unpack_host(const fb_rank *r, int i, const float *rm, float *host) {
  const f2_unit *x = &((f2_state *)r->st)->u[i];
  const fb_unit *un = &r->model->units[i];
  memset(host, 0, (size_t)un->numel * sizeof *host);
  for (int c = 0; c < r->world; c++)
    for (int j = 0; j < un->count; j++) {
      const fb_param *pp = &r->model->params[un->first + j];
      const int64_t q = rows_per_rank(r, pp), n = real_rows(r, pp, c) * pp->cols;
      memcpy(host + pp->offset + (int64_t)c * q * pp->cols, rm + (int64_t)c * x->S + x->soff[j],
             (size_t)n * sizeof *host);
    }
}

/* Readback (not part of the algorithm, so not recorded): all-gather the fp32 shards, rank 0
 * copies them to the host and unpacks them there. */
static fb_status f2_read_params(fb_rank *r, int i, float *host) {
  f2_unit *x = &((f2_state *)r->st)->u[i];
  const size_t n = (size_t)x->S * r->world;
  fb_buf all = {0};
  float *h = host ? malloc(n * sizeof *h) : NULL;
  if (host && !h) return FB_ERR(FB_ENOMEM, "out of host memory (fsdp2 readback)");
  fb_status st = fb_alloc(r->dev, n * 4, FB_MEM_TEMP, "fsdp2.readback", &all);
  if (st == FB_OK) st = fb_stream_sync(r->dev, r->compute); /* the optimizer's writes */
  if (st == FB_OK)
    st = fb_comm_unrecorded(r->comm, r->commst, FB_COLL_ALL_GATHER, x->p.ptr, all.ptr,
                            (size_t)x->S, FB_F32, 0);
  if (st == FB_OK) st = fb_stream_sync(r->dev, r->commst);
  if (st == FB_OK && host) st = fb_copy_d2h(r->dev, r->commst, h, all.ptr, n * 4);
  if (st == FB_OK && host) unpack_host(r, i, h, host);
  fb_free(r->dev, &all, NULL);
  free(h);
  return st;
}

/* ---- the hooks on the shard group ----------------------------------------------------------
 * Every hook above reads r->rank, r->world and r->comm as its shard group's (mesh.h): the
 * executor's rank is handed to them as that view (without --mesh: r itself, unchanged). */

static fb_status group_hook(fb_rank *r, int i, fb_status (*hook)(fb_rank *, int)) {
  fb_rank v = fb_mesh_view(r, &((f2_state *)r->st)->mesh);
  return hook(&v, i);
}
static fb_status g_pre_forward(fb_rank *r, int i) { return group_hook(r, i, f2_pre_forward); }
static fb_status g_post_forward(fb_rank *r, int i) { return group_hook(r, i, f2_post_forward); }
static fb_status g_pre_backward(fb_rank *r, int i) { return group_hook(r, i, f2_pre_backward); }
static fb_status g_post_backward(fb_rank *r, int i) { return group_hook(r, i, f2_post_backward); }
static fb_status g_read_params(fb_rank *r, int i, float *host) {
  fb_rank v = fb_mesh_view(r, &((f2_state *)r->st)->mesh);
  return f2_read_params(&v, i, host);
}

static fb_status g_step(fb_rank *r) {
  fb_rank v = fb_mesh_view(r, &((f2_state *)r->st)->mesh);
  fb_status st = f2_step(&v);
  r->grad_norm = v.grad_norm;
  r->clip_coef = v.clip_coef;
  return st;
}

static fb_status g_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  fb_rank v = fb_mesh_view(r, &((f2_state *)r->st)->mesh);
  return f2_ranges(&v, save, out, n);
}

const fb_strategy fb_strategy_fsdp2 = {
    .name = "fsdp2",
    .summary = "per-parameter dim-0 shards (FSDP2): copy-in, all-gather, copy-out, chunk_cat",
    .setup = f2_setup,
    .teardown = f2_teardown,
    .pre_forward = g_pre_forward,
    .post_forward = g_post_forward,
    .pre_backward = g_pre_backward,
    .post_backward = g_post_backward,
    .optimizer_step = g_step,
    .read_params = g_read_params,
    /* runtime-mechanisms.md section 3 names FSDP2's per-unit host work (hooks, foreach copies,
     * k setattrs, DTensor views) but gives no figure for it, and FSDP2 has no rate limiter:
     * not modelled (only op dispatch, host_op_us) */
    .host = NULL,
    .tunes_prefetch = true,
    .tunes_reshard = true,
    .accum_modes = 1u << FB_ACCUM_NO_RESHARD | 1u << FB_ACCUM_NO_REDUCE,
    .shards_all = true,
    .mesh = true,
    .state_ranges = g_ranges,
    .memory = "16P'/W, P' = sum over parameters of rows padded to a multiple of W x cols; + per "
              "unit in flight: all-gather input P/W and output P, unsharded params P",
};
