/* `fsdpbench calibrate --backend cuda`: measures the GPU it runs on, through this program's own
 * kernels (the cuda device's table: cuBLAS GEMMs, its attention, its copies), into a profile
 * that `extends` the GPU's shipped one (--base, default by the GPU's name) and overrides what
 * was measured, each figure tagged with the device it was measured on:
 *  - GEMM throughput over a shape grid (square, transformer, small and unaligned shapes):
 *    the shape model's ceiling, main-loop depth, fixed time per call, stream-K factor and
 *    alignment factors, fitted through the cost model itself (fb_cost_gemm_seconds);
 *  - attention forward and backward by sequence length and head dim (calibrate_attention.c),
 *    with the rows in attention.csv's schema when --attention-rows FILE asks for them;
 *  - HBM bandwidth (a device copy of 1 GiB): mem_efficiency of the datasheet's bandwidth;
 *  - launch and host cost per op: a 16-element kernel's device time, and the host time to
 *    issue one;
 *  - contention (calibrate_contention.c): a GEMM and a memory-bound kernel beside a copy kernel
 *    holding NCCL's channel count of SMs, measured against the simulator's contention model;
 *  - with 2 or more GPUs visible, NCCL all-gather, reduce-scatter and all-reduce by size
 *    (rank threads of this process, one GPU each): NCCL's per-channel bandwidth in a node and
 *    the per-call overhead, fitted through the NCCL model.
 * Every device that runs the kernels can be measured (cpu-opaque, the GPU stand-in, is how the
 * tests run this path on a machine without a GPU). Where the backend is not available it says
 * so in one line. It does not simulate anything; the load gate and --repeat of the cpu
 * calibration do not apply (a GPU is not shared with other processes). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../engine/comm/comm.h"
#include "../engine/backends/cuda_module.h"
#include "../engine/backends/cpu/device_cpu.h"
#include "../engine/backends/registry.h"
#include "../engine/sim/cost_model.h"
#include "median.h"
#include "calibrate_comm.h"
#include "calibrate_device.h"
#include "../engine/sim/gpu_profile.h"
#include "gpu_name.h"

void fb_devcal_tag_key(fb_devcal *c, const char *key, double value, const char *how) {
  for (int i = 0; i < c->ntags; i++)
    if (!strcmp(c->tags[i].key, key)) {
      c->tags[i].value = value;
      snprintf(c->tags[i].how, sizeof c->tags[i].how, "%s", how);
      return;
    }
  if (c->ntags >= FB_DEVCAL_MAX_TAGS) return;
  fb_devcal_tag *t = &c->tags[c->ntags++];
  snprintf(t->key, sizeof t->key, "%s", key);
  t->value = value;
  snprintf(t->how, sizeof t->how, "%s", how);
}

fb_status fb_devcal_zalloc(fb_devcal *c, size_t bytes, fb_buf *b) {
  FB_TRY(fb_alloc(c->d, bytes, FB_MEM_TEMP, "calibrate", b));
  return fb_memset0(c->d, c->s, b->ptr, bytes);
}

fb_status fb_devcal_time(fb_devcal *c, fb_devcal_fn fn, void *arg, int reps, double *out) {
  FB_TRY(fn(c, arg)); /* warm-up: the library's first call picks and loads its kernel */
  FB_TRY(fb_stream_sync(c->d, c->s));
  uint64_t m0 = c->d->ops->mark(c->d, c->s);
  for (int i = 0; i < reps; i++) FB_TRY(fn(c, arg));
  uint64_t m1 = c->d->ops->mark(c->d, c->s);
  FB_TRY(fb_stream_sync(c->d, c->s));
  *out = (c->d->ops->mark_time(c->d, m1) - c->d->ops->mark_time(c->d, m0)) / reps;
  c->d->ops->marks_reset(c->d);
  return FB_OK;
}

/* ---- the device ---------------------------------------------------------------------------- */

