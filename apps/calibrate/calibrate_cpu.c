/* The cpu device's calibration (`fsdpbench calibrate`, calibrate.c drives it): measures this
 * machine through the executor's own code paths and fits a profile's compute figures:
 *  - fp32 FMA peak (a register-only FMA loop on every thread);
 *  - the GEMM efficiency curve: the cpu device's matmul (forward and backward) at square and
 *    transformer shapes, fitted to rate = peak * E * s / (s + h) (least squares on log rate);
 *  - attention efficiency: the cpu device's attention fwd+bwd against that curve;
 *  - memory bandwidth (STREAM triad) and the fraction the device's elementwise kernels reach;
 *  - per-kernel overhead (a 16-element kernel);
 *  - each memory-bound kernel of the cpu table at the debug and gpt2-124m shapes: its achieved
 *    rate of the bytes its wrapper counts (the profile's kernel_gbs table);
 *  - then, in situ (calibrate_steps.c), short single-rank training runs whose recorded ops
 *    refit the GEMM curve, the attention efficiency and the kernel table;
 *  - the slowdown of a GEMM while another thread streams memory (a comm worker's copies);
 *  - the local communicator (calibrate_comm.c): 2 rank threads idle and beside GEMMs.
 * Micro-benchmark timings are the lower quartile of repeated calls. It neither checks the
 * load, nor repeats, nor writes the profile (calibrate.c does). */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/comm/comm.h"
#include "../engine/core/progress.h"
#include "../engine/device/device.h"
#include "../engine/backends/cpu/device_cpu.h"
#include "../engine/backends/registry.h"
#include "../engine/device/kernels.h"
#include "../engine/ops/blas.h"
#include "../engine/ops/ops.h"
#include "../engine/sim/cost_model.h"
#include "calibrate.h"
#include "calibrate_comm.h"

/* ---- FMA peak ------------------------------------------------------------------------------ */

/* keeps the bandwidth loop's result observable */
static volatile float bw_sink;

/* The FMA ceiling a datasheet would give: online CPUs x clock x SIMD FLOP per cycle (2 FMA
 * pipes of 16 (AVX-512) or 8 (AVX2) fp32 lanes, 2 FLOP each). The clock is cpufreq's maximum
 * (+25 % for boost it may not list), else the fastest "cpu MHz" of /proc/cpuinfo (x 2: a VM
 * shows its base clock, an idle host a scaled-down one). NAN when neither is readable. */
static double nominal_peak(void) {
  double ghz = NAN, margin = 1.25;
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "r");
  double khz = 0;
  if (f) {
    if (fscanf(f, "%lf", &khz) == 1 && khz > 0) ghz = khz * 1e-6;
    fclose(f);
  }
  if (isnan(ghz) && (f = fopen("/proc/cpuinfo", "r"))) {
    char line[512];
    double mhz = 0;
    while (fgets(line, sizeof line, f)) {
      double v;
      if (!strncmp(line, "cpu MHz", 7) && sscanf(strchr(line, ':') ? strchr(line, ':') + 1 : "",
                                                 "%lf", &v) == 1 && v > mhz)
        mhz = v;
    }
    fclose(f);
    if (mhz > 0) {
      ghz = mhz * 1e-3;
      margin = 2;
    }
  }
  if (isnan(ghz)) return NAN;
  const double flop_per_cycle = __builtin_cpu_supports("avx512f") ? 64 : 32;
  return sysconf(_SC_NPROCESSORS_ONLN) * ghz * 1e9 * flop_per_cycle * margin;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* Bytes of the last-level cache this process may use (L3, else L2); NAN when unknown. */
static double llc_bytes(void) {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l3 > 0 ? (double)l3 : l2 > 0 ? (double)l2 : NAN;
}

static double measure_triad(int threads, bool quick) {
  /* 3 x 96 MB (quick: 3 x 32 MB), above the last-level caches of current CPUs */
  const size_t n = quick ? (size_t)8 << 20 : (size_t)24 << 20;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  double best = 0;
  if (!a || !b || !c) goto out;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; i++) {
    a[i] = 0;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  for (int rep = 0; rep < 5; rep++) {
    double t0 = fb_cpu_clock();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
    double bw = 3.0 * (double)n * sizeof(float) / (fb_cpu_clock() - t0);
    if (bw > best) best = bw;
  }
  bw_sink = a[n / 2];
out:
  free(a);
  free(b);
  free(c);
  return best;
}

/* ---- the cpu device's kernels ---------------------------------------------------------------- */

typedef struct cdev {
  fb_device *d;
  fb_stream *s;
  fb_kctx k;
} cdev;

static fb_status cdev_open(int threads, int rank, int world, cdev *c) {
  const fb_device_ops *ops = fb_device_lookup("cpu");
  if (!ops) return FB_ERR(FB_EUNSUPPORTED, "calibrate: the cpu device is not built");
  FB_TRY(fb_device_open(ops, rank, world, threads, 0, NULL, &c->d));
  fb_status st = c->d->ops->stream_create(c->d, FB_STREAM_COMPUTE, &c->s);
  if (st != FB_OK) {
    fb_device_close(c->d);
    return st;
  }
  c->k = (fb_kctx){.dev = c->d, .s = c->s, .act = FB_F32, .unit = -1};
  return FB_OK;
}

