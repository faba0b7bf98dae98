/* `calibrate --backend cuda`, the contention step: on one GPU, a GEMM and a memory-bound kernel
 * timed alone and beside a copy kernel that holds NCCL's channel count of SMs for the whole
 * time (the device's proxy_copy: engine/backends/cuda/proxy_copy.cu), against what the
 * simulator's contention model (engine/sim/contention.h) predicts for the same pair: the GEMM
 * on the SMs left, the memory-bound kernel on the HBM bandwidth the copy leaves (priced at the
 * copy's own measured rate, not NCCL's). It also times the reverse direction, which the
 * simulator does not model: one copy pass launched behind GEMMs that hold every SM (NCCL's
 * kernel issued while compute runs), against the pass alone. It checks the model and writes
 * no profile key. A device without the proxy kernel (cpu-opaque) skips it with one line. */
#include <math.h>
#include <stdio.h>

#include "../engine/sim/contention.h"
#include "../engine/sim/cost_model.h"
#include "calibrate_device.h"

typedef struct cont_arg {
  int m, n, k;
  size_t elems;           /* the memory-bound kernel's elements */
  fb_buf out, inp, w;     /* GEMM operands; out/inp also the add's */
} cont_arg;

static fb_status run_gemm(fb_devcal *c, void *p) {
  cont_arg *g = p;
  return fb_k_matmul_fwd(&c->k, g->out.ptr, g->inp.ptr, g->w.ptr, NULL, g->m, g->k, g->n);
}

static fb_status run_add(fb_devcal *c, void *p) {
  cont_arg *g = p;
  return fb_k_add(&c->k, g->out.ptr, g->inp.ptr, g->inp.ptr, g->elems);
}

/* fn's time per call beside the proxy: the proxy is launched first on its own stream with
 * enough passes to outlast the timed loop (twice its time alone), then fn is timed as usual. */
static fb_status beside(fb_devcal *c, fb_stream *ps, fb_buf *pa, fb_buf *pb, int ctas,
                        double pass_s, fb_devcal_fn fn, void *arg, int reps, double alone,
                        double *out) {
  int passes = (int)ceil(2.0 * (reps + 1) * alone / pass_s) + 1;
  FB_TRY(c->d->ops->proxy_copy(c->d, ps, pb->ptr, pa->ptr, pa->bytes, ctas, passes));
  fb_status st = fb_devcal_time(c, fn, arg, reps, out);
  fb_status s2 = fb_stream_sync(c->d, ps);
  return st != FB_OK ? st : s2;
}

/* One proxy pass alone: seconds and the HBM bytes/s it moves (read + write). */
static fb_status proxy_alone(fb_devcal *c, fb_stream *ps, fb_buf *pa, fb_buf *pb, int ctas,
                             double *pass_s) {
  FB_TRY(c->d->ops->proxy_copy(c->d, ps, pb->ptr, pa->ptr, pa->bytes, ctas, 1)); /* warm-up */
  FB_TRY(fb_stream_sync(c->d, ps));
  uint64_t m0 = c->d->ops->mark(c->d, ps);
  FB_TRY(c->d->ops->proxy_copy(c->d, ps, pb->ptr, pa->ptr, pa->bytes, ctas, 4));
  uint64_t m1 = c->d->ops->mark(c->d, ps);
  FB_TRY(fb_stream_sync(c->d, ps));
  *pass_s = (c->d->ops->mark_time(c->d, m1) - c->d->ops->mark_time(c->d, m0)) / 4;
  c->d->ops->marks_reset(c->d);
  return FB_OK;
}

/* The reverse direction: one proxy pass launched behind back-to-back GEMMs that fill every SM
 * and outlast it (twice its time alone, at least 3), timed from its launch to its end on the
 * device clock; the median of 3 tries. */
static fb_status behind(fb_devcal *c, fb_stream *ps, cont_arg *g, fb_buf *pa, fb_buf *pb,
                        int ctas, double pass_s, double gemm_s, double *out) {
  const int n = (int)ceil(2.0 * pass_s / gemm_s) + 3;
  double t[3];
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < n; j++) FB_TRY(run_gemm(c, g));
    uint64_t m0 = c->d->ops->mark(c->d, ps);
    FB_TRY(c->d->ops->proxy_copy(c->d, ps, pb->ptr, pa->ptr, pa->bytes, ctas, 1));
    uint64_t m1 = c->d->ops->mark(c->d, ps);
    FB_TRY(fb_stream_sync(c->d, ps));
    FB_TRY(fb_stream_sync(c->d, c->s));
    t[i] = c->d->ops->mark_time(c->d, m1) - c->d->ops->mark_time(c->d, m0);
    c->d->ops->marks_reset(c->d);
  }
  *out = fmax(fmin(t[0], t[1]), fmin(fmax(t[0], t[1]), t[2])); /* the median */
  return FB_OK;
}

static void report(const char *what, double alone, double with, double pred) {
  printf("  %-40s %8.3f ms alone, %8.3f beside: %+6.1f%% measured, %+6.1f%% predicted\n", what,
         alone * 1e3, with * 1e3, 100 * (with / alone - 1), 100 * (pred - 1));
}

