/* `fsdpbench calibrate`: measures this machine through the executor's own code paths and
 * fits the hardware profile's parameters to them:
 *  - fp32 FMA peak (a register-only FMA loop on every thread);
 *  - the GEMM efficiency curve: the cpu device's matmul (forward and backward) at square and
 *    transformer shapes,
 *    fitted to rate = peak * E * s / (s + h) (least squares on log rate);
 *  - attention efficiency: the cpu device's attention fwd+bwd against that curve;
 *  - memory bandwidth (STREAM triad) and the fraction the device's elementwise kernels reach;
 *  - per-kernel overhead (a 16-element kernel);
 *  - each memory-bound kernel of the cpu table at the debug and gpt2-124m shapes: its achieved
 *    rate of the bytes its wrapper counts (the profile's kernel_gbs table);
 *  - then, in situ (calibrate_steps.c), short single-rank training runs whose recorded ops
 *    refit the GEMM curve, the attention efficiency and the kernel table: what the
 *    simulator costs is kernels as a step runs them, not repeated on warm buffers; with 2 or
 *    more threads, the same again on ddp runs of that many 1-thread rank threads (the split
 *    figures a world of that many ranks on this machine runs at);
 *  - the slowdown of a GEMM while another thread streams memory (a comm worker's copies);
 *  - the local communicator (calibrate_comm.c): 2 rank threads idle and beside GEMMs.
 * Under mpirun (--comm mpi) it measures only the MPI communicator (calibrate_mpi.c) and
 * writes it over the compute figures of a base profile. --repeat N keeps the median of each
 * figure over N runs. Micro-benchmark timings are the lower quartile of repeated calls.
 * Writes the profile (default models/hardware/cpu.yaml, cpu-mpi.yaml under MPI) and prints
 * what it measured, unless it refuses (calibrate_check.c): an existing file without --force,
 * a machine too loaded to measure (after --retries), an implausible fitted figure. It does
 * not simulate anything. */
#define _GNU_SOURCE
#include "calibrate.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../engine/comm/comm.h"
#include "../engine/config/config.h"
#include "../engine/core/progress.h"
#include "../engine/device/device.h"
#include "../engine/device/device_cpu.h"
#include "../engine/device/kernels.h"
#include "../engine/ops/blas.h"
#include "../engine/ops/ops.h"
#include "calibrate_comm.h"
#include "../engine/sim/cost_model.h"


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

/* x rounded to 4 significant digits (0 stays 0). */
static double sig4(double x) {
  if (!(x != 0) || !isfinite(x)) return x;
  double p = pow(10.0, 3 - floor(log10(fabs(x))));
  return round(x * p) / p;
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
    e->bw = sig4(sum_bytes / sum_t);
    if (!quiet)
      printf("  %-16s %10.2f %10.1f %10.2f %10.1f %8.2f\n", b->name, mb[0], us[0], mb[1], us[1],
             e->bw * 1e-9);
  }
out:
  free(a.f);
  free(a.tok);
  return st;
}

/* ---- fits ------------------------------------------------------------------------------------ */

/* rate(s) = peak * E * s / (s + h), least squares on log(rate) (relative errors, so neither
 * the big nor the small shapes dominate): for each h on a log grid the best log E is the mean
 * residual; E is capped at 1. Returns the relative RMS residual of the fitted curve. */
double fb_calibrate_fit_gemm(const double *s, const double *rate, int n, double peak, double *E,
                             double *h) {
  double best_err = INFINITY;
  *E = 1;
  *h = 1;
  for (double hh = 1; hh <= FB_CALIB_GEMM_H_MAX; hh *= 1.05) {
    double mean = 0;
    for (int i = 0; i < n; i++) mean += log(rate[i] / (peak * s[i] / (s[i] + hh)));
    mean /= n;
    double e = fmin(1.0, exp(mean)), err = 0;
    for (int i = 0; i < n; i++) {
      double r = log(rate[i]) - log(peak * e * s[i] / (s[i] + hh));
      err += r * r;
    }
    if (err < best_err) {
      best_err = err;
      *E = e;
      *h = hh;
    }
  }
  double sq = 0;
  for (int i = 0; i < n; i++) {
    double r = peak * *E * s[i] / (s[i] + *h) / rate[i] - 1;
    sq += r * r;
  }
  return n > 0 ? sqrt(sq / n) : 0;
}

/* ---- the whole calibration ------------------------------------------------------------------- */