static void cdev_close(cdev *c) {
  if (!c->d) return;
  c->d->ops->stream_destroy(c->d, c->s);
  fb_device_close(c->d);
  c->d = NULL;
}

static fb_status zalloc(cdev *c, size_t bytes, fb_buf *b) {
  FB_TRY(fb_alloc(c->d, bytes, FB_MEM_TEMP, "calibrate", b));
  return fb_memset0(c->d, c->s, b->ptr, bytes);
}

/* Lower-quartile seconds of one call of `fn`, repeated for about `budget` seconds (>= 4 runs). */
typedef fb_status (*bench_fn)(cdev *c, void *arg);
static fb_status time_call(cdev *c, bench_fn fn, void *arg, double budget, double *out) {
  enum { MAXR = 4096 };
  static _Thread_local double t[MAXR];
  FB_TRY(fn(c, arg)); /* warm-up */
  int n = 0;
  double start = fb_cpu_clock();
  while (n < MAXR && (n < 4 || fb_cpu_clock() - start < budget)) {
    double t0 = fb_cpu_clock();
    FB_TRY(fn(c, arg));
    FB_TRY(fb_stream_sync(c->d, c->s));
    t[n++] = fb_cpu_clock() - t0;
  }
  *out = fb_calib_lower_quartile(t, n);
  return FB_OK;
}

typedef struct gemm_arg {
  int N, C, OC;
  fb_buf out, inp, w, dinp, dw;
} gemm_arg;

static fb_status run_gemm(cdev *c, void *p) {
  gemm_arg *g = p;
  return fb_k_matmul_fwd(&c->k, g->out.ptr, g->inp.ptr, g->w.ptr, NULL, g->N, g->C, g->OC);
}

/* backward: dinp = dout W and dW += dout^T inp (dout: the forward's output buffer) */
static fb_status run_gemm_bwd(cdev *c, void *p) {
  gemm_arg *g = p;
  return fb_k_matmul_bwd(&c->k, g->dinp.ptr, g->dw.ptr, NULL, g->out.ptr, g->inp.ptr, g->w.ptr,
                         g->N, g->C, g->OC);
}

typedef struct add_arg {
  size_t n;
  fb_buf a, b;
} add_arg;

static fb_status run_add(cdev *c, void *p) {
  add_arg *a = p;
  return fb_k_add(&c->k, a->a.ptr, a->a.ptr, a->b.ptr, a->n);
}

typedef struct attn_arg {
  int B, T, H, hd;
  fb_buf q, k, v, out, lse, dq, dk, dv, dout, scratch;
} attn_arg;

static fb_status run_attn(cdev *c, void *p) {
  attn_arg *a = p;
  int ld = a->H * a->hd;
  FB_TRY(fb_k_attention_fwd(&c->k, a->out.ptr, a->lse.ptr, a->q.ptr, a->k.ptr, a->v.ptr, a->B,
                            a->T, a->H, a->H, a->hd, ld, ld, a->scratch.ptr));
  return fb_k_attention_bwd(&c->k, a->dq.ptr, a->dk.ptr, a->dv.ptr, a->dout.ptr, a->q.ptr,
                            a->k.ptr, a->v.ptr, a->out.ptr, a->lse.ptr, a->B, a->T, a->H, a->H,
                            a->hd, ld, ld, a->scratch.ptr);
}

/* A thread streaming memory while a GEMM runs: what a comm worker's copies cost compute. */
typedef struct streamer {
  volatile int stop;
  float *a, *b;
  size_t n;
} streamer;

static void *stream_thread(void *p) {
  streamer *s = p;
  while (!s->stop) memcpy(s->a, s->b, s->n * sizeof(float));
  return NULL;
}


/* ---- memory-bound kernels: one rate per kernel name ------------------------------------------ */

/* Shapes the kernels run at: the debug and gpt2-124m models as bench_sim_validation runs them
 * (tokens N = B*T, width C, FFN F, vocab V, one unit's parameters P at 2 ranks). */
typedef struct kshape {
  int B, T, C, F, V;
  size_t P;
} kshape;
static const kshape kshapes[] = {
    {.B = 8, .T = 128, .C = 256, .F = 1024, .V = 512, .P = 393216},
    {.B = 4, .T = 64, .C = 768, .F = 3072, .V = 50257, .P = 3538944},
};
enum { NKSHAPES = sizeof kshapes / sizeof kshapes[0], ENC_ROWS = 8192 };

/* Operands are consecutive ranges of one arena of random floats. "Activation" kernels reuse
 * the same ranges (their inputs were just written by the previous op, warm in cache);
 * parameter-vector kernels (optimizer, norm, accumulate, zero) walk through the arena so each
 * call reads memory no recent call touched, as a step's sweep over all parameters does. */
typedef struct karena {
  float *f;
  size_t nf;
  int32_t *tok;   /* token ids / targets, < ENC_ROWS and < V */
  uint64_t bins[2 * FB_NORM_BINS];
  double dsum;
  size_t next;    /* cold kernels: offset of the next call's operands */
} karena;