/* The model's slowdowns for the pair, with the HBM the proxy moved at its measured rate. */
static void predict(const fb_devcal *c, const cont_arg *g, int ctas, double proxy_bw,
                    double *gemm, double *add) {
  fb_hardware h = c->hw;
  h.nccl_contention = true;
  h.devices_per_node = 1 << 20; /* one node; the channels give the CTAs */
  h.nccl_ch_node = ctas / 2;
  h.nccl_bw_node = proxy_bw / 2 / (ctas / 2); /* contention.c: 2 HBM bytes per bus byte */
  fb_op_cost mm = {.name = "matmul_fwd", .kind = FB_OP_GEMM, .dtype = FB_BF16, .m = g->m,
                   .n = g->n, .k = g->k, .batch = 1};
  mm.flops = 2.0 * g->m * g->n * g->k;
  mm.bytes = 2.0 * ((double)g->m * g->k + (double)g->k * g->n + (double)g->m * g->n);
  fb_op_cost ad = {.name = "add", .kind = FB_OP_MEM, .dtype = FB_BF16,
                   .bytes = 3.0 * 2 * (double)g->elems};
  *gemm = fb_contention_slowdown(&h, &mm, 8);
  *add = fb_contention_slowdown(&h, &ad, 8);
}

static fb_status measure(fb_devcal *c, fb_stream *ps, cont_arg *g, fb_buf *pa, fb_buf *pb,
                         int ctas) {
  double pass_s = 0, tg = 0, ta = 0, tg2 = 0, ta2 = 0, pg = 1, pd = 1;
  const int reps = c->o->quick ? 2 : 10;
  FB_TRY(proxy_alone(c, ps, pa, pb, ctas, &pass_s));
  const double proxy_bw = 2.0 * (double)pa->bytes / pass_s;
  printf("  %-40s %8.1f GB/s (read + write) on %d CTAs\n", "NCCL stand-in copy", proxy_bw * 1e-9,
         ctas);
  FB_TRY(fb_devcal_time(c, run_gemm, g, reps, &tg));
  FB_TRY(fb_devcal_time(c, run_add, g, reps, &ta));
  FB_TRY(beside(c, ps, pa, pb, ctas, pass_s, run_gemm, g, reps, tg, &tg2));
  FB_TRY(beside(c, ps, pa, pb, ctas, pass_s, run_add, g, reps, ta, &ta2));
  predict(c, g, ctas, proxy_bw, &pg, &pd);
  char what[64];
  snprintf(what, sizeof what, "GEMM %d x %d x %d bf16", g->m, g->n, g->k);
  report(what, tg, tg2, pg);
  snprintf(what, sizeof what, "add of %.0f MiB bf16", 2.0 * (double)g->elems / 1048576.0);
  report(what, ta, ta2, pd);
  double tb = 0;
  FB_TRY(behind(c, ps, g, pa, pb, ctas, pass_s, tg, &tb));
  printf("  %-40s %8.3f ms alone, %8.3f behind GEMMs: %.0f%% of its rate alone (not modelled)\n",
         "copy pass launched while GEMMs run", pass_s * 1e3, tb * 1e3,
         tb > 0 ? 100 * pass_s / tb : 0.0);
  return FB_OK;
}

fb_status fb_devcal_contention(fb_devcal *c) {
  if (!c->d->ops->proxy_copy) {
    printf("  %-40s skipped: the %s device has no NCCL stand-in kernel\n", "contention",
           c->d->ops->name);
    return FB_OK;
  }
  const int ctas = fb_contention_ctas(&c->hw, c->hw.devices_per_node); /* one node's */
  const int sq = c->o->quick ? 1024 : 8192;
  cont_arg g = {.m = sq, .n = sq, .k = sq, .elems = (size_t)sq * sq};
  const size_t pbytes = c->o->quick ? (size_t)8 << 20 : (size_t)256 << 20;
  fb_buf pa = {0}, pb = {0};
  fb_stream *ps = NULL;
  fb_status st;
  FB_CHECK_GOTO(st, c->d->ops->stream_create(c->d, FB_STREAM_COMM, &ps), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, (size_t)g.m * g.n * 2, &g.out), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, (size_t)g.m * g.k * 2, &g.inp), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, (size_t)g.n * g.k * 2, &g.w), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, pbytes, &pa), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, pbytes, &pb), out);
  printf("  contention: compute beside a copy kernel holding %d SMs (NCCL's channels in a "
         "node; measured, and as the simulator predicts it)\n", ctas);
  st = measure(c, ps, &g, &pa, &pb, ctas);
out:
  fb_free(c->d, &g.out, NULL);
  fb_free(c->d, &g.inp, NULL);
  fb_free(c->d, &g.w, NULL);
  fb_free(c->d, &pa, NULL);
  fb_free(c->d, &pb, NULL);
  if (ps) c->d->ops->stream_destroy(c->d, ps);
  return st;
}