/* Opens rank 0 of the backend; FB_EUNSUPPORTED with the reason when it cannot run here. */
static fb_status open_device(fb_devcal *c) {
  const char *be = c->o->backend;
  const fb_device_entry *e = fb_device_entry_lookup(be);
  char names[256], why[512] = "";
  if (!e && !strcmp(be, "cuda"))
    return FB_ERR(FB_EUNSUPPORTED, "--backend cuda: not available: this build has no CUDA "
                  "(build where nvcc is found: cmake -DFSDPB_CUDA=ON)");
  if (!e || !strcmp(be, "sim")) {
    fb_device_names(names, sizeof names);
    return FB_ERR(FB_EUSAGE, "--backend: '%s' is not allowed (a device that runs the kernels: "
                  "one of %s but sim)", be, names);
  }
  if (e->available && !e->available(why, sizeof why))
    return FB_ERR(FB_EUNSUPPORTED, "--backend %s: not available: %s", be, why);
  const fb_device_ops *ops = fb_device_lookup(be);
  if (!ops) return FB_ERR(FB_EUNSUPPORTED, "--backend %s: not available in this build", be);
  FB_TRY(fb_device_open(ops, 0, 1, 1, 0, NULL, &c->d));
  FB_TRY(c->d->ops->stream_create(c->d, FB_STREAM_COMPUTE, &c->s));
  c->k = (fb_kctx){.dev = c->d, .s = c->s, .act = FB_BF16, .unit = -1};
  c->small = c->o->quick || !fb_device_caps_of(c->d)->gpu;
  if (fb_device_caps_of(c->d)->gpu) fb_gpu_name(c->gpu, sizeof c->gpu);
  else snprintf(c->gpu, sizeof c->gpu, "%s (this CPU)", be);
  return FB_OK;
}

/* --base, else the GPU's shipped profile by its name (cpu for a CPU device). */
static fb_status load_base(fb_devcal *c) {
  char why[160] = "";
  const char *prof = c->o->base[0] ? c->o->base : NULL;
  if (!prof && !fb_device_caps_of(c->d)->gpu) prof = "cpu";
  if (!prof) prof = fb_gpu_profile_for(c->gpu, 0, why, sizeof why);
  if (!prof)
    return FB_ERR(FB_EUSAGE, "--base: the GPU '%s' has no shipped profile (%s); name one with "
                  "--base PROFILE", c->gpu, why);
  snprintf(c->base_name, sizeof c->base_name, "%s", prof);
  FB_TRY(fb_hardware_load(prof, &c->base));
  c->hw = c->base;
  c->hw.sustained = 0; /* the measurements are microbenchmarks: fitted without the step factor */
  return FB_OK;
}

/* ---- memory, launch and host cost ---------------------------------------------------------- */

typedef struct copy_arg {
  fb_buf a, b;
} copy_arg;

static fb_status run_copy(fb_devcal *c, void *p) {
  copy_arg *a = p;
  return fb_copy_d2d(c->d, c->s, a->b.ptr, a->a.ptr, a->a.bytes);
}

static fb_status run_tiny(fb_devcal *c, void *p) {
  copy_arg *a = p;
  return fb_k_add(&c->k, a->b.ptr, a->a.ptr, a->a.ptr, 16);
}

/* Bytes of each buffer a device copy here moves: the HBM step's, and the launch step's
 * queue-holding copies. */
static size_t copy_bytes(const fb_devcal *c) {
  return c->o->quick ? (size_t)8 << 20 : c->small ? (size_t)128 << 20 : (size_t)1 << 30;
}

