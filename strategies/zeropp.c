/* `zeropp` (DeepSpeed ZeRO++, arXiv 2306.10209): ZeRO-3 with three switches, each on its own.
 * The base is ZeRO-3 as DeepSpeed partitions it: every unit flat, padded to a multiple of 2W
 * and sliced 1/W per rank (fp32 masters, gradient accumulator and optimizer state of the
 * slice); an all-gather before a unit's forward and backward, a reduce-scatter of its gradient
 * after the backward, the update on the slice. With the switches off it computes what `zero3`
 * does (inter-tensor ownership there; the same sums in rank order, so the same bits).
 *
 *  --zeropp-quant-weights (qwZ): the forward all-gather carries int8. Each rank quantises its
 *    fp32 slice in blocks of QW_GROUP elements, symmetric, one fp32 scale a block (scale =
 *    absmax/127, q = rint(x/scale); engine/ops/elementwise.h); the int8 values and the scales
 *    are all-gathered, and every rank dequantises the whole gathered buffer with the same
 *    kernel, its own slice included, so every rank computes with the same weights.
 *  --zeropp-hpz S (hpZ): after each forward gather a rank keeps a secondary copy of 1/S of the
 *    unit's gathered (compute-dtype) weights, sliced over its group of S consecutive ranks (the
 *    node); every later gather of the unit before the next optimizer step (the backward's, and
 *    later micro-steps' forwards) is an all-gather of those secondary slices inside the group.
 *    Persistent, in its own memory category (param_secondary): 2 bytes x P/S in bf16.
 *  --zeropp-quant-grads (qgZ): the gradient reduce-scatter becomes the paper's hierarchical
 *    all-to-all in int4: each rank quantises its unit gradient in blocks of QG_GROUP (scale =
 *    absmax/7), its W slices reordered so that the slices bound for one node peer are
 *    contiguous; all-to-all inside the node; each rank dequantises what its S peers sent and
 *    sums it (in peer order, fp32): the node's partial sums of the N = W/S slices owned by the
 *    ranks at its own position in every node; these are quantised to int4 again and exchanged
 *    by an all-to-all across the nodes (the ranks S apart); dequantise and sum (node order)
 *    gives the rank's reduced slice. Node size: hpZ's S when set, else the sim profile's
 *    devices per node (when it divides the world), else the whole world (one all-to-all).
 *
 * The host, as DeepSpeed throttles it in two places (runtime/zero/partitioned_param_coordinator.py
 * fetch_sub_module, __max_ongoing_fetch_events; runtime/zero/stage3.py, the reduce's
 * param_reduce_events; both 2, hard-coded until PR #7945 made them configurable): every
 * fetch waited for and every gradient reduction records an event on the comm stream, and
 * before the next one the host synchronizes on the oldest when more than 2 are outstanding.
 * So the host runs at most three fetches (reductions) ahead of the gathers (reductions);
 * without it a host that runs ahead allocates every unit's gathered buffer long before its
 * compute (an 18B GPT on 384 V100s: 31.6 GiB reserved for 5.2 GiB allocated, cudaMalloc
 * retries every step; with it 10.5 GiB and none).
 *
 * Group sizes and scales follow DeepSpeed's code (the paper's block-based quantisation, as
 * DeepSpeed implements it):
 *  - qwZ: CUDAQuantizer (runtime/zero/partition_parameters.py) sizes groups per tensor to at
 *    most 8000 elements ("the optimal size is 4k"), 16k hard limit, 8 bits, Symmetric, fp32
 *    scales: we use 4096.
 *  - qgZ: all_to_all_quant_reduce (runtime/comm/coalesced_collectives.py) quantises with
 *    max(rows, cols, W) groups per gradient tensor, 4 bits, Symmetric, fp32 scales, i.e.
 *    blocks of min(rows, cols) elements (1024-4096 on Llama-3-8B's matrices); flat units have
 *    no rows: we use 2048. DeepSpeed averages; we sum (the loss is scaled, as everywhere here).
 * Determinism: quantisation is per block, sums run in fixed peer order: the same bits every
 * run, and every rank holds the same gathered weights.
 * Streams: the quantise and dequantise kernels run on the comm stream, between its
 * collectives (on the cpu device a kernel on a worker stream waits for the stream's earlier
 * work first); on sim they cost the bytes they move (engine/device/kernels.c).
 * What it does not do: accumulation modes other than reduce, DeepSpeed's per-tensor
 * grouping, a quantised secondary copy (it stays in the compute dtype here; not checked
 * against DeepSpeed's hpZ with qwZ), LoCo's error feedback. */
