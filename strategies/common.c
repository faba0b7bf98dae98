/* Shared strategy helpers (see common.h). */
#include "common.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/model/init.h"
#include "../engine/backends/registry.h"

/* dst[0, n) = unit u's flat range [start, start+n); past the unit's end (world padding): 0. */
static void fill_range(const fb_rank *r, int u, int64_t start, int64_t n, float *dst) {
  const int64_t un = r->model->units[u].numel;
  const int64_t valid = start >= un ? 0 : (un - start < n ? un - start : n);
  if (valid) fb_unit_init(r->model, u, r->cfg->seed, start, valid, dst);
  memset(dst + valid, 0, (size_t)(n - valid) * sizeof *dst);
}

fb_status fb_materialize_range(fb_rank *r, int u, int64_t start, int64_t n, float *dst) {
  if (n <= 0) return FB_OK;
  if (r->dev->simulated) return FB_OK;
  if (fb_device_caps_of(r->dev)->host_access) {
    /* host memory: generated in place, each page written once (no staging copy) */
    FB_TRY(fb_stream_sync(r->dev, r->compute));
    fill_range(r, u, start, n, dst);
    return FB_OK;
  }
  /* chunks of at most 16 Mi elements keep the host staging buffer small */
  const int64_t chunk = (int64_t)1 << 24;
  float *h = malloc((size_t)(n < chunk ? n : chunk) * sizeof *h);
  if (!h) return FB_ERR(FB_ENOMEM, "out of host memory materialising unit %d", u);
  fb_status st = FB_OK;
  for (int64_t o = 0; o < n && st == FB_OK; o += chunk) {
    int64_t c = n - o < chunk ? n - o : chunk;
    fill_range(r, u, start + o, c, h);
    st = fb_copy_h2d(r->dev, r->compute, dst + o, h, (size_t)c * sizeof *h);
  }
  free(h);
  return st;
}

fb_status fb_optim_alloc(fb_rank *r, int64_t n, const char *label, fb_optim_state *o) {
  memset(o, 0, sizeof *o);
  fb_kctx k = fb_rank_kctx(r, r->compute, -1);
  FB_TRY(fb_alloc(r->dev, (size_t)n * 4, FB_MEM_OPTIM, label, &o->m));
  FB_TRY(fb_k_memset0(&k, "zero_optim", o->m.ptr, o->m.bytes));
  if (!strcmp(r->cfg->optimizer, "adamw")) {
    FB_TRY(fb_alloc(r->dev, (size_t)n * 4, FB_MEM_OPTIM, label, &o->v));
    FB_TRY(fb_k_memset0(&k, "zero_optim", o->v.ptr, o->v.bytes));
  }
  return FB_OK;
}

void fb_optim_free(fb_rank *r, fb_optim_state *o) {
  fb_free(r->dev, &o->m, NULL);
  fb_free(r->dev, &o->v, NULL);
}

/* The update of one parameter's range [a, b) of unit u's range that starts at `start`; with
 * copy (AdamW only), the updated values in the compute dtype too, in the same pass. */
static fb_status update_param(fb_rank *r, const fb_param *pp, int64_t start, int64_t a, int64_t b,
                              float *p, const float *g, float *m, float *v, void *copy,
                              fb_kctx *k) {
  const fb_run_config *c = r->cfg;
  const int t = r->step + 1;
  const int64_t off = a - start;
  const size_t len = (size_t)(b - a);
  const float wd = pp->decay ? (float)c->weight_decay : 0.0f;
  if (!strcmp(c->optimizer, "adamw")) {
    fb_adamw_args args = {.lr = r->lr, .beta1 = (float)c->beta1, .beta2 = (float)c->beta2,
                          .eps = (float)c->eps, .weight_decay = wd,
                          .bias_corr1 = (float)(1.0 - pow(c->beta1, t)),
                          .bias_corr2 = (float)(1.0 - pow(c->beta2, t)),
                          .grad_scale = r->clip_coef};
    if (copy)
      return fb_k_adamw_cast(k, p + off, g + off, m + off, v + off,
                             (char *)copy + (size_t)off * fb_psz(r), r->pdt, len, &args);
    return fb_k_adamw(k, p + off, g + off, m + off, v + off, len, &args);
  }
  fb_sgd_args args = {.lr = r->lr, .momentum = (float)c->momentum, .weight_decay = wd,
                      .grad_scale = r->clip_coef};
  return fb_k_sgd(k, p + off, g + off, m + off, len, &args);
}