/* The device's copy bandwidth (read + write) against the profile's HBM figure. */
static fb_status step_memory(fb_devcal *c) {
  const size_t n = copy_bytes(c);
  copy_arg a = {{0}, {0}};
  double t = 0;
  fb_status st;
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, n, &a.a), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, n, &a.b), out);
  FB_CHECK_GOTO(st, fb_devcal_time(c, run_copy, &a, c->o->quick ? 3 : 10, &t), out);
  double bw = 2.0 * (double)n / t;
  char how[160];
  snprintf(how, sizeof how, "device copy of %.0f MiB: %.0f GB/s (read + write)", n / 1048576.0,
           bw * 1e-9);
  if (bw > c->hw.mem_bw) c->hw.mem_bw = bw; /* faster than the datasheet: take the measurement */
  c->hw.mem_eff = fmin(1.0, bw / c->hw.mem_bw);
  fb_devcal_tag_key(c, "mem_bw_gbs", c->hw.mem_bw * 1e-9, how);
  fb_devcal_tag_key(c, "mem_efficiency", c->hw.mem_eff, how);
  printf("  %-40s %10.1f GB/s (%.0f%% of %.0f)\n", "HBM: device copy", bw * 1e-9,
         100 * c->hw.mem_eff, c->hw.mem_bw * 1e-9);
out:
  fb_free(c->d, &a.a, NULL);
  fb_free(c->d, &a.b, NULL);
  return st;
}

/* The device's time per op when it finds the ops queued: N 16-element kernels issued behind
 * copies that outlast their issue, timed from the copies' end to the last kernel (each op with
 * its two marks, as in a step). Issued to an idle device instead, a host slower to issue a
 * kernel than the device runs it is what gets timed: 18.3 us a kernel on an H100 whose host
 * issued one in 13.7 us, where the same GPU's CUPTI trace of a step shows 4-6 us from one
 * kernel's end to the next one's. *queued is false when the host was still issuing after the
 * copies had ended (the device may have waited on it: the figure is an upper bound). */
static fb_status queued_op_time(fb_devcal *c, copy_arg *tiny, int n, double host, double *t,
                                bool *queued) {
  const size_t nb = copy_bytes(c);
  copy_arg big = {{0}, {0}};
  fb_status st;
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, nb, &big.a), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, nb, &big.b), out);
  FB_CHECK_GOTO(st, fb_stream_sync(c->d, c->s), out);
  const double copy_s = 2.0 * (double)nb / (c->hw.mem_bw * c->hw.mem_eff);
  const int reps = (int)fmin(256.0, ceil(2.0 * n * host / copy_s) + 1);
  for (int i = 0; i < reps && st == FB_OK; i++) st = run_copy(c, &big);
  const uint64_t m0 = st == FB_OK ? c->d->ops->mark(c->d, c->s) : 0;
  for (int i = 0; i < n && st == FB_OK; i++) st = run_tiny(c, tiny);
  const double issued = fb_cpu_clock();
  const uint64_t m1 = st == FB_OK ? c->d->ops->mark(c->d, c->s) : 0;
  if (st == FB_OK) st = fb_stream_sync(c->d, c->s);
  if (st != FB_OK) goto out;
  const double t0 = c->d->ops->mark_time(c->d, m0);
  *t = (c->d->ops->mark_time(c->d, m1) - t0) / n;
  *queued = issued <= t0;
  c->d->ops->marks_reset(c->d);
out:
  fb_free(c->d, &big.a, NULL);
  fb_free(c->d, &big.b, NULL);
  return st;
}

/* A 16-element kernel: the host's time to issue one (host_op_us: this program's dispatch, not
 * eager PyTorch's) and the device's time per op when it is ahead of the host (launch_us; on a
 * device without a queue of its own, the cpu's, the two are one call). */