typedef struct kbench {
  const char *name; /* the op name the wrapper records */
  bool cold;
  size_t (*floats)(const kshape *s);
  fb_status (*run)(const fb_kctx *k, float *p, karena *a, const kshape *s);
} kbench;

static size_t nc(const kshape *s) { return (size_t)s->B * s->T * s->C; }
static size_t nf(const kshape *s) { return (size_t)s->B * s->T * s->F; }
static size_t ntok(const kshape *s) { return (size_t)s->B * s->T; }

static size_t fl_enc(const kshape *s) { return nc(s) * 2 + (size_t)ENC_ROWS * s->C + (size_t)s->T * s->C; }
static fb_status k_enc_fwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  float *wte = p + nc(s), *wpe = wte + (size_t)ENC_ROWS * s->C;
  return fb_k_encoder_fwd(k, p, a->tok, wte, wpe, s->B, s->T, s->C);
}
static fb_status k_enc_bwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  float *dwte = p + nc(s), *dwpe = dwte + (size_t)ENC_ROWS * s->C;
  return fb_k_encoder_bwd(k, dwte, dwpe, p, a->tok, s->B, s->T, s->C);
}
static size_t fl_norm(const kshape *s) { return nc(s) * 4 + ntok(s) * 2 + (size_t)s->C * 3; }
static fb_status k_ln_fwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  float *inp = p + nc(s), *mean = inp + nc(s), *rstd = mean + ntok(s), *w = rstd + ntok(s);
  return fb_k_layernorm_fwd(k, p, mean, rstd, inp, w, w + s->C, (int)ntok(s), s->C, 1e-5f);
}
static fb_status k_ln_bwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  float *dout = p + nc(s), *inp = dout + nc(s), *mean = inp + nc(s), *rstd = mean + ntok(s);
  float *dw = rstd + ntok(s), *db = dw + s->C, *w = db + s->C;
  for (size_t i = 0; i < ntok(s); i++) rstd[i] = fabsf(rstd[i]) + 0.5f; /* plausible rstd */
  return fb_k_layernorm_bwd(k, p, dw, db, dout, inp, w, mean, rstd, (int)ntok(s), s->C);
}
static fb_status k_rms_fwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  float *inp = p + nc(s), *rstd = inp + nc(s), *w = rstd + ntok(s);
  return fb_k_rmsnorm_fwd(k, p, rstd, inp, w, (int)ntok(s), s->C, 1e-5f);
}
static fb_status k_rms_bwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  float *dout = p + nc(s), *inp = dout + nc(s), *rstd = inp + nc(s), *dw = rstd + ntok(s);
  for (size_t i = 0; i < ntok(s); i++) rstd[i] = fabsf(rstd[i]) + 0.5f;
  return fb_k_rmsnorm_bwd(k, p, dw, dout, inp, dw + s->C, rstd, (int)ntok(s), s->C);
}
static size_t fl_rope(const kshape *s) { return nc(s); }
static fb_status k_rope_fwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_rope_fwd(k, p, s->B, s->T, s->C / 64, 64, s->C, 10000.0f);
}
static fb_status k_rope_bwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_rope_bwd(k, p, s->B, s->T, s->C / 64, 64, s->C, 10000.0f);
}
static size_t fl_ffn(const kshape *s) { return nf(s) * 5; }
static fb_status k_gelu_fwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_gelu_fwd(k, p, p + nf(s), nf(s));
}
static fb_status k_gelu_bwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_gelu_bwd(k, p, p + nf(s), p + 2 * nf(s), nf(s));
}
static fb_status k_swiglu_fwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_swiglu_fwd(k, p, p + nf(s), p + 2 * nf(s), nf(s));
}
static fb_status k_swiglu_bwd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_swiglu_bwd(k, p, p + nf(s), p + 2 * nf(s), p + 3 * nf(s), p + 4 * nf(s), nf(s));
}
static size_t fl_add(const kshape *s) { return nc(s) * 2; }
static fb_status k_add(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_add(k, p, p, p + nc(s), nc(s));
}
static size_t fl_xent(const kshape *s) { return ntok(s) * (size_t)s->V; }
static fb_status k_xent(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_xent_fwd_bwd(k, p, &a->dsum, a->tok, (int)ntok(s), s->V, s->V,
                           1.0f / (float)ntok(s));
}
static size_t fl_p2(const kshape *s) { return s->P * 2; }
static size_t fl_p3(const kshape *s) { return s->P * 3; }
static size_t fl_p4(const kshape *s) { return s->P * 4; }
static size_t fl_p1(const kshape *s) { return s->P; }
static fb_status k_acc(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_acc_f32(k, p, p + s->P, s->P);
}
static fb_status k_scale(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_scale_f32(k, p, 0.999f, s->P);
}
static fb_status k_adamw(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  const fb_adamw_args ar = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                            .weight_decay = 0.1f, .bias_corr1 = 0.1f, .bias_corr2 = 0.05f,
                            .grad_scale = 1.0f};
  float *v = p + 3 * s->P;
  for (size_t i = 0; i < s->P; i += 1024) v[i] = fabsf(v[i]); /* second moments are >= 0 */
  return fb_k_adamw(k, p, p + s->P, p + 2 * s->P, v, s->P, &ar);
}
static fb_status k_sgd(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  const fb_sgd_args ar = {.lr = 1e-3f, .momentum = 0.9f, .weight_decay = 0.0f, .grad_scale = 1};
  return fb_k_sgd(k, p, p + s->P, p + 2 * s->P, s->P, &ar);
}
static fb_status k_norm(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_sumsq_bins(k, a->bins, p, s->P);
}
static fb_status k_sum(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_sum_f64(k, &a->dsum, p, s->P);
}
/* Zero fills and copies go through the device ops; the sim device costs them as "memset0"
 * and "copy_d2d" whatever the caller's label, so those are their names here. */