fb_status fb_calibrate(const fb_calib_opts *o, bool quiet, fb_hardware *out, fb_calib_diag *diag) {
  const int threads = o->threads > 0 ? o->threads : 1;
  fb_calib_diag dg;
  fb_calib_diag_init(&dg);
  const double budget = o->quick ? 0.03 : 0.2;
  fb_status st = FB_OK;
  cdev c = {0};
  fb_hardware hw;
  memset(&hw, 0, sizeof hw);
  snprintf(hw.name, sizeof hw.name, "cpu");

  /* (the machine's load is checked around this by fb_calibrate_main) */
  if (!quiet) printf("calibrate: %d thread(s), %s\n", threads, fb_blas_describe());
  /* progress on stderr, per measurement; in place only when it cannot split stdout's lines */
  fb_progress prog;
  fb_progress_start(&prog, "calibrate: measurement", 8, quiet || !isatty(STDOUT_FILENO));
  fb_progress_update(&prog, 0, "FMA peak and memory bandwidth");
  fb_blas_set_threads(threads); /* as the runner does: GEMMs and kernels use `threads` */
  double peak = fb_fma_peak(threads, o->quick ? 2000000 : 8000000, 3);
  double triad = measure_triad(threads, o->quick);
  dg.fma_peak = peak;
  dg.nominal_peak = nominal_peak();
  dg.triad = triad;
  hw.peak_fp32 = peak;
  hw.peak_bf16 = peak; /* the cpu device computes in fp32 only */
  hw.mem_bw = triad;

  FB_CHECK_GOTO(st, cdev_open(threads, 0, 1, &c), out);
  fb_progress_update(&prog, 1, "kernel overhead");

  /* per-kernel overhead and the elementwise kernels' share of the triad bandwidth */
  add_arg tiny = {.n = 16}, big = {.n = o->quick ? (size_t)8 << 20 : (size_t)16 << 20};
  double t_tiny, t_big;
  FB_CHECK_GOTO(st, zalloc(&c, tiny.n * 4, &tiny.a), out);
  FB_CHECK_GOTO(st, zalloc(&c, tiny.n * 4, &tiny.b), out);
  FB_CHECK_GOTO(st, time_call(&c, run_add, &tiny, budget / 4, &t_tiny), out);
  FB_CHECK_GOTO(st, zalloc(&c, big.n * 4, &big.a), out);
  FB_CHECK_GOTO(st, zalloc(&c, big.n * 4, &big.b), out);
  FB_CHECK_GOTO(st, time_call(&c, run_add, &big, budget, &t_big), out);
  hw.launch_s = t_tiny;
  double add_bw = 3.0 * big.n * 4 / fmax(t_big - t_tiny, 1e-9);
  hw.mem_eff = fmin(1.0, add_bw / triad);
  dg.add_bw = add_bw;
  dg.add_bytes = 2.0 * big.n * 4;
  dg.llc_bytes = llc_bytes();
  fb_free(c.d, &tiny.a, NULL);
  fb_free(c.d, &tiny.b, NULL);
  fb_free(c.d, &big.a, NULL);
  fb_free(c.d, &big.b, NULL);

  fb_progress_update(&prog, 2, "kernels");
  FB_CHECK_GOTO(st, measure_kernels(&c, budget, o->quick, quiet, &hw), out);
  fb_progress_update(&prog, 3, "GEMM curve");

  /* GEMM curve: squares, the transformer shapes of gpt2-124m at B*T = 256 and 1024 and of
   * debug at B*T = 1024; each shape forward (one product) and backward (dinp and dW: two
   * products with transposed operands), sized as the cost model sizes them */
  static const int shapes[][3] = {{64, 64, 64},      {128, 128, 128},   {256, 256, 256},
                                  {512, 512, 512},   {1024, 1024, 1024}, {256, 768, 768},
                                  {256, 768, 2304},  {256, 768, 3072},  {256, 3072, 768},
                                  {1024, 768, 2304}, {1024, 768, 3072}, {1024, 3072, 768},
                                  {1024, 256, 768},  {1024, 256, 1024}, {1024, 1024, 256},
                                  {1024, 256, 256}};
  enum { NSH = sizeof shapes / sizeof shapes[0], NPT = 2 * NSH };
  double gs[NPT], grate[NPT];
  for (int i = 0; i < NSH; i++) {
    gemm_arg g = {.N = shapes[i][0], .C = shapes[i][1], .OC = shapes[i][2]};
    FB_CHECK_GOTO(st, zalloc(&c, (size_t)g.N * g.OC * 4, &g.out), out);
    FB_CHECK_GOTO(st, zalloc(&c, (size_t)g.N * g.C * 4, &g.inp), out);
    FB_CHECK_GOTO(st, zalloc(&c, (size_t)g.C * g.OC * 4, &g.w), out);
    FB_CHECK_GOTO(st, zalloc(&c, (size_t)g.N * g.C * 4, &g.dinp), out);
    FB_CHECK_GOTO(st, zalloc(&c, (size_t)g.C * g.OC * 4, &g.dw), out);
    double t, tb;
    st = time_call(&c, run_gemm, &g, budget / 2, &t);
    if (st == FB_OK) st = time_call(&c, run_gemm_bwd, &g, budget / 2, &tb);
    fb_free(c.d, &g.out, NULL);
    fb_free(c.d, &g.inp, NULL);
    fb_free(c.d, &g.w, NULL);
    fb_free(c.d, &g.dinp, NULL);
    fb_free(c.d, &g.dw, NULL);
    if (st != FB_OK) goto out;
    double mnk = (double)g.N * g.C * g.OC;
    gs[2 * i] = cbrt(mnk);
    grate[2 * i] = 2.0 * mnk / fmax(t - hw.launch_s, 1e-9);
    gs[2 * i + 1] = cbrt(2.0 * mnk);
    grate[2 * i + 1] = 4.0 * mnk / fmax(tb - hw.launch_s, 1e-9);
  }
  double best_gemm = 0;
  for (int i = 0; i < NPT; i++) best_gemm = fmax(best_gemm, grate[i]);
  dg.best_gemm = best_gemm;
  if (best_gemm > peak) { /* within timing noise (beyond it the check rejects the run): the
                             GEMMs prove a higher peak */
    if (!quiet)
      printf("calibrate: warning: a GEMM reached %.1f GFLOP/s, above the measured FMA peak %.1f; "
             "using the GEMM rate as the peak\n", best_gemm * 1e-9, peak * 1e-9);
    peak = best_gemm;
    hw.peak_fp32 = hw.peak_bf16 = peak;
  }
  /* the curve over the shapes the steps have (FB_CALIB_GEMM_MIN_S, calibrate_check.c) */
  double fs[NPT], frate[NPT];
  int nfit = 0;
  for (int i = 0; i < NPT; i++)
    if (gs[i] >= FB_CALIB_GEMM_MIN_S) {
      fs[nfit] = gs[i];
      frate[nfit++] = grate[i];
    }
  dg.micro_gemm_rms =
      fb_calibrate_fit_gemm(fs, frate, nfit, peak, &hw.gemm_max_eff, &hw.gemm_half_size);

  /* attention fwd+bwd (gpt2-124m heads) against the GEMM curve at its size */
  fb_progress_update(&prog, 4, "attention");
  {
    attn_arg at = {.B = o->quick ? 1 : 2, .T = 256, .H = 12, .hd = 64};
    size_t act = (size_t)at.B * at.T * at.H * at.hd * 4;
    size_t lse = (size_t)at.B * at.H * at.T * 4;
    fb_buf *bufs[] = {&at.q, &at.k, &at.v, &at.out, &at.dq, &at.dk, &at.dv, &at.dout};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
      FB_CHECK_GOTO(st, zalloc(&c, act, bufs[i]), out);
    FB_CHECK_GOTO(st, zalloc(&c, lse, &at.lse), out);
    FB_CHECK_GOTO(st, zalloc(&c, fb_attention_scratch_bytes(c.d, at.B, at.T, at.H, at.H, at.hd),
                             &at.scratch), out);
    double t;
    st = time_call(&c, run_attn, &at, budget, &t);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) fb_free(c.d, bufs[i], NULL);
    fb_free(c.d, &at.lse, NULL);
    fb_free(c.d, &at.scratch, NULL);
    if (st != FB_OK) goto out;
    /* the kernel wrappers' FLOP count: (2 + 5) causal products + softmax work */
    double bhtt = (double)at.B * at.H * at.T * at.T;
    double flops = 7 * 2.0 * bhtt * at.hd * 0.5 + 2 * 5.0 * bhtt * 0.5;
    double size = cbrt((double)at.T * at.T * at.hd * at.B * at.H);
    double rate = flops / fmax(t - 2 * hw.launch_s, 1e-9);
    dg.attn_raw = rate / (peak * fb_cost_gemm_efficiency(&hw, size));
    hw.attn_eff = fmin(1.0, dg.attn_raw);
    if (!quiet)
      printf("  attention fwd+bwd B=%d T=%d H=%d hd=%d: %.2f ms, %.1f GFLOP/s -> efficiency %.3f "
             "of a GEMM\n", at.B, at.T, at.H, at.hd, t * 1e3, rate * 1e-9, hw.attn_eff);
  }

  /* compute slowdown while another thread streams memory (a comm worker's copies) */
  fb_progress_update(&prog, 5, "GEMM slowdown under memory traffic");
  {
    gemm_arg g = {.N = 512, .C = 768, .OC = 3072};
    FB_CHECK_GOTO(st, zalloc(&c, (size_t)g.N * g.OC * 4, &g.out), out);
    FB_CHECK_GOTO(st, zalloc(&c, (size_t)g.N * g.C * 4, &g.inp), out);
    FB_CHECK_GOTO(st, zalloc(&c, (size_t)g.C * g.OC * 4, &g.w), out);
    double alone = 0, shared = 0;
    st = time_call(&c, run_gemm, &g, budget, &alone);
    streamer sm = {.n = (size_t)8 << 20};
    sm.a = calloc(sm.n, sizeof(float));
    sm.b = calloc(sm.n, sizeof(float));
    pthread_t th;
    bool started = false;
    if (st == FB_OK && sm.a && sm.b && pthread_create(&th, NULL, stream_thread, &sm) == 0) {
      started = true;
      st = time_call(&c, run_gemm, &g, budget, &shared);
      sm.stop = 1;
      pthread_join(th, NULL);
    }
    free(sm.a);
    free(sm.b);
    fb_free(c.d, &g.out, NULL);
    fb_free(c.d, &g.inp, NULL);
    fb_free(c.d, &g.w, NULL);
    if (st != FB_OK) goto out;
    hw.overlap_slowdown = started ? fmin(100.0, fmax(1.0, shared / alone)) : 1.0;
    if (started) dg.overlap_raw = shared / alone;
  }

  /* the local communicator: 2 rank threads (sets the links, shared_host, collectives and
   * devices_per_node) */
  fb_progress_update(&prog, 6, "local communicator");
  FB_CHECK_GOTO(st, fb_calibrate_local_comm(&hw, o->quick, quiet, &dg.comm_rms), out);

  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  hw.mem_capacity = pages > 0 && psize > 0 ? (int64_t)pages * psize : (int64_t)1 << 30;
  hw.mem_capacity = hw.mem_capacity / (1 << 20) * (1 << 20);
  hw.host_runs_ahead = false; /* the cpu device runs compute on the calling thread */

  /* the compute figures a step sees: refit on the ops of real single-rank steps */
  fb_progress_update(&prog, 7, "in-step rates");
  FB_CHECK_GOTO(st, fb_calibrate_in_step(&hw, threads, o->quick, quiet, &dg), out);
  fb_progress_update(&prog, 8, NULL);
  fb_progress_end(&prog);

  if (!quiet) {
    printf("\n  sgemm through the cpu device (matmul_fwd) repeated on warm buffers, against the "
           "in-step fit rate = peak * %.3f * s / (s + %.0f), s = cbrt(m*n*k)\n", hw.gemm_max_eff,
           hw.gemm_half_size);
    printf("  %6s %6s %6s %12s %12s %9s %12s %12s %9s\n", "N", "C", "OC", "fwd GFLOP/s",
           "model", "error %", "bwd GFLOP/s", "model", "error %");
    for (int i = 0; i < NSH; i++) {
      double mf = peak * fb_cost_gemm_efficiency(&hw, gs[2 * i]);
      double mb = peak * fb_cost_gemm_efficiency(&hw, gs[2 * i + 1]);
      printf("  %6d %6d %6d %12.1f %12.1f %9.1f %12.1f %12.1f %9.1f\n", shapes[i][0],
             shapes[i][1], shapes[i][2], grate[2 * i] * 1e-9, mf * 1e-9,
             100 * (mf - grate[2 * i]) / grate[2 * i], grate[2 * i + 1] * 1e-9, mb * 1e-9,
             100 * (mb - grate[2 * i + 1]) / grate[2 * i + 1]);
    }
    printf("\n  %-34s %12.1f GFLOP/s\n", "fp32 FMA peak", peak * 1e-9);
    printf("  %-34s %12.2f GB/s\n", "memory bandwidth (triad)", triad * 1e-9);
    printf("  %-34s %12.2f GB/s (%.0f%% of triad)\n", "elementwise kernel (add)", add_bw * 1e-9,
           100 * hw.mem_eff);
    printf("  %-34s %12.2f us\n", "kernel overhead (16 elements)", hw.launch_s * 1e6);
    printf("  %-34s %12.3f x\n", "GEMM slowdown under memory traffic", hw.overlap_slowdown);
    printf("  %-34s %12.2f GiB\n", "memory", (double)hw.mem_capacity / 1073741824.0);
  }
  st = fb_hardware_validate(&hw, "calibrate");
  if (st == FB_OK) *out = hw;
  if (st == FB_OK && diag) *diag = dg;