#include <assert.h>
#include <stdlib.h>

#include "../engine/sim/hardware.h"
#include "common.h"
#include "state_ranges.h"
#include "unit_gather.h"

enum { QW_GROUP = 4096, QW_BITS = 8, QG_GROUP = 2048, QG_BITS = 4 };

typedef struct zpp_unit {
  fb_slice sl;           /* 1/W of the unit: masters, gradient accumulator, optimizer state */
  fb_buf sec;            /* hpZ: 1/S of the gathered unit (compute dtype) */
  bool sec_valid;        /* sec holds this step's weights (set by a forward gather) */
  fb_buf p_full, g_full; /* transient: gathered parameters, unit gradient (compute dtype) */
  fb_buf g_cast;         /* mixed precision: the gradient in the reduce dtype */
  fb_buf red_tmp;        /* a reduction's output, folded into sl.g later */
  fb_dtype red_dt;       /* red_tmp's dtype (rdt; fp32 after qgZ) */
  bool red_pending, acc_pending, acc_overwrite;
  fb_event *ev_red, *ev_ready;
} zpp_unit;

/* DeepSpeed's host throttle: a ring of events on the comm stream, at most 2 outstanding
 * before the host synchronizes on the oldest (file comment). */
enum { THROTTLE_EVENTS = 3 };
typedef struct zpp_ring {
  fb_event *e[THROTTLE_EVENTS];
  int head, len;
} zpp_ring;

typedef struct zpp_state {
  zpp_unit *u;
  fb_gather g;
  zpp_ring fetch, reduce; /* __ongoing_fetch_events, param_reduce_events */
  int node, nodes;      /* ranks per node group, node groups (node * nodes = W) */
  fb_comm *intra;       /* the node group (r->comm when it is the world) */
  fb_comm *inter;       /* the ranks `node` apart (NULL with one node) */
} zpp_state;

static const fb_gather_ops gather_ops;

static fb_slice *slice_of(fb_rank *r, int i) { return &((zpp_state *)r->st)->u[i].sl; }

static void zpp_teardown(fb_rank *r) {
  zpp_state *s = r->st;
  if (!s) return;
  for (int i = 0; s->u && i < r->model->nunits; i++) {
    zpp_unit *x = &s->u[i];
    fb_slice_free(r, &x->sl);
    fb_buf *bufs[] = {&x->sec, &x->p_full, &x->g_full, &x->g_cast, &x->red_tmp};
    for (int b = 0; b < 5; b++) fb_free(r->dev, bufs[b], NULL);
    if (x->ev_red) r->dev->ops->event_destroy(r->dev, x->ev_red);
    if (x->ev_ready) r->dev->ops->event_destroy(r->dev, x->ev_ready);
  }
  fb_gather_fini(&s->g, r);
  for (int e = 0; e < THROTTLE_EVENTS; e++) {
    if (s->fetch.e[e]) r->dev->ops->event_destroy(r->dev, s->fetch.e[e]);
    if (s->reduce.e[e]) r->dev->ops->event_destroy(r->dev, s->reduce.e[e]);
  }
  if (s->intra && s->intra != r->comm) fb_comm_destroy(s->intra);
  if (s->inter) fb_comm_destroy(s->inter);
  free(s->u);
  free(s);
  r->st = NULL;
}