static fb_status k_memset0(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_memset0(k, "memset0", p, s->P * sizeof(float));
}
static fb_status k_copy(const fb_kctx *k, float *p, karena *a, const kshape *s) {
  return fb_k_copy(k, "copy_d2d", p, p + s->P, s->P * sizeof(float));
}

static const kbench kbenches[] = {
    {.name = "encoder_fwd", .floats = fl_enc, .run = k_enc_fwd},
    {.name = "encoder_bwd", .floats = fl_enc, .run = k_enc_bwd},
    {.name = "layernorm_fwd", .floats = fl_norm, .run = k_ln_fwd},
    {.name = "layernorm_bwd", .floats = fl_norm, .run = k_ln_bwd},
    {.name = "rmsnorm_fwd", .floats = fl_norm, .run = k_rms_fwd},
    {.name = "rmsnorm_bwd", .floats = fl_norm, .run = k_rms_bwd},
    {.name = "rope_fwd", .floats = fl_rope, .run = k_rope_fwd},
    {.name = "rope_bwd", .floats = fl_rope, .run = k_rope_bwd},
    {.name = "gelu_fwd", .floats = fl_ffn, .run = k_gelu_fwd},
    {.name = "gelu_bwd", .floats = fl_ffn, .run = k_gelu_bwd},
    {.name = "swiglu_fwd", .floats = fl_ffn, .run = k_swiglu_fwd},
    {.name = "swiglu_bwd", .floats = fl_ffn, .run = k_swiglu_bwd},
    {.name = "residual_add", .floats = fl_add, .run = k_add},
    {.name = "grad_add", .floats = fl_add, .run = k_add}, /* the same kernel, its own name */
    {.name = "softmax_xent", .floats = fl_xent, .run = k_xent},
    {.name = "grad_accumulate", .cold = true, .floats = fl_p2, .run = k_acc},
    {.name = "scale", .cold = true, .floats = fl_p1, .run = k_scale},
    {.name = "adamw", .cold = true, .floats = fl_p4, .run = k_adamw},
    {.name = "sgd", .cold = true, .floats = fl_p3, .run = k_sgd},
    {.name = "grad_norm", .cold = true, .floats = fl_p1, .run = k_norm},
    {.name = "param_sum", .cold = true, .floats = fl_p1, .run = k_sum},
    {.name = "memset0", .cold = true, .floats = fl_p1, .run = k_memset0},
    {.name = "copy_d2d", .cold = true, .floats = fl_p2, .run = k_copy},
};
enum { NKBENCH = sizeof kbenches / sizeof kbenches[0] };
_Static_assert(NKBENCH <= FB_HW_MAX_KERNELS, "the profile's kernel table holds them all");

typedef struct kcall {
  const kbench *b;
  const kshape *s;
  karena *a;
} kcall;

static fb_status run_kcall(cdev *c, void *p) {
  kcall *kc = p;
  size_t need = kc->b->floats(kc->s);
  float *base = kc->a->f;
  if (kc->b->cold) {
    if (kc->a->next + need > kc->a->nf) kc->a->next = 0;
    base += kc->a->next;
    kc->a->next += (need + 15) / 16 * 16;
  }
  return kc->b->run(&c->k, base, kc->a, kc->s);
}

/* Bytes the kernel wrapper counts for one call: the same call on a sim device whose profile
 * makes every memory-bound op cost exactly its bytes in seconds (1 B/s, no overhead). */
static fb_status wrapper_bytes(const kbench *b, const kshape *s, karena *a, double *bytes) {
  fb_hardware unit = {.peak_fp32 = 1, .peak_bf16 = 1, .gemm_max_eff = 1, .gemm_half_size = 1,
                      .attn_eff = 1, .mem_bw = 1, .mem_eff = 1, .devices_per_node = 1,
                      .intra_bw = 1, .inter_bw = 1, .coll_eff = 1, .overlap_slowdown = 1,
                      .mem_capacity = 1};
  snprintf(unit.name, sizeof unit.name, "unit");
  fb_device *d = NULL;
  fb_stream *st = NULL;
  FB_TRY(fb_device_open(fb_device_lookup("sim"), 0, 1, 1, 0, &unit, &d));
  fb_status rc = d->ops->stream_create(d, FB_STREAM_COMPUTE, &st);
  if (rc == FB_OK) {
    fb_kctx k = {.dev = d, .s = st, .act = FB_F32, .unit = -1};
    double t0 = d->ops->now(d);
    rc = b->run(&k, a->f, a, s);
    *bytes = d->ops->now(d) - t0;
    d->ops->stream_destroy(d, st);
  }
  fb_device_close(d);
  return rc;
}