out:
  fb_progress_end(&prog);
  cdev_close(&c);
  return st;
}

/* Large-GEMM rate a profile predicts (s = 1024): how undisturbed its run was. */
static double gemm_score(const fb_hardware *hw) {
  return hw->peak_fp32 * fb_cost_gemm_efficiency(hw, 1024.0);
}

/* Index of the run with the median of key(run) (the lower middle for an even count). */
static int median_run(const fb_hardware *runs, int n, double (*key)(const fb_hardware *)) {
  int best = 0;
  for (int i = 0; i < n; i++) {
    int below = 0, equal_before = 0;
    for (int j = 0; j < n; j++) {
      if (key(&runs[j]) < key(&runs[i])) below++;
      else if (key(&runs[j]) == key(&runs[i]) && j < i) equal_before++;
    }
    if (below + equal_before == (n - 1) / 2) best = i;
  }
  return best;
}

static double key_mem(const fb_hardware *h) { return h->mem_bw; }
static double key_launch(const fb_hardware *h) { return h->launch_s; }
static double key_comm(const fb_hardware *h) { return h->intra_bw; }

/* Each kernel of table k[0..nk) set to the median of the runs that measured it (bw_of reads
 * a run's rate for a name, 0 = not measured). */
static void median_kernels(const fb_hardware *runs, int n, fb_hw_kernel *k, int nk,
                           double (*bw_of)(const fb_hardware *, const char *)) {
  for (int i = 0; i < nk; i++) {
    double v[100];
    int nv = 0;
    for (int r = 0; r < n && nv < 100; r++) {
      double bw = bw_of(&runs[r], k[i].name);
      if (bw > 0) v[nv++] = bw;
    }
    if (nv > 0) k[i].bw = fb_calib_median(v, nv);
  }
}