/* The node group size: --zeropp-hpz, else the sim profile's node, else the world. */
static fb_status node_size(const fb_rank *r, int *node) {
  const int W = r->world, S = r->cfg->zeropp_hpz;
  if (S == 1 || (S > 1 && W % S))
    return FB_ERR(FB_EUSAGE, "--zeropp-hpz: %d is not allowed with --world %d (want 0 = off, or "
                  "a divisor of the world from 2)", S, W);
  const int dpn = r->dev->simulated && r->dev->hw ? r->dev->hw->devices_per_node : 0;
  *node = S > 1 ? S : dpn > 1 && dpn < W && W % dpn == 0 ? dpn : W;
  return FB_OK;
}

/* Node groups of `node` consecutive ranks and the groups of ranks `node` apart. */
static fb_status setup_groups(fb_rank *r, zpp_state *s) {
  FB_TRY(node_size(r, &s->node));
  s->nodes = r->world / s->node;
  s->intra = r->comm;
  if (!r->cfg->zeropp_hpz && !r->cfg->zeropp_quant_grads) return FB_OK;
  FB_TRY(fb_stream_sync(r->dev, r->commst)); /* a split is collective: nothing in flight */
  if (s->node < r->world) FB_TRY(fb_comm_split_strided(r->comm, s->node, 1, &s->intra));
  if (s->nodes > 1) FB_TRY(fb_comm_split_strided(r->comm, s->nodes, s->node, &s->inter));
  return FB_OK;
}

static fb_status unit_setup(fb_rank *r, zpp_state *s, int i) {
  zpp_unit *x = &s->u[i];
  /* 2W: qgZ packs two int4 values a byte, so every slice has an even length */
  FB_TRY(fb_slice_init_padded(r, i, &x->sl, 2 * (int64_t)r->world));
  if (r->cfg->zeropp_hpz)
    FB_TRY(fb_alloc(r->dev, (size_t)(x->sl.padded / s->node) * fb_psz(r),
                    FB_MEM_PARAM_SECONDARY, "zeropp.hpz_secondary", &x->sec));
  FB_TRY(r->dev->ops->event_create(r->dev, &x->ev_red));
  return r->dev->ops->event_create(r->dev, &x->ev_ready);
}

static fb_status zpp_setup(fb_rank *r) {
  if (r->cfg->accum != FB_ACCUM_REDUCE)
    return FB_ERR(FB_EUSAGE, "--accum: '%s' is not allowed with --strategy zeropp (want reduce)",
                  r->cfg->accum == FB_ACCUM_NO_RESHARD ? "no-reshard" : "no-reduce");
  zpp_state *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory (zeropp state)");
  r->st = s;
  fb_status st = FB_OK;
  s->u = calloc((size_t)r->model->nunits, sizeof *s->u);
  if (!s->u) {
    st = FB_ERR(FB_ENOMEM, "out of host memory (zeropp units)");
    goto fail;
  }
  FB_CHECK_GOTO(st, setup_groups(r, s), fail);
  FB_CHECK_GOTO(st, fb_gather_init(&s->g, r, &gather_ops), fail);
  for (int e = 0; e < THROTTLE_EVENTS; e++) {
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &s->fetch.e[e]), fail);
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &s->reduce.e[e]), fail);
  }
  for (int i = 0; i < r->model->nunits; i++) FB_CHECK_GOTO(st, unit_setup(r, s, i), fail);
  return FB_OK;
fail:
  zpp_teardown(r);
  return st;
}

/* ---- parameters: the forward gather (plain or qwZ), the hpZ gather --------------------------- */