fb_status fb_optim_update_to(fb_rank *r, int u, int64_t start, int64_t n, float *p,
                             const float *g, fb_optim_state *o, int64_t o_off, void *copy,
                             bool zero_gaps) {
  const fb_unit *un = &r->model->units[u];
  fb_kctx k = fb_rank_kctx(r, r->compute, u);
  float *m = o->m.ptr ? (float *)o->m.ptr + o_off : NULL;
  float *v = o->v.ptr ? (float *)o->v.ptr + o_off : NULL;
  const int64_t end = start + n;
  if (copy && (r->pdt == FB_F32 || strcmp(r->cfg->optimizer, "adamw"))) {
    /* no fused update: the update, then the copy of the whole range (gaps included) */
    FB_TRY(fb_optim_update_to(r, u, start, n, p, g, o, o_off, NULL, false));
    return fb_to_pdt(r, u, copy, p, n);
  }
  int64_t done = start; /* the copy's elements below it are written */
  for (int i = un->first; i < un->first + un->count; i++) {
    const fb_param *pp = &r->model->params[i];
    int64_t a = pp->offset > start ? pp->offset : start;
    int64_t b = pp->offset + pp->numel < end ? pp->offset + pp->numel : end;
    if (a >= b) continue;
    if (copy && zero_gaps && a > done)
      FB_TRY(fb_k_memset0(&k, "zero_gaps", (char *)copy + (size_t)(done - start) * fb_psz(r),
                          (size_t)(a - done) * fb_psz(r)));
    FB_TRY(update_param(r, pp, start, a, b, p, g, m, v, copy, &k));
    done = b;
  }
  if (copy && zero_gaps && end > done)
    FB_TRY(fb_k_memset0(&k, "zero_gaps", (char *)copy + (size_t)(done - start) * fb_psz(r),
                        (size_t)(end - done) * fb_psz(r)));
  return FB_OK;
}

fb_status fb_optim_update(fb_rank *r, int u, int64_t start, int64_t n, float *p, const float *g,
                          fb_optim_state *o, int64_t o_off) {
  return fb_optim_update_to(r, u, start, n, p, g, o, o_off, NULL, false);
}

fb_status fb_norm_begin(fb_rank *r) {
  fb_kctx k = fb_rank_kctx(r, r->compute, -1);
  FB_TRY(fb_alloc(r->dev, 2 * FB_NORM_BINS * sizeof(uint64_t), FB_MEM_TEMP, "grad_norm.bins",
                  &r->norm_bins));
  return fb_k_memset0(&k, "zero_norm_bins", r->norm_bins.ptr, r->norm_bins.bytes);
}

fb_status fb_norm_add(fb_rank *r, const float *g, int64_t n) {
  fb_kctx k = fb_rank_kctx(r, r->compute, -1);
  return fb_k_sumsq_bins(&k, r->norm_bins.ptr, g, (size_t)n);
}

fb_status fb_norm_finish(fb_rank *r, bool sharded) {
  fb_status st = FB_OK;
  uint64_t host[2 * FB_NORM_BINS];
  memset(host, 0, sizeof host);
  if (sharded && r->world > 1) {
    fb_event *ev = NULL;
    FB_CHECK_GOTO(st, r->dev->ops->event_create(r->dev, &ev), out);
    st = fb_event_record(r->dev, ev, r->compute);
    if (st == FB_OK) st = fb_stream_wait(r->dev, r->commst, ev);
    if (st == FB_OK)
      st = fb_all_reduce(r->comm, r->commst, -1, r->norm_bins.ptr, r->norm_bins.ptr,
                         2 * FB_NORM_BINS, FB_U64);
    if (st == FB_OK) st = fb_event_record(r->dev, ev, r->commst);
    if (st == FB_OK) st = fb_stream_wait(r->dev, r->compute, ev);
    r->dev->ops->event_destroy(r->dev, ev);
    if (st != FB_OK) goto out;
  }
  FB_CHECK_GOTO(st, fb_copy_d2h(r->dev, r->compute, host, r->norm_bins.ptr, sizeof host), out);
  r->grad_norm = r->dev->simulated ? NAN : fb_norm_from_bins(host);
  r->clip_coef = 1.0f;
  if (r->cfg->grad_clip > 0 && !r->dev->simulated) {
    float coef = (float)(r->cfg->grad_clip / (r->grad_norm + 1e-6));
    if (coef < 1.0f) r->clip_coef = coef;
  }
out:
  fb_free(r->dev, &r->norm_bins, r->compute);
  return st;
}

fb_status fb_read_range(fb_rank *r, const void *src, int64_t n, float *host) {
  return fb_copy_d2h(r->dev, r->compute, host, src, (size_t)n * sizeof(float));
}

fb_status fb_to_pdt(fb_rank *r, int unit, void *dst, const float *src, int64_t n) {
  fb_kctx k = fb_rank_kctx(r, r->compute, unit);
  if (r->pdt == FB_F32)
    return dst == (const void *)src ? FB_OK
                                    : fb_k_copy(&k, "param_copy", dst, src, (size_t)n * 4);
  return fb_k_cast(&k, dst, r->pdt, src, FB_F32, (size_t)n);
}