/* The median of n runs, figure by figure: a step on this machine meets its typical speed, not
 * its best minute (the fastest of three runs predicted steps ~2x too fast here). Figures that
 * belong together come from one run: the compute figures (peak, GEMM curve, attention,
 * overlap slowdown) from the run with the median large-GEMM rate, the memory bandwidth with its
 * efficiency, the communicator's bandwidth with its latency. Each kernel rate is the median
 * of the runs that measured that kernel. */
static void median_of_runs(const fb_hardware *runs, int n, fb_hardware *out) {
  fb_hardware m = runs[median_run(runs, n, gemm_score)];
  const fb_hardware *mb = &runs[median_run(runs, n, key_mem)];
  m.mem_bw = mb->mem_bw;
  m.mem_eff = mb->mem_eff;
  m.launch_s = runs[median_run(runs, n, key_launch)].launch_s;
  const fb_hardware *cm = &runs[median_run(runs, n, key_comm)];
  m.intra_bw = m.inter_bw = cm->intra_bw;
  m.intra_lat = m.inter_lat = cm->intra_lat;
  median_kernels(runs, n, m.kernels, m.nkernels, fb_hardware_kernel_bw);
  median_kernels(runs, n, m.split_kernels, m.nsplit_kernels, fb_hardware_split_kernel_bw);
  *out = m;
}

/* "model name" of /proc/cpuinfo, or "unknown CPU". */
static void cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10)) continue;
    const char *v = strchr(line, ':');
    if (!v) break;
    v += strspn(v + 1, " \t") + 1;
    snprintf(buf, n, "%.*s", (int)strcspn(v, "\n"), v);
    break;
  }
  fclose(f);
}

#define USAGE_LINE                                                                             \
  "usage: fsdpbench calibrate [--out FILE] [--force] [--threads N] [--repeat N] [--retries N] "  \
  "[--ignore-load] [--comm local|mpi] [--base PROFILE] [--quick]\n"

static int usage(const char *msg) {
  fprintf(stderr, "fsdpbench calibrate: error: %s\n" USAGE_LINE, msg);
  return FB_EUSAGE;
}