/* qwZ: quantise the slice, all-gather int8 values and fp32 scales, dequantise everything. */
static fb_status gather_int8(fb_rank *r, int i, zpp_unit *x) {
  const int64_t sh = x->sl.shard, ns = (int64_t)fb_quant_nscales(1, (size_t)sh, QW_GROUP);
  fb_buf q = {0}, sc = {0};
  fb_kctx k = fb_rank_kctx(r, r->commst, i);
  FB_TRY(fb_alloc_on(r->dev, r->commst, (size_t)x->sl.padded, FB_MEM_COMM, "zeropp.qw_int8", &q));
  fb_status st = fb_alloc_on(r->dev, r->commst, (size_t)(ns * r->world) * 4, FB_MEM_COMM,
                             "zeropp.qw_scales", &sc);
  char *qr = (char *)q.ptr + r->rank * sh;
  float *sr = (float *)sc.ptr + r->rank * ns;
  if (st == FB_OK)
    st = fb_k_quantize(&k, qr, sr, x->sl.p.ptr, FB_F32, 1, (size_t)sh, QW_GROUP, QW_BITS, 1);
  if (st == FB_OK) st = fb_all_gather(r->comm, r->commst, i, qr, q.ptr, (size_t)sh, FB_I8);
  if (st == FB_OK)
    st = fb_all_gather(r->comm, r->commst, i, sr, sc.ptr, (size_t)ns, FB_F32);
  if (st == FB_OK)
    st = fb_k_dequant_sum(&k, x->p_full.ptr, r->pdt, q.ptr, sc.ptr, 1, (size_t)x->sl.padded,
                          (size_t)sh, QW_GROUP, QW_BITS);
  fb_free(r->dev, &q, r->commst);
  fb_free(r->dev, &sc, r->commst);
  return st;
}

/* The slice in the compute dtype, all-gathered (in place where a cast is needed). */
static fb_status gather_plain(fb_rank *r, int i, zpp_unit *x) {
  const size_t ps = fb_psz(r);
  char *mine = (char *)x->p_full.ptr + (size_t)(r->rank * x->sl.shard) * ps;
  const void *send = x->sl.p.ptr;
  if (r->pdt != FB_F32) {
    fb_kctx k = fb_rank_kctx(r, r->commst, i);
    FB_TRY(fb_k_cast(&k, mine, r->pdt, x->sl.p.ptr, FB_F32, (size_t)x->sl.shard));
    send = mine;
  }
  return fb_all_gather(r->comm, r->commst, i, send, x->p_full.ptr, (size_t)x->sl.shard, r->pdt);
}

/* hpZ: this rank's 1/S of the gathered unit, kept for the gathers until the next step. Every
 * gather of the unit after its first forward gather of a step uses it: the backward's, the
 * head stage's gather of the root, and the forwards of later micro-steps (the same values the
 * primary gather would give again: dequantisation is deterministic). */
static fb_status keep_secondary(fb_rank *r, int i, zpp_state *s, zpp_unit *x) {
  const int64_t n = x->sl.padded / s->node;
  const size_t ps = fb_psz(r);
  fb_kctx k = fb_rank_kctx(r, r->commst, i);
  const char *src = (const char *)x->p_full.ptr + (size_t)(s->intra->rank * n) * ps;
  FB_TRY(fb_k_copy(&k, "zeropp.hpz_keep", x->sec.ptr, src, (size_t)n * ps));
  x->sec_valid = true;
  return FB_OK;
}

static fb_status issue_gather(fb_rank *r, int i, fb_event *done) {
  zpp_state *s = r->st;
  zpp_unit *x = &s->u[i];
  FB_TRY(fb_alloc_on(r->dev, r->commst, (size_t)x->sl.padded * fb_psz(r), FB_MEM_PARAM_FULL,
                     "zeropp.gathered", &x->p_full));
  /* the comm stream must see the slice as the optimizer left it */
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  if (x->sec_valid) { /* hpZ: the backward's gather never leaves the node group */
    FB_TRY(fb_all_gather(s->intra, r->commst, i, x->sec.ptr, x->p_full.ptr,
                         (size_t)(x->sl.padded / s->node), r->pdt));
  } else {
    FB_TRY(r->cfg->zeropp_quant_weights ? gather_int8(r, i, x) : gather_plain(r, i, x));
    if (r->cfg->zeropp_hpz) FB_TRY(keep_secondary(r, i, s, x));
  }
  return fb_event_record(r->dev, done, r->commst);
}