/* Fills hw->kernels: per kernel, the wrapper's bytes over the measured time (less the launch
 * overhead), summed over the shapes (so the larger shape weighs more, as it does in a step). */
static fb_status measure_kernels(cdev *c, double budget, bool quick, bool quiet, fb_hardware *hw) {
  fb_status st = FB_OK;
  karena a = {0};
  size_t need = 0;
  for (int i = 0; i < NKBENCH; i++)
    for (int j = 0; j < NKSHAPES; j++) {
      size_t f = kbenches[i].floats(&kshapes[j]);
      if (f > need) need = f;
    }
  a.nf = need < ((size_t)48 << 20) ? (size_t)48 << 20 : need; /* 192 MB: well above L3 */
  size_t maxtok = 0;
  for (int j = 0; j < NKSHAPES; j++) maxtok = ntok(&kshapes[j]) > maxtok ? ntok(&kshapes[j]) : maxtok;
  a.f = malloc(a.nf * sizeof *a.f);
  a.tok = malloc(maxtok * sizeof *a.tok);
  if (!a.f || !a.tok) {
    st = FB_ERR(FB_ENOMEM, "calibrate: out of memory for the kernel operands");
    goto out;
  }
  uint32_t x = 12345u;
  for (size_t i = 0; i < a.nf; i++) {
    x = x * 1664525u + 1013904223u;
    a.f[i] = ((float)(x >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.1f;
  }
  for (size_t i = 0; i < maxtok; i++) a.tok[i] = (int32_t)((i * 2654435761u) % 512);
  if (!quiet)
    printf("\n  memory-bound kernels (%d thread(s)), debug and gpt2-124m shapes: achieved GB/s "
           "of the bytes each wrapper counts\n  %-16s %10s %10s %10s %10s %8s\n", c->d->threads,
           "kernel", "MB/call", "us/call", "MB/call", "us/call", "GB/s");
  hw->nkernels = 0;
  for (int i = 0; i < NKBENCH; i++) {
    const kbench *b = &kbenches[i];
    double sum_bytes = 0, sum_t = 0, mb[NKSHAPES], us[NKSHAPES];
    for (int j = 0; j < NKSHAPES; j++) {
      kcall kc = {.b = b, .s = &kshapes[j], .a = &a};
      double bytes = 0, t = 0;
      FB_CHECK_GOTO(st, wrapper_bytes(b, &kshapes[j], &a, &bytes), out);
      FB_CHECK_GOTO(st, time_call(c, run_kcall, &kc, quick ? budget : budget / 2, &t), out);
      sum_bytes += bytes;
      sum_t += fmax(t - hw->launch_s, 1e-9);
      mb[j] = bytes * 1e-6;
      us[j] = t * 1e6;
    }
    fb_hw_kernel *e = &hw->kernels[hw->nkernels++];
    snprintf(e->name, sizeof e->name, "%s", b->name);
    e->bw = fb_calib_sig4(sum_bytes / sum_t);
    if (!quiet)
      printf("  %-16s %10.2f %10.1f %10.2f %10.1f %8.2f\n", b->name, mb[0], us[0], mb[1], us[1],
             e->bw * 1e-9);
  }
out:
  free(a.f);
  free(a.tok);
  return st;
}

/* ---- the whole calibration, step by step --------------------------------------------------- */

/* GEMM curve shapes: squares, the transformer shapes of gpt2-124m at B*T = 256 and 1024 and of
 * debug at B*T = 1024; each shape forward (one product) and backward (dinp and dW: two
 * products with transposed operands), sized as the cost model sizes them */
static const int gemm_shapes[][3] = {{64, 64, 64},      {128, 128, 128},   {256, 256, 256},
                                     {512, 512, 512},   {1024, 1024, 1024}, {256, 768, 768},
                                     {256, 768, 2304},  {256, 768, 3072},  {256, 3072, 768},
                                     {1024, 768, 2304}, {1024, 768, 3072}, {1024, 3072, 768},
                                     {1024, 256, 768},  {1024, 256, 1024}, {1024, 1024, 256},
                                     {1024, 256, 256}};
enum { NSH = sizeof gemm_shapes / sizeof gemm_shapes[0], NPT = 2 * NSH };

/* One calibration in progress: the device, the profile being filled and what was measured. */
typedef struct cpu_cal {
  const fb_calib_opts *o;
  bool quiet;
  double budget;     /* seconds per timed call */
  cdev c;
  fb_hardware hw;
  fb_calib_diag dg;
  double peak;       /* FLOP/s: the FMA loop, or a faster GEMM */
  double gs[NPT], grate[NPT]; /* GEMM sizes and rates: fwd and bwd of each shape */
} cpu_cal;

/* The FMA peak and the STREAM triad. */
static void step_peaks(cpu_cal *cc, int threads) {
  fb_blas_set_threads(threads); /* as the runner does: GEMMs and kernels use `threads` */
  cc->peak = fb_fma_peak(threads, cc->o->quick ? 2000000 : 8000000, 3);
  double triad = measure_triad(threads, cc->o->quick);
  cc->dg.fma_peak = cc->peak;
  cc->dg.nominal_peak = nominal_peak();
  cc->dg.triad = triad;
  cc->hw.peak_fp32 = cc->hw.peak_bf16 = cc->peak; /* the cpu device computes in fp32 only */
  cc->hw.mem_bw = triad;
}

/* Per-kernel overhead (16 elements) and the elementwise kernels' share of the triad. */
static fb_status step_overhead(cpu_cal *cc) {
  cdev *c = &cc->c;
  add_arg tiny = {.n = 16}, big = {.n = cc->o->quick ? (size_t)8 << 20 : (size_t)16 << 20};
  double t_tiny = 0, t_big = 0;
  fb_status st;
  FB_CHECK_GOTO(st, zalloc(c, tiny.n * 4, &tiny.a), out);
  FB_CHECK_GOTO(st, zalloc(c, tiny.n * 4, &tiny.b), out);
  FB_CHECK_GOTO(st, time_call(c, run_add, &tiny, cc->budget / 4, &t_tiny), out);
  FB_CHECK_GOTO(st, zalloc(c, big.n * 4, &big.a), out);
  FB_CHECK_GOTO(st, zalloc(c, big.n * 4, &big.b), out);
  FB_CHECK_GOTO(st, time_call(c, run_add, &big, cc->budget, &t_big), out);
  cc->hw.launch_s = t_tiny;
  double add_bw = 3.0 * big.n * 4 / fmax(t_big - t_tiny, 1e-9);
  cc->hw.mem_eff = fmin(1.0, add_bw / cc->dg.triad);
  cc->dg.add_bw = add_bw;
  cc->dg.add_bytes = 2.0 * big.n * 4;
  cc->dg.llc_bytes = llc_bytes();
out:
  fb_free(c->d, &tiny.a, NULL);
  fb_free(c->d, &tiny.b, NULL);
  fb_free(c->d, &big.a, NULL);
  fb_free(c->d, &big.b, NULL);
  return st;
}

/* Shape i forward and backward: rates (less the launch overhead) into gs/grate. */
static fb_status time_gemm_shape(cpu_cal *cc, int i) {
  cdev *c = &cc->c;
  gemm_arg g = {.N = gemm_shapes[i][0], .C = gemm_shapes[i][1], .OC = gemm_shapes[i][2]};
  double t = 0, tb = 0;
  fb_status st;
  FB_CHECK_GOTO(st, zalloc(c, (size_t)g.N * g.OC * 4, &g.out), out);
  FB_CHECK_GOTO(st, zalloc(c, (size_t)g.N * g.C * 4, &g.inp), out);
  FB_CHECK_GOTO(st, zalloc(c, (size_t)g.C * g.OC * 4, &g.w), out);
  FB_CHECK_GOTO(st, zalloc(c, (size_t)g.N * g.C * 4, &g.dinp), out);
  FB_CHECK_GOTO(st, zalloc(c, (size_t)g.C * g.OC * 4, &g.dw), out);
  FB_CHECK_GOTO(st, time_call(c, run_gemm, &g, cc->budget / 2, &t), out);
  FB_CHECK_GOTO(st, time_call(c, run_gemm_bwd, &g, cc->budget / 2, &tb), out);
  double mnk = (double)g.N * g.C * g.OC;
  cc->gs[2 * i] = cbrt(mnk);
  cc->grate[2 * i] = 2.0 * mnk / fmax(t - cc->hw.launch_s, 1e-9);
  cc->gs[2 * i + 1] = cbrt(2.0 * mnk);
  cc->grate[2 * i + 1] = 4.0 * mnk / fmax(tb - cc->hw.launch_s, 1e-9);
out:
  fb_free(c->d, &g.out, NULL);
  fb_free(c->d, &g.inp, NULL);
  fb_free(c->d, &g.w, NULL);
  fb_free(c->d, &g.dinp, NULL);
  fb_free(c->d, &g.dw, NULL);
  return st;
}

/* The GEMM curve over the micro-benchmarks (the in-step refit replaces it later). */
static fb_status step_gemm_curve(cpu_cal *cc) {
  for (int i = 0; i < NSH; i++) FB_TRY(time_gemm_shape(cc, i));
  double best_gemm = 0;
  for (int i = 0; i < NPT; i++) best_gemm = fmax(best_gemm, cc->grate[i]);
  cc->dg.best_gemm = best_gemm;
  if (best_gemm > cc->peak) { /* within timing noise (beyond it the check rejects the run): the
                                 GEMMs prove a higher peak */
    if (!cc->quiet)
      printf("calibrate: warning: a GEMM reached %.1f GFLOP/s, above the measured FMA peak %.1f; "
             "using the GEMM rate as the peak\n", best_gemm * 1e-9, cc->peak * 1e-9);
    cc->peak = best_gemm;
    cc->hw.peak_fp32 = cc->hw.peak_bf16 = cc->peak;
  }
  /* the curve over the shapes the steps have (FB_CALIB_GEMM_MIN_S, calibrate_check.c) */
  double fs[NPT], frate[NPT];
  int nfit = 0;
  for (int i = 0; i < NPT; i++)
    if (cc->gs[i] >= FB_CALIB_GEMM_MIN_S) {
      fs[nfit] = cc->gs[i];
      frate[nfit++] = cc->grate[i];
    }
  cc->dg.micro_gemm_rms = fb_calibrate_fit_gemm(fs, frate, NULL, nfit, cc->peak,
                                                &cc->hw.gemm_max_eff, &cc->hw.gemm_half_size);
  return FB_OK;
}

/* Attention fwd+bwd (gpt2-124m heads) against the GEMM curve at its size. */
static fb_status step_attention(cpu_cal *cc) {
  cdev *c = &cc->c;
  attn_arg at = {.B = cc->o->quick ? 1 : 2, .T = 256, .H = 12, .hd = 64};
  size_t act = (size_t)at.B * at.T * at.H * at.hd * 4, lse = (size_t)at.B * at.H * at.T * 4;
  fb_buf *bufs[] = {&at.q, &at.k, &at.v, &at.out, &at.dq, &at.dk, &at.dv, &at.dout};
  enum { NB = sizeof bufs / sizeof bufs[0] };
  double t = 0;
  fb_status st;
  for (size_t i = 0; i < NB; i++) FB_CHECK_GOTO(st, zalloc(c, act, bufs[i]), out);
  FB_CHECK_GOTO(st, zalloc(c, lse, &at.lse), out);
  FB_CHECK_GOTO(st, zalloc(c, fb_attention_scratch_bytes(c->d, at.B, at.T, at.H, at.H, at.hd),
                           &at.scratch), out);
  FB_CHECK_GOTO(st, time_call(c, run_attn, &at, cc->budget, &t), out);
  /* the kernel wrappers' FLOP count: (2 + 5) causal products + softmax work */
  double bhtt = (double)at.B * at.H * at.T * at.T;
  double flops = 7 * 2.0 * bhtt * at.hd * 0.5 + 2 * 5.0 * bhtt * 0.5;
  double size = cbrt((double)at.T * at.T * at.hd * at.B * at.H);
  double rate = flops / fmax(t - 2 * cc->hw.launch_s, 1e-9);
  cc->dg.attn_raw = rate / (cc->peak * fb_cost_gemm_efficiency(&cc->hw, size));
  cc->hw.attn_eff = fmin(1.0, cc->dg.attn_raw);
  if (!cc->quiet)
    printf("  attention fwd+bwd B=%d T=%d H=%d hd=%d: %.2f ms, %.1f GFLOP/s -> efficiency %.3f "
           "of a GEMM\n", at.B, at.T, at.H, at.hd, t * 1e3, rate * 1e-9, cc->hw.attn_eff);
out:
  for (size_t i = 0; i < NB; i++) fb_free(c->d, bufs[i], NULL);
  fb_free(c->d, &at.lse, NULL);
  fb_free(c->d, &at.scratch, NULL);
  return st;
}

/* A GEMM while another thread streams memory (a comm worker's copies): its slowdown. */
static fb_status step_overlap(cpu_cal *cc) {
  cdev *c = &cc->c;
  gemm_arg g = {.N = 512, .C = 768, .OC = 3072};
  double alone = 0, shared = 0;
  streamer sm = {.n = (size_t)8 << 20};
  bool started = false;
  fb_status st;
  FB_CHECK_GOTO(st, zalloc(c, (size_t)g.N * g.OC * 4, &g.out), out);
  FB_CHECK_GOTO(st, zalloc(c, (size_t)g.N * g.C * 4, &g.inp), out);
  FB_CHECK_GOTO(st, zalloc(c, (size_t)g.C * g.OC * 4, &g.w), out);
  FB_CHECK_GOTO(st, time_call(c, run_gemm, &g, cc->budget, &alone), out);
  sm.a = calloc(sm.n, sizeof(float));
  sm.b = calloc(sm.n, sizeof(float));
  pthread_t th;
  if (sm.a && sm.b && pthread_create(&th, NULL, stream_thread, &sm) == 0) {
    started = true;
    st = time_call(c, run_gemm, &g, cc->budget, &shared);
    sm.stop = 1;
    pthread_join(th, NULL);
  }
  if (st == FB_OK) {
    cc->hw.overlap_slowdown = started ? fmin(100.0, fmax(1.0, shared / alone)) : 1.0;
    if (started) cc->dg.overlap_raw = shared / alone;
  }
out:
  free(sm.a);
  free(sm.b);
  fb_free(c->d, &g.out, NULL);
  fb_free(c->d, &g.inp, NULL);
  fb_free(c->d, &g.w, NULL);
  return st;
}

/* The machine's memory and how its host drives the cpu device. */
static void step_machine(cpu_cal *cc) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  cc->hw.mem_capacity = pages > 0 && psize > 0 ? (int64_t)pages * psize : (int64_t)1 << 30;
  cc->hw.mem_capacity = cc->hw.mem_capacity / (1 << 20) * (1 << 20);
  cc->hw.host_runs_ahead = false; /* the cpu device runs compute on the calling thread */
}

static void print_summary(const cpu_cal *cc) {
  const fb_hardware *hw = &cc->hw;
  printf("\n  sgemm through the cpu device (matmul_fwd) repeated on warm buffers, against the "
         "in-step fit rate = peak * %.3f * s / (s + %.0f), s = cbrt(m*n*k)\n", hw->gemm_max_eff,
         hw->gemm_half_size);
  printf("  %6s %6s %6s %12s %12s %9s %12s %12s %9s\n", "N", "C", "OC", "fwd GFLOP/s", "model",
         "error %", "bwd GFLOP/s", "model", "error %");
  for (int i = 0; i < NSH; i++) {
    double mf = cc->peak * fb_cost_gemm_efficiency(hw, cc->gs[2 * i]);
    double mb = cc->peak * fb_cost_gemm_efficiency(hw, cc->gs[2 * i + 1]);
    const double *r = &cc->grate[2 * i];
    printf("  %6d %6d %6d %12.1f %12.1f %9.1f %12.1f %12.1f %9.1f\n", gemm_shapes[i][0],
           gemm_shapes[i][1], gemm_shapes[i][2], r[0] * 1e-9, mf * 1e-9,
           100 * (mf - r[0]) / r[0], r[1] * 1e-9, mb * 1e-9, 100 * (mb - r[1]) / r[1]);
  }
  printf("\n  %-34s %12.1f GFLOP/s\n", "fp32 FMA peak", cc->peak * 1e-9);
  printf("  %-34s %12.2f GB/s\n", "memory bandwidth (triad)", cc->dg.triad * 1e-9);
  printf("  %-34s %12.2f GB/s (%.0f%% of triad)\n", "elementwise kernel (add)",
         cc->dg.add_bw * 1e-9, 100 * hw->mem_eff);
  printf("  %-34s %12.2f us\n", "kernel overhead (16 elements)", hw->launch_s * 1e6);
  printf("  %-34s %12.3f x\n", "GEMM slowdown under memory traffic", hw->overlap_slowdown);
  printf("  %-34s %12.2f GiB\n", "memory", (double)hw->mem_capacity / 1073741824.0);
}

fb_status fb_calibrate(const fb_calib_opts *o, bool quiet, fb_hardware *out, fb_calib_diag *diag) {
  const int threads = o->threads > 0 ? o->threads : 1;
  cpu_cal cc = {.o = o, .quiet = quiet, .budget = o->quick ? 0.03 : 0.2};
  fb_calib_diag_init(&cc.dg);
  snprintf(cc.hw.name, sizeof cc.hw.name, "cpu");
  fb_status st = FB_OK;
  /* (the machine's load is checked around this by fb_calibrate_main) */
  if (!quiet) printf("calibrate: %d thread(s), %s\n", threads, fb_blas_describe());
  /* progress on stderr, per measurement; in place only when it cannot split stdout's lines */
  fb_progress prog;
  fb_progress_start(&prog, "calibrate: measurement", 8, quiet || !isatty(STDOUT_FILENO));
  fb_progress_update(&prog, 0, "FMA peak and memory bandwidth");
  step_peaks(&cc, threads);
  FB_CHECK_GOTO(st, cdev_open(threads, 0, 1, &cc.c), out);
  fb_progress_update(&prog, 1, "kernel overhead");
  FB_CHECK_GOTO(st, step_overhead(&cc), out);
  fb_progress_update(&prog, 2, "kernels");
  FB_CHECK_GOTO(st, measure_kernels(&cc.c, cc.budget, o->quick, quiet, &cc.hw), out);
  fb_progress_update(&prog, 3, "GEMM curve");
  FB_CHECK_GOTO(st, step_gemm_curve(&cc), out);
  fb_progress_update(&prog, 4, "attention");
  FB_CHECK_GOTO(st, step_attention(&cc), out);
  fb_progress_update(&prog, 5, "GEMM slowdown under memory traffic");
  FB_CHECK_GOTO(st, step_overlap(&cc), out);
  /* the local communicator: 2 rank threads (sets the links, shared_host, collectives and
   * devices_per_node) */
  fb_progress_update(&prog, 6, "local communicator");
  FB_CHECK_GOTO(st, fb_calibrate_local_comm(&cc.hw, "cpu", o->quick, quiet, &cc.dg.comm_rms),
                out);
  step_machine(&cc);
  /* the compute figures a step sees: refit on the ops of real single-rank steps */
  fb_progress_update(&prog, 7, "in-step rates");
  FB_CHECK_GOTO(st, fb_calibrate_in_step(&cc.hw, "cpu", "ddp", threads, o->quick, quiet, &cc.dg),
                out);
  fb_progress_update(&prog, 8, NULL);
  fb_progress_end(&prog);
  if (!quiet) print_summary(&cc);
  st = fb_hardware_validate(&cc.hw, "calibrate");
  if (st == FB_OK) *out = cc.hw;
  if (st == FB_OK && diag) *diag = cc.dg;
out:
  fb_progress_end(&prog);
  cdev_close(&cc.c);
  return st;
}