/* One `calibrate` invocation. */
typedef struct calib_cli {
  fb_calib_opts o;
  int repeat, retries;
  bool mpi, force, ignore_load;
  char path[1024], base[1024];
} calib_cli;

/* The figures whose spread across --repeat runs is checked and recorded: the compute ceiling,
 * the GEMM rate the curve gives a large product, the memory bandwidth, the communicator. */
enum { NKEYS = 4 };
static const char *const key_names[NKEYS] = {"peak_tflops_fp32", "GEMM rate at s = 1024",
                                             "mem_bw_gbs", "intra_bw_gbs"};
static double key_value(const fb_hardware *h, int k) {
  switch (k) {
  case 0: return h->peak_fp32;
  case 1: return gemm_score(h);
  case 2: return h->mem_bw;
  default: return h->intra_bw;
  }
}

/* What the load gate saw, for the refusal line and the profile's header. */
typedef struct load_log {
  fb_calib_load before, worst; /* the check before measuring; the one with the most load from
                                  others (before or during) */
  bool have;
  double spread[NKEYS];        /* max / min of each key figure over the repeats (0: one run) */
  bool forced;                 /* --ignore-load let a refusal pass: */
  char forced_load[400];       /* the first load it overrode ("" if none) */
  char forced_spread[200];     /* the first spread it overrode ("" if none) */
} load_log;

/* --ignore-load overrides a refusal: keep the first of each kind for the header. */
static void force(load_log *L, bool spread, const char *why) {
  char *dst = spread ? L->forced_spread : L->forced_load;
  size_t n = spread ? sizeof L->forced_spread : sizeof L->forced_load;
  L->forced = true;
  if (!dst[0]) snprintf(dst, n, "%s", why);
}

/* Reads the load with this job's own share (summed over the processes under MPI: a
 * collective there, every process calls it). */
static fb_status read_load(const calib_cli *c, fb_calib_load *l) {
  double own_share = fb_calib_own_load();
#ifdef FB_HAVE_MPI
  if (c->mpi) FB_TRY(fb_calib_mpi_sum(&own_share));
#endif
  return fb_calib_load_read(c->o.threads, own_share, l);
}

/* Rank 0's verdict (0 go on, 1 refuse or retry) for every process. */
static fb_status share_verdict(const calib_cli *c, int rank, int *verdict) {
#ifdef FB_HAVE_MPI
  if (c->mpi) {
    double v = rank == 0 ? *verdict : 0;
    FB_TRY(fb_calib_mpi_sum(&v));
    *verdict = v > 0.5;
  }
#else
  (void)c;
  (void)rank;
#endif
  return FB_OK;
}

/* Load check at `when`: records it and says whether others' load is above the allowed. */
static fb_status check_load(const calib_cli *c, load_log *L, const char *when, bool first,
                            char *why, size_t nwhy, bool *over) {
  fb_calib_load l;
  FB_TRY(read_load(c, &l));
  if (first) L->before = l;
  if (!L->have || l.others > L->worst.others) L->worst = l;
  L->have = true;
  *over = l.others > l.allowed;
  if (*over) {
    char d[256];
    fb_calib_load_describe(&l, d, sizeof d);
    snprintf(why, nwhy, "%s %s", d, when);
  }
  return FB_OK;
}

/* The compute figures and the local communicator: `repeat` runs; after each, the load. Sets
 * *refused (with why) when the load or the spread of the runs says the machine was busy. */
static fb_status measure_local(const calib_cli *c, load_log *L, fb_hardware *runs,
                               fb_calib_diag *diags, char *why, size_t nwhy, bool *refused) {
  *refused = false;
  for (int run = 0; run < c->repeat; run++) {
    if (c->repeat > 1) printf("\ncalibrate: run %d of %d\n", run + 1, c->repeat);
    FB_TRY(fb_calibrate(&c->o, false, &runs[run], &diags[run]));
    char when[64];
    snprintf(when, sizeof when, "during run %d of %d", run + 1, c->repeat);
    bool over;
    FB_TRY(check_load(c, L, when, false, why, nwhy, &over));
    if (over && !c->ignore_load) {
      *refused = true;
      return FB_OK;
    }
    if (over) force(L, false, why);
  }
  for (int k = 0; k < NKEYS; k++) L->spread[k] = 0;
  if (c->repeat < 2) return FB_OK;
  for (int k = 0; k < NKEYS; k++) {
    double v[100];
    for (int r = 0; r < c->repeat; r++) v[r] = key_value(&runs[r], k);
    L->spread[k] = fb_calib_spread(v, c->repeat);
    const double max = k == NKEYS - 1 ? FB_CALIB_MAX_COMM_SPREAD : FB_CALIB_MAX_SPREAD;
    if (L->spread[k] > max && !*refused) {
      snprintf(why, nwhy, "%s varied %.2fx (max/min over %d repeats), above the allowed %.2fx",
               key_names[k], L->spread[k], c->repeat, max);
      if (c->ignore_load)
        force(L, true, why);
      else
        *refused = true;
    }
  }
  return FB_OK;
}

/* Prints each rejected figure; returns how many. With several runs the profile keeps the
 * median of each figure, so a figure is rejected when it fails in more than half the runs
 * (one disturbed run of three is what the median is for); the first failing run's reason is
 * printed, with how many runs failed it. */