static void *gathered_params(fb_rank *r, int i) { return ((zpp_state *)r->st)->u[i].p_full.ptr; }

static fb_status reshard(fb_rank *r, int i) {
  fb_free(r->dev, &((zpp_state *)r->st)->u[i].p_full, r->compute);
  return FB_OK;
}

/* The throttle before a fetch's wait or a reduction: with the ring full, the host
 * synchronizes on its oldest event. */
static fb_status ring_room(fb_rank *r, zpp_ring *q) {
  if (q->len < THROTTLE_EVENTS) return FB_OK;
  FB_TRY(fb_event_sync(r->dev, q->e[q->head]));
  q->head = (q->head + 1) % THROTTLE_EVENTS;
  q->len--;
  return FB_OK;
}

/* Records the next event of the ring on the comm stream (its tail: all issued so far). */
static fb_status ring_push(fb_rank *r, zpp_ring *q) {
  assert(q->len < THROTTLE_EVENTS);
  FB_TRY(fb_event_record(r->dev, q->e[(q->head + q->len) % THROTTLE_EVENTS], r->commst));
  q->len++;
  return FB_OK;
}

/* A fetch waited for (the gather hook's `landed`: the compute stream waits for unit i's
 * gather, before the next prefetch is issued): DeepSpeed's fetch throttle. */
static fb_status throttle_fetch(fb_rank *r, int i, bool forward) {
  (void)i, (void)forward;
  zpp_state *s = r->st;
  FB_TRY(ring_room(r, &s->fetch));
  return ring_push(r, &s->fetch);
}

static const fb_gather_ops gather_ops = {.issue = issue_gather,
                                         .landed = throttle_fetch,
                                         .params = gathered_params,
                                         .reshard = reshard};

static fb_status zpp_pre_forward(fb_rank *r, int i) {
  return fb_gather_pre_forward(&((zpp_state *)r->st)->g, r, i);
}

static fb_status zpp_post_forward(fb_rank *r, int i) {
  return r->cfg->reshard_after_forward ? fb_gather_release(&((zpp_state *)r->st)->g, r, i)
                                       : FB_OK;
}

/* ---- gradients: reduce-scatter, or qgZ's two all-to-alls ---------------------------------- */

/* Makes the compute stream wait for finished reductions and folds their outputs. */
static fb_status fold_pending(fb_rank *r) {
  zpp_state *s = r->st;
  for (int i = 0; i < r->model->nunits; i++) {
    zpp_unit *x = &s->u[i];
    if (x->red_pending) FB_TRY(fb_stream_wait(r->dev, r->compute, x->ev_red));
    x->red_pending = false;
    if (!x->acc_pending) continue;
    FB_TRY(fb_fold_dtype(r, i, x->sl.g.ptr, x->red_tmp.ptr, x->red_dt, x->sl.shard,
                         x->acc_overwrite));
    fb_free(r->dev, &x->red_tmp, r->compute);
    x->acc_pending = false;
  }
  return FB_OK;
}

static fb_status zpp_pre_backward(fb_rank *r, int i) {
  zpp_state *s = r->st;
  zpp_unit *x = &s->u[i];
  FB_TRY(fb_gather_pre_backward(&s->g, r, i));
  FB_TRY(fb_alloc(r->dev, (size_t)x->sl.padded * fb_psz(r), FB_MEM_GRAD_FULL,
                  "zeropp.grads.unsharded", &x->g_full));
  r->view[i].grads = x->g_full.ptr;
  fb_kctx k = fb_rank_kctx(r, r->compute, i);
  return fb_k_memset0(&k, "zero_grad", x->g_full.ptr, x->g_full.bytes);
}

/* One int4 quantise + all-to-all (values and scales) on `c`: n = c->world blocks of `per`
 * elements each go to the peer of their index; out/osc receive the peers' blocks in order. */