fb_status fb_for_reduce(fb_rank *r, int unit, void *g, int64_t n, fb_buf *tmp, void **out) {
  *out = g;
  if (r->rdt == r->pdt) return FB_OK;
  FB_TRY(fb_alloc(r->dev, (size_t)n * fb_dtype_size(r->rdt), FB_MEM_COMM, "grads.reduce_cast",
                  tmp));
  fb_kctx k = fb_rank_kctx(r, r->compute, unit);
  *out = tmp->ptr;
  return fb_k_cast(&k, tmp->ptr, r->rdt, g, r->pdt, (size_t)n);
}

fb_status fb_fold_reduced(fb_rank *r, int unit, float *acc, const void *x, int64_t n,
                          bool overwrite) {
  return fb_fold_dtype(r, unit, acc, x, r->rdt, n, overwrite);
}

fb_status fb_fold_dtype(fb_rank *r, int unit, float *acc, const void *x, fb_dtype xdt, int64_t n,
                        bool overwrite) {
  fb_kctx k = fb_rank_kctx(r, r->compute, unit);
  if (xdt == FB_F32)
    return overwrite ? fb_k_copy(&k, "grad_copy", acc, x, (size_t)n * 4)
                     : fb_k_acc_f32(&k, acc, x, (size_t)n);
  if (overwrite) return fb_k_cast(&k, acc, FB_F32, x, xdt, (size_t)n);
  fb_buf t = {0};
  FB_TRY(fb_alloc(r->dev, (size_t)n * 4, FB_MEM_TEMP, "grads.upcast", &t));
  fb_status st = fb_k_cast(&k, t.ptr, FB_F32, x, xdt, (size_t)n);
  if (st == FB_OK) st = fb_k_acc_f32(&k, acc, t.ptr, (size_t)n);
  fb_free(r->dev, &t, r->compute);
  return st;
}

fb_status fb_slice_init(fb_rank *r, int unit, fb_slice *sl) {
  return fb_slice_init_padded(r, unit, sl, r->world);
}

fb_status fb_slice_init_padded(fb_rank *r, int unit, fb_slice *sl, int64_t mult) {
  assert(mult >= r->world && mult % r->world == 0);
  sl->padded = fb_round_up(r->model->units[unit].numel, mult);
  sl->shard = sl->padded / r->world;
  const size_t bytes = (size_t)sl->shard * 4;
  fb_kctx k = fb_rank_kctx(r, r->compute, unit);
  FB_TRY(fb_alloc(r->dev, bytes, FB_MEM_PARAM_SHARD, "params.shard", &sl->p));
  FB_TRY(fb_materialize_range(r, unit, (int64_t)r->rank * sl->shard, sl->shard, sl->p.ptr));
  FB_TRY(fb_alloc(r->dev, bytes, FB_MEM_GRAD_SHARD, "grads.shard", &sl->g));
  FB_TRY(fb_k_memset0(&k, "zero_grad", sl->g.ptr, bytes));
  return fb_optim_alloc(r, sl->shard, "optim.shard", &sl->optim);
}

void fb_slice_free(fb_rank *r, fb_slice *sl) {
  fb_free(r->dev, &sl->p, NULL);
  fb_free(r->dev, &sl->g, NULL);
  fb_optim_free(r, &sl->optim);
}

fb_status fb_slice_read(fb_rank *r, fb_comm *comm, const fb_slice *sl, int64_t numel,
                        float *host) {
  fb_buf full = {0};
  FB_TRY(fb_alloc(r->dev, (size_t)sl->padded * 4, FB_MEM_TEMP, "readback", &full));
  fb_status st = fb_comm_unrecorded(comm, r->commst, FB_COLL_ALL_GATHER, sl->p.ptr, full.ptr,
                                    (size_t)sl->shard, FB_F32, 0);
  if (st == FB_OK) st = fb_stream_sync(r->dev, r->commst);
  if (st == FB_OK && host) st = fb_read_range(r, full.ptr, numel, host);
  fb_free(r->dev, &full, NULL);
  return st;
}

fb_status fb_slices_norm(fb_rank *r, fb_slice *(*slice_of)(fb_rank *r, int unit)) {
  FB_TRY(fb_norm_begin(r));
  for (int i = 0; i < r->model->nunits; i++)
    FB_TRY(fb_norm_add(r, slice_of(r, i)->g.ptr, slice_of(r, i)->shard));
  return fb_norm_finish(r, true);
}

fb_status fb_slices_step(fb_rank *r, fb_slice *(*slice_of)(fb_rank *r, int unit)) {
  FB_TRY(fb_slices_norm(r, slice_of));
  for (int i = 0; i < r->model->nunits; i++) {
    fb_slice *sl = slice_of(r, i);
    FB_TRY(fb_optim_update(r, i, (int64_t)r->rank * sl->shard, sl->shard, sl->p.ptr, sl->g.ptr,
                           &sl->optim, 0));
  }
  return FB_OK;
}