static int check_runs(const fb_hardware *runs, const fb_calib_diag *diags, int n, bool compute) {
  enum { MAXREJ = 32 };
  fb_calib_reject first[MAXREJ];
  int count[MAXREJ] = {0}, nf = 0, more = 0;
  for (int r = 0; r < n; r++) {
    fb_calib_reject rej[MAXREJ];
    int k = fb_calibrate_check_fit(&runs[r], &diags[r], compute, rej, MAXREJ);
    if (k > MAXREJ) more += k - MAXREJ;
    for (int i = 0; i < k && i < MAXREJ; i++) {
      int j = 0;
      while (j < nf && strcmp(first[j].figure, rej[i].figure)) j++;
      if (j == nf && nf < MAXREJ) {
        first[nf] = rej[i];
        if (n > 1) {
          char why[sizeof rej[i].reason + 32];
          snprintf(why, sizeof why, "run %d of %d: %s", r + 1, n, rej[i].reason);
          snprintf(first[nf].reason, sizeof first[nf].reason, "%.*s",
                   (int)sizeof first[nf].reason - 1, why);
        }
        nf++;
      }
      if (j < MAXREJ) count[j]++;
    }
  }
  int bad = 0;
  for (int j = 0; j < nf; j++) {
    if (2 * count[j] <= n) {
      printf("calibrate: warning: %s failed its check in %d of %d runs; the median keeps the "
             "others\n", first[j].figure, count[j], n);
      continue;
    }
    char line[512];
    fb_calib_reject_line(&first[j], line, sizeof line);
    fprintf(stderr, "%s\n", line);
    bad++;
  }
  if (more) fprintf(stderr, "calibrate: ... and %d more rejected figure(s)\n", more);
  return bad + (more > 0);
}

static void append(char *buf, size_t n, const char *s) {
  size_t len = strlen(buf);
  if (len + 1 < n) snprintf(buf + len, n - len, "%s", s);
}

static fb_status write_profile(const calib_cli *c, fb_hardware *hw, int world,
                               const load_log *L) {
  char comment[4096], cpu[160], when[64], cmd[1200], load[1200];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime(&now));
  cpu_model(cpu, sizeof cpu);
  if (c->mpi)
    snprintf(cmd, sizeof cmd, "mpirun -np %d fsdpbench calibrate --comm mpi` over the compute "
             "figures of `%s", world, c->base);
  else
    snprintf(cmd, sizeof cmd, "fsdpbench calibrate --threads %d --repeat %d", c->o.threads,
             c->repeat);
  char blas[256];
  snprintf(blas, sizeof blas, "%s", c->mpi ? "compute figures as in the base profile" : fb_blas_describe());
  /* the load it was measured under, the repeats and their spread, and whether it was forced */
  char d1[256], d2[256], part[400];
  fb_calib_load_describe(&L->before, d1, sizeof d1);
  fb_calib_load_describe(&L->worst, d2, sizeof d2);
  snprintf(load, sizeof load, "Load: %s before measuring; the most from others: %s.\n", d1, d2);
  if (c->mpi || c->repeat < 2) {
    append(load, sizeof load, "Repeats: 1 (no spread).\n");
  } else {
    snprintf(part, sizeof part, "Repeats: %d; spread (max/min):", c->repeat);
    append(load, sizeof load, part);
    for (int k = 0; k < NKEYS; k++) {
      snprintf(part, sizeof part, "%s %s %.3fx", k ? "," : "", key_names[k], L->spread[k]);
      append(load, sizeof load, part);
    }
    snprintf(part, sizeof part, " (allowed %.2fx, the communicator %.2fx).\n", FB_CALIB_MAX_SPREAD,
             FB_CALIB_MAX_COMM_SPREAD);
    append(load, sizeof load, part);
  }
  if (L->forced) {
    append(load, sizeof load, "FORCED with --ignore-load: ");
    append(load, sizeof load, L->forced_load);
    append(load, sizeof load, L->forced_load[0] && L->forced_spread[0] ? "; " : "");
    append(load, sizeof load, L->forced_spread);
    append(load, sizeof load, ".\n");
  }
  snprintf(comment, sizeof comment,
           "This machine, measured by `%s` on %s.\n"
           "CPU: %s, %ld core(s). BLAS: %s.\n%s"
           "Regenerate with the same command on the machine you want to predict; see "
           "docs/simulator.md.\n%s", cmd, when, cpu, sysconf(_SC_NPROCESSORS_ONLN), blas, load,
           c->mpi ? "intra/inter links = the MPI communicator (processes on this machine; run "
                    "jobs with --threads = cores / processes)."
                  : "intra/inter links = the local communicator (ranks are threads sharing "
                    "memory).");
  if (c->mpi) snprintf(hw->name, sizeof hw->name, "cpu-mpi");
  /* measurements carry ~4 significant digits: write them so */
  double *fields[] = {&hw->peak_fp32, &hw->peak_bf16, &hw->gemm_max_eff, &hw->gemm_half_size,
                      &hw->attn_eff, &hw->mem_bw, &hw->mem_eff, &hw->launch_s, &hw->intra_bw,
                      &hw->intra_lat, &hw->inter_bw, &hw->inter_lat, &hw->overlap_slowdown,
                      &hw->split_gemm_max_eff, &hw->split_gemm_half_size, &hw->split_attn_eff};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) *fields[i] = sig4(*fields[i]);
  for (int i = 0; i < hw->nkernels; i++) hw->kernels[i].bw = sig4(hw->kernels[i].bw);
  for (int i = 0; i < hw->nsplit_kernels; i++)
    hw->split_kernels[i].bw = sig4(hw->split_kernels[i].bw);
  return fb_calib_write_profile(c->path, hw, comment, c->force);
}