static fb_status q4_exchange(fb_rank *r, int i, fb_comm *c, const void *x, fb_dtype xt,
                             int64_t sh, int64_t per, int rows, fb_buf *out, fb_buf *osc) {
  const int64_t n = per * c->world, nseg = n / sh;
  const int64_t ns = (int64_t)fb_quant_nscales((size_t)nseg, (size_t)sh, QG_GROUP);
  fb_buf q = {0}, sc = {0};
  fb_kctx k = fb_rank_kctx(r, r->commst, i);
  fb_device *d = r->dev;
  FB_TRY(fb_alloc_on(d, r->commst, (size_t)n / 2, FB_MEM_COMM, "zeropp.qg_int4", &q));
  fb_status st = fb_alloc_on(d, r->commst, (size_t)ns * 4, FB_MEM_COMM, "zeropp.qg_scales", &sc);
  if (st == FB_OK)
    st = fb_alloc_on(d, r->commst, (size_t)n / 2, FB_MEM_COMM, "zeropp.qg_recv", out);
  if (st == FB_OK)
    st = fb_alloc_on(d, r->commst, (size_t)ns * 4, FB_MEM_COMM, "zeropp.qg_recv_scales", osc);
  if (st == FB_OK)
    st = fb_k_quantize(&k, q.ptr, sc.ptr, x, xt, (size_t)nseg, (size_t)sh, QG_GROUP, QG_BITS,
                       rows);
  if (st == FB_OK)
    st = fb_all_to_all(c, r->commst, i, q.ptr, out->ptr, (size_t)per / 2, FB_I8);
  if (st == FB_OK)
    st = fb_all_to_all(c, r->commst, i, sc.ptr, osc->ptr, (size_t)(ns / c->world), FB_F32);
  fb_free(d, &q, r->commst);
  fb_free(d, &sc, r->commst);
  return st;
}

/* qgZ: the unit gradient g (compute dtype) into this rank's reduced slice `red` (fp32). */
static fb_status reduce_int4(fb_rank *r, int i, zpp_state *s, zpp_unit *x, const void *g,
                             float *red) {
  const int64_t sh = x->sl.shard, N = s->nodes;
  fb_kctx k = fb_rank_kctx(r, r->commst, i);
  fb_buf rq = {0}, rs = {0}, part = {0};
  /* inside the node: to local peer l the slices {n*S + l : n < N}, contiguous once reordered */
  FB_TRY(q4_exchange(r, i, s->intra, g, r->pdt, sh, N * sh, (int)N, &rq, &rs));
  fb_status st = N > 1 ? fb_alloc_on(r->dev, r->commst, (size_t)(N * sh) * 4, FB_MEM_COMM,
                                     "zeropp.qg_partial", &part)
                       : FB_OK;
  float *p1 = N > 1 ? part.ptr : red; /* the node's sums of this position's N slices */
  if (st == FB_OK)
    st = fb_k_dequant_sum(&k, p1, FB_F32, rq.ptr, rs.ptr, (size_t)s->node, (size_t)(N * sh),
                          (size_t)sh, QG_GROUP, QG_BITS);
  fb_free(r->dev, &rq, r->commst);
  fb_free(r->dev, &rs, r->commst);
  if (st == FB_OK && N > 1) /* across the nodes: slice n to node n */
    st = q4_exchange(r, i, s->inter, part.ptr, FB_F32, sh, sh, 1, &rq, &rs);
  if (st == FB_OK && N > 1)
    st = fb_k_dequant_sum(&k, red, FB_F32, rq.ptr, rs.ptr, (size_t)N, (size_t)sh, (size_t)sh,
                          QG_GROUP, QG_BITS);
  fb_free(r->dev, &rq, r->commst);
  fb_free(r->dev, &rs, r->commst);
  fb_free(r->dev, &part, r->commst);
  return st;
}