static fb_status step_launch(fb_devcal *c) {
  copy_arg a = {{0}, {0}};
  double t = 0;
  bool queued = true;
  enum { N = 200, LAUNCH_BATCHES = 8 };
  fb_status st;
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, 64, &a.a), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, 64, &a.b), out);
  /* warm, and the idle figure: the median of batches, as one time slice the OS takes from a
   * loaded machine inside a single batch of N read as 50-75 us a kernel on cpu-opaque (5-10 us
   * idle), and the in-step kernel rates left after that launch cost went missing */
  double batch[LAUNCH_BATCHES];
  for (int b = 0; b < LAUNCH_BATCHES; b++)
    FB_CHECK_GOTO(st, fb_devcal_time(c, run_tiny, &a, N / LAUNCH_BATCHES, &batch[b]), out);
  t = fb_median(batch, LAUNCH_BATCHES);
  double h0 = fb_cpu_clock();
  for (int i = 0; i < N && st == FB_OK; i++) st = run_tiny(c, &a);
  double host = (fb_cpu_clock() - h0) / N;
  if (st == FB_OK) st = fb_stream_sync(c->d, c->s);
  if (st != FB_OK) goto out;
  const double idle = t;
  if (fb_device_caps_of(c->d)->gpu)
    FB_CHECK_GOTO(st, queued_op_time(c, &a, N, host, &t, &queued), out);
  c->hw.launch_s = t;
  c->hw.host_op_s = host;
  char how[160];
  snprintf(how, sizeof how, "a 16-element kernel, device clock, %s (%.2f us issued to an idle "
           "device)", queued ? "queued behind copies" : "NOT all queued: an upper bound",
           idle * 1e6);
  fb_devcal_tag_key(c, "launch_us", t * 1e6, how);
  fb_devcal_tag_key(c, "host_op_us", host * 1e6, "host time to issue that kernel (this program)");
  printf("  %-40s %10.2f us on the device (%.2f issued to an idle one; the host issues one in "
         "%.2f us)%s\n", "kernel, 16 elements", t * 1e6, idle * 1e6, host * 1e6,
         queued ? "" : "\n  note: the host was still issuing after the copies ended: launch_us "
                       "is an upper bound");
out:
  fb_free(c->d, &a.a, NULL);
  fb_free(c->d, &a.b, NULL);
  return st;
}

/* ---- GEMMs --------------------------------------------------------------------------------- */

/* m x n x k as the forward matmul runs them (tokens x out-features x in-features): squares,
 * GPT-2 and Llama shapes, a small output over a long k, and the LM head at vocabularies 16-,
 * 8- and 2-byte aligned (50304, 50300, 50257). */
static const int gemm_grid[][3] = {
    {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096},  {8192, 8192, 8192},
    {8192, 2304, 768},  {8192, 768, 2304},  {8192, 3072, 768},   {8192, 768, 3072},
    {8192, 768, 768},   {768, 768, 8192},   {768, 3072, 8192},   {8192, 2048, 2048},
    {8192, 8192, 2048}, {8192, 2048, 8192}, {4096, 14336, 4096}, {4096, 4096, 14336},
    {8192, 50304, 768}, {8192, 50300, 768}, {8192, 50257, 768},  {8192, 768, 50304},
};
static const int gemm_grid_quick[][3] = {{64, 64, 64}, {128, 256, 64}, {96, 100, 72}};
enum { MAX_GEMMS = 32 };

typedef struct gemm_arg {
  int m, n, k;
  fb_buf out, inp, w;
} gemm_arg;

static fb_status run_gemm(fb_devcal *c, void *p) {
  gemm_arg *g = p;
  return fb_k_matmul_fwd(&c->k, g->out.ptr, g->inp.ptr, g->w.ptr, NULL, g->m, g->k, g->n);
}

static fb_status time_gemm(fb_devcal *c, int m, int n, int k, double *t) {
  gemm_arg g = {.m = m, .n = n, .k = k};
  const size_t e = 2; /* bf16 */
  fb_status st;
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, (size_t)m * n * e, &g.out), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, (size_t)m * k * e, &g.inp), out);
  FB_CHECK_GOTO(st, fb_devcal_zalloc(c, (size_t)n * k * e, &g.w), out);
  double flops = 2.0 * m * n * k;
  int reps = c->small ? 2 : (int)fmax(3, fmin(50, 2e13 / flops)); /* ~20 ms at 1 PFLOP/s */
  st = fb_devcal_time(c, run_gemm, &g, reps, t);
out:
  fb_free(c->d, &g.out, NULL);
  fb_free(c->d, &g.inp, NULL);
  fb_free(c->d, &g.w, NULL);
  return st;
}

typedef struct gemm_fit {
  fb_hardware *hw;
  const int (*shape)[3];
} gemm_fit;