/* Reads a non-negative integer flag value in [lo, hi]; prints the usage error otherwise. */
static bool int_flag(const char *flag, const char *val, long lo, long hi, int *out) {
  char *end = NULL;
  long n = val ? strtol(val, &end, 10) : 0;
  if (!val || !*val || *end || n < lo || n > hi) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: '%s' is not allowed (want an integer in [%ld, %ld])", flag,
             val ? val : "", lo, hi);
    usage(msg);
    return false;
  }
  *out = (int)n;
  return true;
}

static const char help_text[] =
    USAGE_LINE
    "Measures this machine (GEMM curve, memory bandwidth, kernel overhead, per-kernel\n"
    "rates in training steps, the communicator) and writes a hardware profile.\n"
    "--comm local (default): the local communicator, profile models/hardware/cpu.yaml.\n"
    "--comm mpi (the default under mpirun): run as `mpirun -np 2 fsdpbench calibrate\n"
    "  --comm mpi`; measures the MPI communicator and writes it over the compute\n"
    "  figures of --base PROFILE (default cpu) into models/hardware/cpu-mpi.yaml.\n"
    "--repeat N: N runs, keeping the median of each figure (a step meets this\n"
    "  machine's typical speed, not its best minute).\n"
    "--out FILE: where to write. An existing FILE (such as the committed profile) is\n"
    "  refused (exit 2) before anything is measured; --force overwrites it. The file is\n"
    "  written to a temporary beside it and renamed, never left half-written.\n"
    "Refusals (exit 1, nothing written):\n"
    "  - machine too loaded: before and after each run it reads the 1-minute load\n"
    "    average less its own threads; above (idle cores + 0.25 x the cores it uses), or a\n"
    "    key figure varying more than 1.5x (max/min) across --repeat runs, it waits 10 s\n"
    "    and measures again, --retries N times (default 2), then refuses naming the load\n"
    "    or spread. --ignore-load measures and writes anyway; the profile's header then\n"
    "    says it was forced and the load it saw. The header always records the load,\n"
    "    the repeats and the spread of the key figures.\n"
    "  - rejected figure: every fitted figure is checked, one line each: a fit residual\n"
    "    above 25 % (relative RMS), a rate above its measured ceiling or below 1 % of it,\n"
    "    a non-positive latency, an efficiency outside (0, 1], a fit at a clamp bound.\n"
    "Test hook: FSDPBENCH_FAKE_LOADAVG=X replaces the load average read from /proc/loadavg.\n"
    "Exit codes: 0 written; 1 refused (load, spread, a rejected figure) or a runtime failure;\n"
    "  2 bad usage or an existing --out without --force. Progress goes to stderr.\n";

int fb_calibrate_main(int argc, char **argv) {
  calib_cli c = {.o = {.threads = (int)sysconf(_SC_NPROCESSORS_ONLN), .quick = false},
                 .repeat = 1, .retries = 2};
  snprintf(c.base, sizeof c.base, "cpu");
  const char *ompi_size = getenv("OMPI_COMM_WORLD_SIZE");
  c.mpi = ompi_size && atoi(ompi_size) > 1; /* under mpirun: the MPI communicator */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    size_t nlen = strcspn(a, "=");
    if (!strcmp(a, "--quick")) {
      c.o.quick = true;
      continue;
    }
    if (!strcmp(a, "--force")) {
      c.force = true;
      continue;
    }
    if (!strcmp(a, "--ignore-load")) {
      c.ignore_load = true;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(help_text, stdout);
      return 0;
    }
    if (a[nlen] == '=')
      val = a + nlen + 1;
    else if (i + 1 < argc)
      val = argv[++i];
    char flag[64];
    snprintf(flag, sizeof flag, "%.*s", (int)nlen, a);
    char msg[256];
    if (!strcmp(flag, "--out")) {
      if (!val || !*val) return usage("--out needs a file name");
      snprintf(c.path, sizeof c.path, "%s", val);
    } else if (!strcmp(flag, "--repeat")) {
      if (!int_flag("--repeat", val, 1, 100, &c.repeat)) return FB_EUSAGE;
    } else if (!strcmp(flag, "--retries")) {
      if (!int_flag("--retries", val, 0, 100, &c.retries)) return FB_EUSAGE;
    } else if (!strcmp(flag, "--threads")) {
      if (!int_flag("--threads", val, 1, 1024, &c.o.threads)) return FB_EUSAGE;
    } else if (!strcmp(flag, "--base")) {
      if (!val || !*val) return usage("--base needs a profile name or file");
      snprintf(c.base, sizeof c.base, "%s", val);
    } else if (!strcmp(flag, "--comm")) {
      if (val && !strcmp(val, "local"))
        c.mpi = false;
      else if (val && !strcmp(val, "mpi"))
        c.mpi = true;
      else {
        snprintf(msg, sizeof msg, "--comm: '%s' is not allowed (allowed: local, mpi)",
                 val ? val : "");
        return usage(msg);
      }
    } else {
      snprintf(msg, sizeof msg, "unknown flag '%s' (allowed: --out, --force, --threads, --repeat, "
               "--retries, --ignore-load, --comm, --base, --quick)", a);
      return usage(msg);
    }
  }
  if (!c.path[0])
    snprintf(c.path, sizeof c.path, "%s/models/hardware/%s.yaml", fb_data_root(),
             c.mpi ? "cpu-mpi" : "cpu");
#ifndef FB_HAVE_MPI
  if (c.mpi) return usage("--comm mpi: MPI is not built into this binary (install libopenmpi-dev "
                          "and rebuild)");