static fb_status zpp_post_backward(fb_rank *r, int i) {
  zpp_state *s = r->st;
  zpp_unit *x = &s->u[i];
  const bool qg = r->cfg->zeropp_quant_grads, first = r->micro == 0;
  r->view[i].grads = NULL;
  FB_TRY(fb_gather_release(&s->g, r, i));
  if (x->red_pending || x->acc_pending) FB_TRY(fold_pending(r));
  /* micro-step 0 in fp32 lands in the accumulator; the rest in red_tmp, folded later */
  x->red_dt = qg ? FB_F32 : r->rdt;
  const bool direct = first && x->red_dt == FB_F32;
  float *acc = x->sl.g.ptr;
  if (!direct) {
    FB_TRY(fb_alloc(r->dev, (size_t)x->sl.shard * fb_dtype_size(x->red_dt), FB_MEM_COMM,
                    "zeropp.reduce_out", &x->red_tmp));
    acc = x->red_tmp.ptr;
  }
  void *send = x->g_full.ptr;
  if (!qg) FB_TRY(fb_for_reduce(r, i, x->g_full.ptr, x->sl.padded, &x->g_cast, &send));
  FB_TRY(ring_room(r, &s->reduce));
  FB_TRY(fb_event_record(r->dev, x->ev_ready, r->compute));
  FB_TRY(fb_stream_wait(r->dev, r->commst, x->ev_ready));
  if (qg)
    FB_TRY(reduce_int4(r, i, s, x, send, acc));
  else
    FB_TRY(fb_reduce_scatter(r->comm, r->commst, i, send, acc, (size_t)x->sl.shard, r->rdt));
  FB_TRY(fb_event_record(r->dev, x->ev_red, r->commst));
  FB_TRY(ring_push(r, &s->reduce));
  x->red_pending = true;
  x->acc_pending = !direct;
  x->acc_overwrite = first;
  fb_free(r->dev, &x->g_full, r->commst);
  fb_free(r->dev, &x->g_cast, r->commst);
  if (i == 0 && r->micro < r->n_micro - 1) FB_TRY(fold_pending(r));
  return FB_OK;
}

/* ---- optimizer, readback, checkpoints ------------------------------------------------------ */

static fb_status zpp_step(fb_rank *r) {
  zpp_state *s = r->st;
  FB_TRY(fold_pending(r));
  for (int i = 0; i < r->model->nunits; i++) s->u[i].sec_valid = false; /* new weights */
  return fb_slices_step(r, slice_of);
}

static fb_status zpp_read_params(fb_rank *r, int i, float *host) {
  FB_TRY(fb_stream_sync(r->dev, r->compute));
  return fb_slice_read(r, r->comm, slice_of(r, i), r->model->units[i].numel, host);
}

static fb_status zpp_ranges(fb_rank *r, bool save, fb_state_range **out, int *n) {
  (void)save;
  return fb_ranges_slices(r, slice_of, out, n);
}

const fb_strategy fb_strategy_zeropp = {
    .name = "zeropp",
    .summary = "ZeRO-3 with DeepSpeed ZeRO++'s switches: int8 weight gathers (qwZ), a node-local "
               "secondary shard (hpZ), int4 hierarchical all-to-all gradients (qgZ)",
    .setup = zpp_setup,
    .teardown = zpp_teardown,
    .pre_forward = zpp_pre_forward,
    .post_forward = zpp_post_forward,
    .pre_backward = zpp_pre_backward,
    .post_backward = zpp_post_backward,
    .optimizer_step = zpp_step,
    .read_params = zpp_read_params,
    .host = NULL, /* as zero3: DeepSpeed's per-hook host work has no public figure here */
    .tunes_prefetch = true,
    .tunes_reshard = true,
    .shards_all = true,
    .takes_zeropp = true,
    .accum_modes = 0,
    .state_ranges = zpp_ranges,
    .memory = "16P/W (flat slices padded to 2W) + 2P/S with --zeropp-hpz S (bf16 secondary)",
};