static double gemm_model(void *ctx, int i) {
  const gemm_fit *f = ctx;
  const int *s = f->shape[i];
  return fb_cost_gemm_seconds(f->hw, FB_BF16, s[0], s[1], s[2], 1, false);
}

/* The profile's GEMM figures: the shape model's on a GPU profile, the size curve otherwise. */
static int gemm_params(fb_devcal *c, fb_calib_param *p) {
  fb_hardware *h = &c->hw;
  if (h->sm_count <= 0) {
    p[0] = (fb_calib_param){"gemm_max_efficiency", &h->gemm_max_eff, 1e-4, 1};
    p[1] = (fb_calib_param){"gemm_half_size", &h->gemm_half_size, 1, 65536};
    return 2;
  }
  if (!(h->gemm_launch_s > 0)) h->gemm_launch_s = h->launch_s;
  if (!(h->gemm_align4 > 0)) h->gemm_align4 = 0.69;
  if (!(h->gemm_align2 > 0)) h->gemm_align2 = 0.18;
  int n = 0;
  p[n++] = (fb_calib_param){"gemm_max_efficiency", &h->gemm_max_eff, 0.05, 1};
  p[n++] = (fb_calib_param){"gemm_k_half", &h->gemm_k_half, 1, 8192};
  p[n++] = (fb_calib_param){"gemm_launch_us", &h->gemm_launch_s, 0.5e-6, 200e-6};
  if (h->gemm_stream_k > 0)
    p[n++] = (fb_calib_param){"gemm_stream_k", &h->gemm_stream_k, 0.3, 1};
  p[n++] = (fb_calib_param){"gemm_align4_factor", &h->gemm_align4, 0.02, 1};
  p[n++] = (fb_calib_param){"gemm_align2_factor", &h->gemm_align2, 0.02, 1};
  return n;
}

static double key_scale(const char *key) {
  return strstr(key, "_us") ? 1e6 : strstr(key, "_gbs") ? 1e-9 : 1.0;
}

static fb_status step_gemm(fb_devcal *c) {
  const int (*grid)[3] = c->small ? gemm_grid_quick : gemm_grid;
  const int n = c->small ? (int)(sizeof gemm_grid_quick / sizeof gemm_grid_quick[0])
                            : (int)(sizeof gemm_grid / sizeof gemm_grid[0]);
  double t[MAX_GEMMS];
  for (int i = 0; i < n; i++) FB_TRY(time_gemm(c, grid[i][0], grid[i][1], grid[i][2], &t[i]));
  fb_calib_param p[8];
  int np = gemm_params(c, p);
  gemm_fit f = {.hw = &c->hw, .shape = grid};
  double rms = fb_calib_fit_figures(p, np, t, n, gemm_model, &f);
  char how[160];
  snprintf(how, sizeof how, "%d GEMM shapes (matmul_fwd, bf16), fit RMS of log error %.3f", n,
           rms);
  for (int i = 0; i < np; i++) fb_devcal_tag_key(c, p[i].key, *p[i].v * key_scale(p[i].key), how);
  printf("\n  GEMM (matmul_fwd, bf16)          measured  model TFLOP/s   error\n");
  for (int i = 0; i < n; i++) {
    double fl = 2.0 * grid[i][0] * grid[i][1] * grid[i][2], mod = gemm_model(&f, i);
    printf("  %6d x %6d x %6d %14.4g %14.4g %+7.1f%%\n", grid[i][0], grid[i][1], grid[i][2],
           fl / t[i] * 1e-12, fl / mod * 1e-12, 100 * (t[i] / mod - 1));
  }
  return FB_OK;
}

/* ---- NCCL between this process's GPUs ------------------------------------------------------ */

static fb_status make_nccl(void *ctx, int rank, fb_device *dev, fb_comm **out) {
  (void)ctx, (void)rank;
  const fb_cuda_module *m = fb_cuda_module_load(NULL, 0);
  if (!m) return FB_ERR(FB_EUNSUPPORTED, "calibrate: the CUDA module is not loaded");
  return m->nccl_create(dev, 60.0, out);
}