#endif
  /* before measuring anything: an existing profile is not overwritten without --force, and a
   * malformed test hook is a usage error */
  if (fb_calib_check_out(c.path, c.force) != FB_OK) {
    fprintf(stderr, "calibrate: %s\n", fb_error_msg());
    return FB_EUSAGE;
  }
  {
    fb_calib_load probe;
    if (fb_calib_load_read(c.o.threads, 0, &probe) != FB_OK) return usage(fb_error_msg());
  }

  fb_hardware hw;
  memset(&hw, 0, sizeof hw);
  fb_hardware *runs = calloc((size_t)c.repeat, sizeof *runs);
  fb_calib_diag *diags = calloc((size_t)c.repeat, sizeof *diags);
  load_log L;
  memset(&L, 0, sizeof L);
  int rank = 0, world = 1, rc = 0;
  double t0 = fb_cpu_clock();
  fb_status st = runs && diags ? FB_OK : FB_ERR(FB_ENOMEM, "calibrate: out of host memory");
  if (st == FB_OK && c.mpi) {
    /* the compute figures are the machine's (a plain calibrate measures them); this run
     * measures the MPI communicator and writes it over them */
    st = fb_hardware_load(c.base, &hw);
    if (st != FB_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", fb_error_msg());
      st = FB_ERR(st, "--base: %s (run `fsdpbench calibrate` first: the MPI profile takes its "
                  "compute figures from it)", why);
    }
#ifdef FB_HAVE_MPI
    if (st == FB_OK) st = fb_calib_mpi_begin(&rank, &world);
#endif
  }
  if (st == FB_OK) st = fb_calib_own_start();

  /* measure, refusing (after --retries) a loaded machine */
  char why[600] = "";
  bool refused = false;
  for (int attempt = 0; st == FB_OK && attempt <= c.retries; attempt++) {
    bool over = false;
    refused = false;
    L.have = false; /* the header describes the attempt that measured */
    st = check_load(&c, &L, "before measuring", true, why, sizeof why, &over);
    int verdict = over && !c.ignore_load;
    if (st == FB_OK) st = share_verdict(&c, rank, &verdict); /* rank 0's decides */
    if (st != FB_OK) break;
    if (over && !verdict) force(&L, false, why);
    if (!verdict) {
      if (!c.mpi) {
        st = measure_local(&c, &L, runs, diags, why, sizeof why, &refused);
      } else {
#ifdef FB_HAVE_MPI
        fb_calib_diag_init(&diags[0]);
        runs[0] = hw;
        st = fb_calibrate_mpi_comm(&runs[0], c.o.quick, rank != 0, &diags[0].comm_rms);
        if (st == FB_OK) st = check_load(&c, &L, "during measuring", false, why, sizeof why, &over);
        if (st == FB_OK && over && c.ignore_load) force(&L, false, why);
        refused = over && !c.ignore_load;
#endif
      }
      verdict = refused;
      if (st == FB_OK) st = share_verdict(&c, rank, &verdict);
      refused = verdict;
      if (st != FB_OK || !verdict) break;
    }
    refused = true;
    if (attempt < c.retries) {
      if (rank == 0)
        printf("calibrate: warning: machine too loaded: %s; measuring again in %d s (retry %d of "
               "%d)\n", why, FB_CALIB_RETRY_PAUSE_S, attempt + 1, c.retries);
      fflush(stdout);
      sleep(FB_CALIB_RETRY_PAUSE_S);
    }
  }
  fb_calib_own_stop();
  if (st == FB_OK && refused) {
    if (rank == 0)
      fprintf(stderr, "calibrate: machine too loaded: %s; refused after %d attempt(s) "
              "(--retries %d): calibrate on an idle machine, or force with --ignore-load\n", why,
              c.retries + 1, c.retries);
    rc = 1;
  }

  /* plausibility of every fitted figure, then the profile */
  if (st == FB_OK && !rc && rank == 0) {
    int bad;
    if (!c.mpi) {
      bad = check_runs(runs, diags, c.repeat, true);
      if (!bad) median_of_runs(runs, c.repeat, &hw);
    } else {
      diags[0].triad = runs[0].mem_bw; /* the base profile's: copies cannot outrun caches */
      bad = check_runs(runs, diags, 1, false);
      hw = runs[0];
    }
    if (bad) {
      fprintf(stderr, "calibrate: %d figure(s) rejected: nothing written (a loaded or unstable "
              "machine gives fits like these; calibrate on an idle machine)\n", bad);
      rc = 1;
    } else {
      if (!c.mpi && c.repeat > 1)
        printf("\ncalibrate: the median of %d runs: peak %.1f GFLOP/s, GEMM curve %.3f, %.0f, "
               "communicator %.2f GB/s, %.1f us\n", c.repeat, hw.peak_fp32 * 1e-9,
               hw.gemm_max_eff, hw.gemm_half_size, hw.intra_bw * 1e-9, hw.intra_lat * 1e6);
      st = write_profile(&c, &hw, world, &L);
      if (st == FB_OK && L.forced)
        printf("calibrate: warning: forced with --ignore-load: %s%s%s\n", L.forced_load,
               L.forced_load[0] && L.forced_spread[0] ? "; " : "", L.forced_spread);
      if (st == FB_OK) printf("\ncalibrate: wrote %s in %.1f s\n", c.path, fb_cpu_clock() - t0);
    }
  }
  if (st != FB_OK) {
    if (st == FB_EUSAGE && strstr(fb_error_msg(), " exists (it may be a committed profile)"))
      fprintf(stderr, "calibrate: %s\n", fb_error_msg());
    else
      fprintf(stderr, "fsdpbench calibrate: error: %s\n", fb_error_msg());
    rc = st;
  }
#ifdef FB_HAVE_MPI
  if (c.mpi) fb_calib_mpi_end();
#endif
  free(runs);
  free(diags);
  return rc;
}