typedef struct coll_fit {
  fb_hardware *hw;
  int world;
} coll_fit;

static double coll_model(void *ctx, int i) {
  const coll_fit *f = ctx;
  int ci = i / FB_CALIB_NSIZES, si = i % FB_CALIB_NSIZES;
  double bytes = (double)f->world * fb_calib_counts[si] * 4;
  return fb_cost_collective(f->hw, fb_calib_colls[ci], bytes, f->world);
}

/* All-gather, reduce-scatter, all-reduce by size over every GPU of this process (>= 2). */
static fb_status step_nccl(fb_devcal *c) {
  const fb_cuda_module *m = fb_cuda_module_loaded();
  int gpus = m && fb_device_caps_of(c->d)->gpu ? m->gpu_count() : 0;
  if (gpus < 2 || c->hw.collectives != FB_COLLS_NCCL) {
    printf("  NCCL collectives: %d GPU(s) here, they need 2 and a profile with collectives: "
           "nccl: kept from %s\n", gpus, c->base_name);
    return FB_OK;
  }
  int w = gpus > 8 ? 8 : gpus;
  fb_calib_times t;
  FB_TRY(fb_calib_comm_pass(c->o->backend, w, c->o->quick ? 3 : 10, false, make_nccl, NULL, t));
  c->hw.devices_per_node = w;
  fb_calib_param p[2] = {{"nccl_channel_gbs_node", &c->hw.nccl_bw_node, 1e9, 1e12},
                         {"coll_overhead_us", &c->hw.coll_overhead_s, 0.1e-6, 1e-3}};
  coll_fit f = {.hw = &c->hw, .world = w};
  double rms = fb_calib_fit_figures(p, 2, &t[0][0], FB_CALIB_NCOLLS * FB_CALIB_NSIZES,
                                    coll_model, &f);
  c->hw.devices_per_node = c->base.devices_per_node;
  char how[160];
  snprintf(how, sizeof how, "NCCL all-gather, reduce-scatter, all-reduce over %d GPUs, 4 B to "
           "%zu MiB, fit RMS of log error %.3f", w, w * fb_calib_counts[FB_CALIB_NSIZES - 1] * 4 >> 20,
           rms);
  for (int i = 0; i < 2; i++) fb_devcal_tag_key(c, p[i].key, *p[i].v * key_scale(p[i].key), how);
  printf("  %-40s %10.1f GB/s per channel, %.1f us per call (fit %.3f)\n", "NCCL in this node",
         c->hw.nccl_bw_node * 1e-9, c->hw.coll_overhead_s * 1e6, rms);
  return FB_OK;
}

/* ---- the profile --------------------------------------------------------------------------- */

/* A table measured in step (replaces the base's: `extends` does not merge tables), its values
 * written in the table's unit: `per_si` of them to one SI unit (1e-9 for GB/s, 1e6 for us). */
static void write_table(FILE *f, const fb_devcal *c, const char *key, const char *what,
                        double per_si, const fb_hw_kernel *k, int n) {
  if (n <= 0) return;
  fprintf(f, "%s: # measured on %s: in-step %s\n", key, c->gpu, what);
  for (int i = 0; i < n; i++) {
    char name[48];
    snprintf(name, sizeof name, "%s:", k[i].name);
    fprintf(f, "  %-25s %-12.5g # measured on %s\n", name, k[i].bw * per_si, c->gpu);
  }
}

static fb_status write_tagged(FILE *f, const fb_devcal *c, double secs) {
  char when[64], name[64];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime(&now));
  const char *slash = strrchr(c->o->out, '/'), *file = slash ? slash + 1 : c->o->out;
  snprintf(name, sizeof name, "%.*s", (int)strcspn(file, "."), file);
  fprintf(f, "# %s, measured by `fsdpbench calibrate --backend %s` on %s (%.0f s).\n"
             "# The keys below `extends` were measured on this device, each tagged so; every "
             "other figure is\n# %s's (not measured here). This profile describes this program's "
             "kernels on this device\n# (what `validate --backend %s` compares against).\n"
             "extends: %s\nname: %s\n", c->gpu, c->o->backend, when, secs, c->base_name,
          c->o->backend, c->base_name, name[0] ? name : "calibrated");
  for (int i = 0; i < c->ntags; i++) {
    char key[48];
    snprintf(key, sizeof key, "%s:", c->tags[i].key);
    fprintf(f, "%-23s %-12.5g # measured on %s: %s\n", key, c->tags[i].value, c->gpu,
            c->tags[i].how);
  }
  if (c->tables) {
    const char *ops = "rates, GB/s of the bytes each op's wrapper counts";
    write_table(f, c, "kernel_gbs", ops, 1e-9, c->hw.kernels, c->hw.nkernels);
    write_table(f, c, "split_kernel_gbs", ops, 1e-9, c->hw.split_kernels, c->hw.nsplit_kernels);
    write_table(f, c, "coll_gbs", "rates, GB/s of the local communicator's bytes per collective "
                "kind", 1e-9, c->hw.coll_rates, c->hw.ncoll_rates);
    write_table(f, c, "kernel_us", "lines through each kernel's calls (two run sizes): us a call "
                "beyond launch_us and its bytes over kernel_gbs", 1e6, c->hw.kernel_fixed,
                c->hw.nkernel_fixed);
  }
  return ferror(f) ? FB_ERR(FB_EIO, "cannot write %s", c->o->out) : FB_OK;
}

typedef struct write_ctx {
  const fb_devcal *c;
  double secs;
} write_ctx;

static fb_status write_cb(FILE *f, void *arg) {
  const write_ctx *w = arg;
  return write_tagged(f, w->c, w->secs);
}

static void close_device(fb_devcal *c) {
  if (c->s) c->d->ops->stream_destroy(c->d, c->s);
  if (c->d) fb_device_close(c->d);
}

static fb_status calibrate_device(fb_devcal *c) {
  double t0 = fb_cpu_clock();
  FB_TRY(open_device(c));
  FB_TRY(load_base(c));
  printf("calibrate: %s (--backend %s), base profile %s\n", c->gpu, c->o->backend, c->base_name);
  FB_TRY(step_memory(c));
  FB_TRY(step_launch(c));
  FB_TRY(step_gemm(c));
  FB_TRY(fb_devcal_attention(c));
  FB_TRY(fb_devcal_contention(c));
  FB_TRY(step_nccl(c));
  FB_TRY(fb_devcal_in_step(c));
  write_ctx w = {c, fb_cpu_clock() - t0};
  FB_TRY(fb_calib_write_file(c->o->out, write_cb, &w, c->o->force));
  fb_hardware back; /* what was written reads back as a profile */
  FB_TRY(fb_hardware_load(c->o->out, &back));
  printf("\ncalibrate: wrote %s (%d measured figures over %s) in %.1f s\n", c->o->out, c->ntags,
         c->base_name, fb_cpu_clock() - t0);
  return FB_OK;
}

int fb_calibrate_device_main(const fb_calib_dev_opts *o) {
  if (!o->out[0]) {
    fprintf(stderr, "fsdpbench calibrate: error: --backend %s: --out FILE is required (the "
            "profile of this GPU)\n", o->backend);
    return 2;
  }
  if (fb_calib_check_out(o->out, o->force) != FB_OK ||
      (o->rows[0] && fb_calib_check_out(o->rows, o->force) != FB_OK)) {
    fprintf(stderr, "calibrate: %s\n", fb_error_msg());
    return 2;
  }
  fb_devcal *c = calloc(1, sizeof *c);
  if (!c) return fprintf(stderr, "fsdpbench calibrate: error: out of host memory\n"), 1;
  c->o = o;
  fb_status st = calibrate_device(c);
  close_device(c);
  free(c);
  if (st == FB_OK) return 0;
  fprintf(stderr, "fsdpbench calibrate: error: %s\n", fb_error_msg());
  return st == FB_EUSAGE ? 2 : 1;
}
