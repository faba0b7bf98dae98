/* Calibration in situ: runs short single-rank training runs of the calibration models on the
 * cpu executor and refits a profile's compute figures on the ops those steps recorded, so the
 * simulator is calibrated on kernels as a step runs them — operands that other kernels just
 * wrote or that come cold from memory, a thread team that idles between ops — rather than on
 * a kernel repeated on warm buffers (which runs 10-30% faster here). Refits:
 *  - the GEMM curve (gemm_max_efficiency, gemm_half_size) on every matrix product, by size,
 *    each size weighted by its measured time (what a step's time is made of);
 *  - attention_efficiency on the attention kernels against that curve;
 *  - kernel_gbs for every memory-bound op name a step issues (bytes its wrapper counts over
 *    its measured time less the launch overhead).
 * With 2 or more threads it refits the same figures a second time on ddp runs of as many
 * 1-thread ranks as threads, all ranks' ops pooled: the split figures (split_ranks,
 * split_gemm_*, split_attention_efficiency, split_kernel_gbs), which the cost model gives a
 * rank of a world of at least that many ranks on this shared host.
 * On a device that stages its collectives through host memory (cpu-opaque), the split runs
 * also set the local communicator's latency and the ranks' drift (fit_comm_drift: the split
 * runs simulated with the profile so far, matched to their own collectives). The peak, the memory
 * bandwidth, the launch overhead, the overlap slowdown and the rest of the communicator stay
 * as the micro-benchmarks measured them. The calibration runs use other
 * token counts than bench/bench_sim_validation.sh (also per rank), so that validation stays a
 * prediction. It does not write the profile (calibrate.c does). */
#define _GNU_SOURCE /* mkstemps */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/config/config.h"
#include "../engine/exec/runner.h"
#include "../strategies/strategy.h"
#include "calibrate.h"
#include "median.h"
#include "../engine/sim/contention.h"
#include "../engine/sim/cost_model.h"
#include "../engine/sim/hardware.h"

typedef struct calib_run {
  const char *model;
  int batch, seq, steps;
} calib_run;

/* Two architectures (GPT-2: layernorm, gelu, tied head; Llama: rmsnorm, rope, swiglu) at
 * two widths. Token counts differ from the validation benchmark's (debug 8x128, gpt2 4x64) and
 * straddle them (debug 12x128 above, debug-llama 4x128 and gpt2 2x64 below): a curve fitted on
 * smaller products only predicted the validation's larger ones 6-10 % slow on the Xeon VM. */
static const calib_run runs_full[] = {
    {"debug", 12, 128, 4}, {"debug-llama", 4, 128, 3}, {"gpt2-124m", 2, 64, 3}};
static const calib_run runs_quick[] = {{"debug", 2, 64, 2}};
/* The split runs: sequences per rank, again other counts than the validation's ranks (debug
 * 4x128 and 2x128, gpt2 2x64 and 1x64) and on both sides of them. */
static const calib_run split_full[] = {
    {"debug", 6, 128, 4}, {"debug-llama", 3, 64, 3}, {"gpt2-124m", 1, 96, 3}};
static const calib_run split_quick[] = {{"debug", 1, 96, 2}};
/* Another CPU device (cpu-opaque: every op through its access guard; gpt2-124m's steps 10x the
 * debug models') takes the debug models only (gpt2-124m's kernels are debug's GPT-2 ones),
 * at sequences on both sides of its loop's default (debug 8 x 256, `validate --backend
 * cpu-opaque`): attention per FLOP is faster at 256 than at 128 keys; and at tokens on both
 * sides of its 2048 (1536, 2560): a kernel pays the guard's protection changes per call, so
 * runs all below it priced its layernorm_fwd 25-52 % slow. Its split runs straddle
 * the loop's 1024 tokens a rank (192, 512, 768 and 1280): a rank's wait for its peer grows
 * with the compute between their meetings (fit_comm_drift), which runs all below the loop's
 * priced short, and the memory-bound kernels' rates move with it too (layernorm_fwd +24 to
 * +50 % with three runs below, -4 to +22 % with the fourth above). They trace 7 steps, the
 * single-rank runs 4-5: a run's collectives count at the median of their 2-step times. */
static const calib_run runs_device[] = {
    {"debug", 12, 128, 6}, {"debug", 10, 256, 5}, {"debug-llama", 4, 128, 6}};
static const calib_run split_device[] = {
    {"debug", 6, 128, 8}, {"debug", 2, 256, 8}, {"debug", 5, 256, 8}, {"debug-llama", 3, 64, 8}};
#define NRUNS(a) ((int)(sizeof(a) / sizeof *(a)))

enum { MAX_SIZES = 256, MAX_NAMES = FB_HW_MAX_KERNELS, MAX_STEPS = 64, RUN_STEPS = 16 };

typedef struct gemm_pt {
  double size, flops, t; /* sums over the ops of one size */
  int64_t n;
} gemm_pt;

typedef struct mem_pt {
  const char *name;
  double bytes, t;
  int64_t n;
  /* the same sums per traced step (of all runs): how steadily the kernel ran, step to step */
  double step_bytes[MAX_STEPS], step_t[MAX_STEPS];
  int64_t step_n[MAX_STEPS];
} mem_pt;

/* The fused MLP ops of one name and shape, pooled: a product and a GELU pass in one op, as
 * the simulator splits it (fb_cost_fused_gelu_parts) */
typedef struct fused_pt {
  fb_op_cost gemm, pass; /* one op's parts */
  double t;
  int64_t n;
} fused_pt;

/* The collectives of one run, kind and payload, pooled: calls and their in-step time, in all
 * and per traced step of the run (step_t). */
typedef struct coll_pt {
  fb_coll coll;
  int run;
  double payload, t;
  int64_t n;
  double step_t[RUN_STEPS];
} coll_pt;

typedef struct in_step {
  gemm_pt gemm[MAX_SIZES], attn[MAX_SIZES]; /* matrix products; attention kernels */
  int ngemm, nattn;
  coll_pt coll[MAX_SIZES]; /* the runs' collectives (their time includes waiting for peers) */
  int ncoll;
  mem_pt mem[MAX_NAMES];
  int nmem;
  fused_pt fused[MAX_SIZES];
  int nfused;
  int step_base; /* the slot of the current run's step 0 */
  int run;       /* the current run's index in its pass */
} in_step;

/* Pools an op into the point of its size. */
static void add_sized(gemm_pt *pts, int *n, double size, double flops, double t) {
  for (int i = 0; i < *n; i++)
    if (fabs(pts[i].size - size) <= 1e-9 * size) {
      pts[i].flops += flops;
      pts[i].t += t;
      pts[i].n++;
      return;
    }
  if (*n < MAX_SIZES) pts[(*n)++] = (gemm_pt){size, flops, t, 1};
}

/* A GEMM op the simulator prices as a product and a GELU pass: pooled apart (false: any
 * other GEMM). */
static bool add_fused(in_step *a, const fb_rec_op *o, double t) {
  const fb_op_cost c = {.name = o->name, .kind = o->kind, .dtype = o->dtype, .flops = o->flops,
                        .bytes = o->bytes, .m = o->m, .n = o->n, .k = o->k, .batch = o->batch};
  fused_pt p = {.t = t, .n = 1};
  if (!fb_cost_fused_gelu_parts(&c, &p.gemm, &p.pass)) return false;
  for (int i = 0; i < a->nfused; i++)
    if (!strcmp(a->fused[i].pass.name, p.pass.name) && a->fused[i].gemm.m == o->m &&
        a->fused[i].gemm.n == o->n && a->fused[i].gemm.k == o->k) {
      a->fused[i].t += t;
      a->fused[i].n++;
      return true;
    }
  if (a->nfused < MAX_SIZES) a->fused[a->nfused++] = p;
  return true;
}

/* The point of kernel `name` in v (of *n, at most cap), added when new; NULL when full. */
static mem_pt *mem_of(mem_pt *v, int *n, int cap, const char *name) {
  for (int i = 0; i < *n; i++)
    if (!strcmp(v[i].name, name)) return &v[i];
  if (*n >= cap) return NULL;
  v[*n].name = name;
  return &v[(*n)++];
}

static void add_mem(in_step *a, const char *name, int step, double bytes, double t) {
  mem_pt *m = mem_of(a->mem, &a->nmem, MAX_NAMES, name);
  if (!m) return;
  m->bytes += bytes;
  m->t += t;
  m->n++;
  int slot = a->step_base + step;
  if (slot >= 0 && slot < MAX_STEPS) {
    m->step_bytes[slot] += bytes;
    m->step_t[slot] += t;
    m->step_n[slot]++;
  }
}

/* Pools a collective by kind and payload (the bytes the cost model takes: fb_coll_bytes
 * counts an all-reduce's payload twice). */
static void add_coll(in_step *a, const fb_rec_op *o, double t) {
  const double payload = o->coll == FB_COLL_ALL_REDUCE ? o->bytes / 2 : o->bytes;
  coll_pt *c = NULL;
  for (int i = 0; i < a->ncoll && !c; i++)
    if (a->coll[i].coll == o->coll && a->coll[i].run == a->run && a->coll[i].payload == payload)
      c = &a->coll[i];
  if (!c && a->ncoll < MAX_SIZES) {
    c = &a->coll[a->ncoll++];
    *c = (coll_pt){.coll = o->coll, .run = a->run, .payload = payload};
  }
  if (!c) return;
  c->t += t;
  c->n++;
  if (o->step >= 0 && o->step < RUN_STEPS) c->step_t[o->step] += t;
}

/* The sums of consecutive pairs of v[0..n) (an odd last value is left out) into out; their
 * count. The step pairs that robust_t and pair_rate take medians over. */
static int pair_sums(const double *v, int n, double *out) {
  int np = 0;
  for (int i = 0; i + 1 < n; i += 2) out[np++] = v[i] + v[i + 1];
  return np;
}

/* A point's in-step time as validate's measured side takes a family's (the median over 3
 * executions of its time in 2 traced steps): the median of its steps' times summed in
 * consecutive pairs, times the pairs the run's steps make. A staged collective on a shared
 * host now and then stalls for a time slice (a step's reduce-scatters at 2-5x the others'),
 * which a plain sum carries into the fit and that median does not. The plain sum where the
 * run traced fewer than 4 steps. */
static double robust_t(const coll_pt *c) {
  double v[RUN_STEPS], pair[RUN_STEPS / 2];
  int n = 0;
  for (int s = 0; s < RUN_STEPS; s++)
    if (c->step_t[s] > 0) v[n++] = c->step_t[s];
  if (n < 4) return c->t;
  return fb_median(pair, pair_sums(v, n, pair)) * n / 2.0;
}

/* Runs one calibration configuration (world 1: single; else ddp over `world` rank threads,
 * r->batch sequences each) and adds every rank's traced compute ops to `a`. */
static fb_status run_one(const calib_run *r, const char *backend, const char *hardware,
                         const char *split, int threads, int world, in_step *a,
                         fb_run_result *res) {
  fb_run_config c;
  fb_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "%s", r->model);
  snprintf(c.strategy, sizeof c.strategy, "%s", world > 1 ? split : "single");
  snprintf(c.backend, sizeof c.backend, "%s", backend);
  snprintf(c.comm, sizeof c.comm, "%s", strcmp(backend, "sim") ? "local" : "sim");
  if (hardware) snprintf(c.hardware, sizeof c.hardware, "%s", hardware);
  c.world = world;
  c.batch = r->batch * world;
  c.seq = r->seq;
  c.steps = r->steps;
  c.threads = threads;
  c.quiet = true;
  c.trace = true;
  c.trace_wait = 0;
  c.trace_warmup = 1; /* the first step faults pages in and warms caches */
  c.trace_active = r->steps - 1;
  FB_TRY(fb_run_config_finalize(&c));
  FB_TRY(fb_run(&c, res));
  for (int r0 = 0; r0 < res->nranks; r0++) {
    int64_t n = 0;
    const fb_rec_op *ops = fb_recorder_ops(res->ranks[r0].rec, &n);
    for (int64_t i = 0; i < n; i++) {
      const fb_rec_op *o = &ops[i];
      double t = o->t1 - o->t0;
      if (!(t > 0)) continue;
      switch (o->kind) {
      case FB_OP_GEMM: /* the fused MLP ops mix a product and GELU's pass: kept apart */
        if (!add_fused(a, o, t)) add_sized(a->gemm, &a->ngemm, o->size, o->flops, t);
        break;
      case FB_OP_ATTN: add_sized(a->attn, &a->nattn, o->size, o->flops, t); break;
      case FB_OP_MEM:
      case FB_OP_OPTIM: add_mem(a, o->name, o->step, o->bytes, t); break;
      case FB_OP_COLL: add_coll(a, o, t); break;
      default: break; /* host spans */
      }
    }
  }
  a->step_base += r->steps;
  a->run++;
  return FB_OK;
}

/* Sets name's rate in a kernel table (adds the name when it is new and there is room). */
static void set_kernel(fb_hw_kernel *v, int *n, const char *name, double bw) {
  for (int i = 0; i < *n; i++)
    if (!strcmp(v[i].name, name)) {
      v[i].bw = bw;
      return;
    }
  if (*n >= FB_HW_MAX_KERNELS || strlen(name) >= sizeof v[0].name) return;
  fb_hw_kernel *e = &v[(*n)++];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->bw = bw;
}

/* What one pass of in-step runs fits: a GEMM curve on the profile's peak, attention against
 * it, and a kernel table (written into the table it is given). */
typedef struct in_step_fit {
  bool robust; /* kernel rates at the median of step pairs (pair_rate), not pooled */
  double E, h, attn, attn_raw, gemm_rms, kernel_rms;
  fb_hw_kernel *kernels;
  int *nkernels;
} in_step_fit;

/* A kernel's in-step rate as validate's measured side takes a family's time (the median over 3
 * executions of its time in 2 traced steps): the median over consecutive pairs of the steps
 * that ran it of their bytes over their busy time. On a CPU device a kernel on a side stream
 * (fsdp's post-backward divides) takes turns with the compute threads and now and then loses
 * a time slice; pooled, those steps set its rate (grad_postdivide -47 to +80 % in the loop).
 * The pooled rate where fewer than 4 steps ran it. */
static double pair_rate(const mem_pt *m, const fb_hardware *hw, double pooled) {
  double b[MAX_STEPS], t[MAX_STEPS], pb[MAX_STEPS / 2], pt[MAX_STEPS / 2], r[MAX_STEPS / 2];
  int have = 0, np = 0;
  for (int j = 0; j < MAX_STEPS; j++) {
    if (m->step_n[j] == 0 || !(m->step_bytes[j] > 0)) continue;
    b[have] = m->step_bytes[j];
    t[have++] = m->step_t[j] - m->step_n[j] * hw->launch_s;
  }
  if (have < 4) return pooled;
  const int pairs = pair_sums(b, have, pb);
  pair_sums(t, have, pt);
  for (int i = 0; i < pairs; i++)
    if (pt[i] > 0) r[np++] = pb[i] / pt[i];
  return np >= 2 ? fb_median(r, np) : pooled;
}

/* One memory-bound kernel's in-step rate into the table (its bytes over its time less the
 * launches), and its steps' share of the table's residual (*wsq, *wsum). */
static void fit_kernel(const mem_pt *m, const fb_hardware *hw, bool quiet, in_step_fit *f,
                       double *wsq, double *wsum) {
  double busy = m->t - m->n * hw->launch_s;
  /* an op that is all launch overhead carries no rate: keep the micro-benchmark's. So does
   * one whose bytes per call the memory streams in less than a launch (a scalar's zeroing):
   * its time is overhead and scheduling, and a time slice lost inside it reads as a
   * "stalled kernel" that makes the whole calibration refuse to write */
  const double streams_in = m->n > 0 ? m->bytes / m->n / (hw->mem_bw * hw->mem_eff) : 0;
  if (!(m->bytes > 0) || !(busy > 20e-6) || !(streams_in >= hw->launch_s)) return;
  double bw = m->bytes / busy;
  if (f->robust) bw = pair_rate(m, hw, bw);
  set_kernel(f->kernels, f->nkernels, m->name, bw);
  for (int j = 0; j < MAX_STEPS; j++) {
    double sb = m->step_t[j] - m->step_n[j] * hw->launch_s;
    if (m->step_n[j] == 0 || !(m->step_bytes[j] > 0) || !(sb > 0)) continue;
    double r = bw * sb / m->step_bytes[j] - 1; /* model time / measured time - 1 */
    *wsq += m->step_t[j] * r * r;
    *wsum += m->step_t[j];
  }
  if (!quiet)
    printf("  %-28s %10lld %12.3f %12.2f\n", m->name, (long long)m->n,
           m->bytes / m->n * 1e-6, bw * 1e-9);
}

/* Runs the passes' configurations at `world` ranks and pools their ops into a fresh `a`. */
static fb_status run_pass(const calib_run *runs, int nruns, const char *backend,
                          const char *hardware, const char *split, int threads, int world,
                          bool quiet, in_step *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < nruns; i++) {
    fb_run_result res;
    memset(&res, 0, sizeof res);
    fb_status st = run_one(&runs[i], backend, hardware, split, threads, world, a, &res);
    if (st == FB_OK && !quiet)
      printf("  %-12s %d rank(s) x batch %d x seq %d, %d steps\n", runs[i].model, world,
             runs[i].batch, runs[i].seq, runs[i].steps);
    /* op names are the kernel wrappers' static strings: they outlive the result */
    fb_run_result_free(&res);
    if (st != FB_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", fb_error_msg());
      return FB_ERR(st, "calibrate: in-step run failed: %s", why);
    }
  }
  if (a->ngemm < 2)
    return FB_ERR(FB_EINTERNAL, "calibrate: the in-step runs recorded %d GEMM size(s)", a->ngemm);
  return FB_OK;
}

/* Fits one pass (see in_step_fit); prints its tables unless quiet. */
static void fit_pass(const in_step *a, const fb_hardware *hw, bool quiet, in_step_fit *f) {
  /* GEMM curve on the in-step rates, one point per size (its ops pooled) */
  double s[MAX_SIZES], rate[MAX_SIZES], w[MAX_SIZES];
  for (int i = 0; i < a->ngemm; i++) {
    s[i] = a->gemm[i].size;
    rate[i] = a->gemm[i].flops / fmax(a->gemm[i].t - a->gemm[i].n * hw->launch_s, 1e-9);
    w[i] = a->gemm[i].t;
  }
  f->gemm_rms = fb_calibrate_fit_gemm(s, rate, w, a->ngemm, hw->peak_fp32, &f->E, &f->h);
  fb_hardware curve = *hw; /* the fitted curve, for the model column and attention */
  curve.gemm_max_eff = f->E;
  curve.gemm_half_size = f->h;
  if (!quiet) {
    printf("  %-28s %10s %8s %12s %12s %9s\n", "matrix products by size", "ops", "size",
           "GFLOP/s", "model", "error %");
    for (int i = 0; i < a->ngemm; i++) {
      double m = hw->peak_fp32 * fb_cost_gemm_efficiency(&curve, s[i]);
      printf("  %-28s %10lld %8.0f %12.1f %12.1f %9.1f\n", "", (long long)a->gemm[i].n, s[i],
             rate[i] * 1e-9, m * 1e-9, 100 * (m - rate[i]) / rate[i]);
    }
    printf("  fit: rate = peak %.1f GFLOP/s * %.3f * s / (s + %.0f), relative RMS residual "
           "%.1f %%\n", hw->peak_fp32 * 1e-9, f->E, f->h, 100 * f->gemm_rms);
  }

  /* attention: its measured time against what the GEMM curve gives the same ops */
  f->attn = hw->attn_eff;
  f->attn_raw = NAN;
  if (a->nattn > 0) {
    double c = 0, meas = 0;
    for (int i = 0; i < a->nattn; i++) {
      c += a->attn[i].flops / (hw->peak_fp32 * fb_cost_gemm_efficiency(&curve, a->attn[i].size));
      meas += fmax(a->attn[i].t - a->attn[i].n * hw->launch_s, 1e-9);
    }
    f->attn_raw = c / meas;
    f->attn = fmin(1.0, f->attn_raw);
    if (!quiet) printf("  attention (%d size(s)): %.3f of the GEMM curve's rate\n", a->nattn,
                       f->attn);
  }

  /* memory-bound kernels; the table's residual: each kernel's rate in each traced step
   * against its pooled rate, weighted by time (a short kernel's jitter weighs little) */
  if (!quiet) printf("  %-28s %10s %12s %12s\n", "memory-bound kernels", "ops", "MB/op", "GB/s");
  double wsq = 0, wsum = 0;
  for (int i = 0; i < a->nmem; i++) fit_kernel(&a->mem[i], hw, quiet, f, &wsq, &wsum);
  /* the fused MLP ops' GELU passes: each op's time less its product's at the curve just
   * fitted, as the simulator prices such an op (the product, then the pass: cost_model.c) */
  mem_pt pass[2] = {{0}};
  int npass = 0;
  for (int i = 0; i < a->nfused; i++) {
    const fused_pt *x = &a->fused[i];
    const double tg = hw->launch_s + x->gemm.flops /
                      (hw->peak_fp32 * fb_cost_gemm_efficiency(&curve, fb_op_gemm_size(&x->gemm)));
    mem_pt *m = mem_of(pass, &npass, 2, x->pass.name);
    if (!m) continue;
    m->t += x->t - (double)x->n * tg;
    m->bytes += (double)x->n * x->pass.bytes;
    m->n += x->n;
  }
  for (int i = 0; i < npass; i++) fit_kernel(&pass[i], hw, quiet, f, &wsq, &wsum);
  f->kernel_rms = wsum > 0 ? sqrt(wsq / wsum) : NAN;
  if (wsum > 0 && !quiet)
    printf("  kernel rates step by step against the pooled rates: relative RMS residual "
           "%.1f %% (time-weighted)\n", 100 * f->kernel_rms);
}

/* Cells of the drift fit: one per run of a pass and collective kind. */
enum { MAX_RUNS = 8, NCELL = MAX_RUNS * FB_NCOLL };
static int cell(const coll_pt *c) {
  return (c->run < MAX_RUNS ? c->run : MAX_RUNS - 1) * FB_NCOLL + (int)c->coll;
}

/* Each cell's measured time in `a` (t), what its bytes cost at the latency-free model
 * (bytes) and its latency barriers (barriers), summed over its calls. */
typedef struct coll_sums {
  double t[NCELL], bytes[NCELL], barriers[NCELL];
  int64_t n[NCELL];
} coll_sums;

static void sum_colls(const in_step *a, const fb_hardware *hw, int world, coll_sums *cs) {
  fb_hardware h0 = *hw;
  h0.intra_lat = h0.inter_lat = 0;
  memset(cs, 0, sizeof *cs);
  for (int i = 0; i < a->ncoll; i++) {
    const coll_pt *c = &a->coll[i];
    const int k = cell(c);
    cs->t[k] += robust_t(c);
    cs->n[k] += c->n;
    cs->bytes[k] += c->n * fb_cost_collective(&h0, c->coll, c->payload, world);
    cs->barriers[k] += c->n * fb_cost_shared_memory_barriers(c->coll);
  }
}

/* The split runs simulated with `hw` (a temporary profile file): each collective kind's
 * predicted time, the ranks' drift included, into t. */
static fb_status sim_colls(const fb_hardware *hw, const calib_run *runs, int nruns,
                           const char *split, int world, double t[NCELL]) {
  char path[] = "/tmp/fsdpbench-drift-XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  if (fd < 0) return FB_ERR(FB_EIO, "calibrate: cannot create a temporary profile in /tmp");
  close(fd);
  in_step *b = calloc(1, sizeof *b);
  fb_status st = b ? fb_hardware_write(path, hw, "calibrate: the drift fit's trial profile")
                   : FB_ERR(FB_ENOMEM, "calibrate: out of host memory");
  if (st == FB_OK) st = run_pass(runs, nruns, "sim", path, split, 1, world, true, b);
  if (st == FB_OK) {
    for (int k = 0; k < NCELL; k++) t[k] = 0;
    for (int i = 0; i < b->ncoll; i++) t[cell(&b->coll[i])] += b->coll[i].t;
  }
  free(b);
  unlink(path);
  return st;
}

/* Least squares of y ~ a * x1 + b * x2 over the cells `use` keeps, a and b >= 0 (where the
 * pair's optimum has one negative, the other alone). */
static void solve2(const double *y, const double *x1, const double *x2, const bool *use,
                   double *a, double *b) {
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  for (int k = 0; k < NCELL; k++) {
    if (!use[k]) continue;
    a11 += x1[k] * x1[k], a12 += x1[k] * x2[k], a22 += x2[k] * x2[k];
    b1 += x1[k] * y[k], b2 += x2[k] * y[k];
  }
  const double det = a11 * a22 - a12 * a12;
  *a = det > 0 ? (b1 * a22 - b2 * a12) / det : -1;
  *b = det > 0 ? (a11 * b2 - a12 * b1) / det : -1;
  if (*a >= 0 && *b >= 0) return;
  const double a_only = a11 > 0 ? fmax(0, b1 / a11) : 0, b_only = a22 > 0 ? fmax(0, b2 / a22) : 0;
  if (*a < 0) *a = 0, *b = b_only;
  else *b = 0, *a = a_only;
}

/* The drift fit's table: each cell measured, at the micro-benchmark's figures and refitted
 * (`sim`: the split runs simulated with the fitted profile). */
static void print_comm_fit(const coll_sums *cs, const double *sim, const fb_hardware *old,
                           const fb_hardware *hw, int world) {
  printf("  %-28s %10s %12s %12s %12s\n", "collectives in step", "calls", "measured ms",
         "micro ms", "refit ms");
  for (int k = 0; k < NCELL; k++) {
    if (cs->n[k] == 0) continue;
    char what[40];
    snprintf(what, sizeof what, "%s (run %d)", fb_coll_name((fb_coll)(k % FB_NCOLL)),
             k / FB_NCOLL + 1);
    printf("  %-28s %10lld %12.2f %12.2f %12.2f\n", what, (long long)cs->n[k], cs->t[k] * 1e3,
           (cs->bytes[k] + old->intra_lat * cs->barriers[k]) * 1e3, sim[k] * 1e3);
  }
  printf("  in-step latency %.0f us, bandwidth %.3g GB/s (the micro-benchmark's %.0f us, %.3g "
         "GB/s), ranks' drift rank_jitter %.3g (a collective waits %.3g x the compute since the "
         "ranks met)\n", hw->intra_lat * 1e6, hw->intra_bw * 1e-9, old->intra_lat * 1e6,
         old->intra_bw * 1e-9, hw->rank_jitter, hw->rank_jitter * fb_expected_max_normal(world));
}

/* Each collective kind's own in-step rate (coll_gbs), with the latency and the drift as fitted
 * for all: on a shared host a kind runs at the share of the cores the step leaves it where it
 * runs (fsdp's prefetched gathers beside matrix products, its reduce-scatters mostly while the
 * host waits: one scale for both priced the reduce-scatters of the cpu-opaque loop 50-90 %
 * slow, 2026-11-29). A kind gets one where its calls move at least MIN_KIND_BYTES each and
 * took longer than their barriers; the others (the gradient norm's 8-byte all-reduce) keep
 * intra_bw. `bw0`: the rate cs->bytes was priced at. */
enum { MIN_KIND_BYTES = 64 << 10 };
static void kind_rates(const coll_sums *cs, const double *w, fb_hardware *hw, double bw0) {
  hw->ncoll_rates = 0;
  for (int c = 0; c < FB_NCOLL; c++) {
    double t = 0, x = 0, lat = 0, calls = 0;
    for (int k = c; k < NCELL; k += FB_NCOLL) {
      t += cs->t[k] - hw->rank_jitter * w[k];
      lat += hw->intra_lat * cs->barriers[k];
      x += cs->bytes[k] - cs->n[k] * hw->launch_s; /* its bytes' time at bw0 */
      calls += (double)cs->n[k];
    }
    if (!(calls > 0 && x * bw0 >= MIN_KIND_BYTES * calls && t > lat + calls * hw->launch_s) ||
        hw->ncoll_rates >= FB_HW_MAX_KERNELS)
      continue;
    fb_hw_kernel *e = &hw->coll_rates[hw->ncoll_rates++];
    snprintf(e->name, sizeof e->name, "%s", fb_coll_name((fb_coll)c));
    e->bw = fb_calib_sig4(bw0 * x / (t - lat - calls * hw->launch_s));
  }
}

/* The local communicator in a step and the ranks' drift (rank_jitter), fitted on the fsdp
 * split runs' own collectives. A staged 2-rank collective in a step is mostly a rank waiting
 * for its peer, and that wait grows with the compute each rank ran since they last met: a
 * latency alone fitted on one set of runs priced another's collectives 35-63 % short
 * (2026-11-29). Per run and kind: measured = lat * barriers + bytes / bandwidth + j * W, W the
 * simulated wait per unit of rank_jitter (the split runs simulated with the profile so far;
 * three times, each at the fit before). The latency comes from the all-reduces (the gradient
 * norm's 8 bytes, issued where the ranks have just met: 45-140 us); the bandwidth (a scale on
 * the micro-benchmark's) and the drift from the gathers and reductions, whose runs differ in
 * payload (two models) and in compute per unit (three token counts). Without all-reduces in the
 * runs, latency and drift are fitted together at the micro-benchmark's bandwidth. */
static fb_status fit_comm_drift(const in_step *a, fb_hardware *hw, const calib_run *runs,
                                int nruns, const char *split, int world, bool quiet) {
  hw->ncoll_rates = 0; /* the fit prices every kind at one bandwidth; kind_rates then splits */
  const fb_hardware old = *hw;
  coll_sums cs;
  sum_colls(a, hw, world, &cs);
  double r[NCELL], w[NCELL], s[NCELL], lat = 0, sc = 1, j = 0.2, tot = 0, ty = 0, tb = 0;
  bool rest[NCELL], all[NCELL];
  for (int k = 0; k < NCELL; k++) {
    tot += cs.t[k];
    all[k] = true;
    rest[k] = k % FB_NCOLL != FB_COLL_ALL_REDUCE;
    if (!rest[k]) ty += cs.t[k] - cs.bytes[k], tb += cs.barriers[k];
  }
  if (!(tot > 0)) return FB_OK; /* no collectives: keep the micro-benchmark's figures */
  const bool ar = tb > 0 && ty > 0;
  if (ar) lat = ty / tb;
  for (int pass = 0; pass < 3 && j > 0; pass++) {
    fb_hardware h = *hw;
    h.intra_lat = h.inter_lat = lat;
    h.intra_bw = old.intra_bw / sc, h.inter_bw = old.inter_bw / sc;
    h.rank_jitter = j;
    FB_TRY(sim_colls(&h, runs, nruns, split, world, s));
    for (int k = 0; k < NCELL; k++)
      w[k] = fmax(0, s[k] - sc * cs.bytes[k] - lat * cs.barriers[k]) / j;
    double j2;
    if (ar) {
      for (int k = 0; k < NCELL; k++) r[k] = cs.t[k] - lat * cs.barriers[k];
      solve2(r, cs.bytes, w, rest, &sc, &j2);
      sc = fmin(fmax(sc, 0.25), 20);
    } else {
      for (int k = 0; k < NCELL; k++) r[k] = cs.t[k] - cs.bytes[k];
      solve2(r, cs.barriers, w, all, &lat, &j2);
    }
    j = fmin(j2, 1);
  }
  /* a latency of zero would be a collective free of its barriers: keep one microsecond */
  hw->intra_lat = hw->inter_lat = fb_calib_sig4(fmax(lat, 1e-6));
  hw->intra_bw = fb_calib_sig4(old.intra_bw / sc), hw->inter_bw = fb_calib_sig4(old.inter_bw / sc);
  hw->rank_jitter = fb_calib_sig4(j);
  kind_rates(&cs, w, hw, old.intra_bw);
  if (quiet) return FB_OK;
  FB_TRY(sim_colls(hw, runs, nruns, split, world, s));
  print_comm_fit(&cs, s, &old, hw, world);
  printf("  own rates (coll_gbs):");
  for (int i = 0; i < hw->ncoll_rates; i++)
    printf(" %s %.3g GB/s,", hw->coll_rates[i].name, hw->coll_rates[i].bw * 1e-9);
  printf(" every other kind at the bandwidth above\n");
  return FB_OK;
}

fb_status fb_calibrate_in_step(fb_hardware *hw, const char *backend, const char *split,
                               int threads, bool quick, bool quiet, fb_calib_diag *diag) {
  const bool cpu = !strcmp(backend, "cpu");
  const calib_run *runs = quick ? runs_quick : cpu ? runs_full : runs_device;
  const int nruns = quick ? NRUNS(runs_quick) : cpu ? NRUNS(runs_full) : NRUNS(runs_device);
  in_step *a = calloc(1, sizeof *a);
  if (!a) return FB_ERR(FB_ENOMEM, "calibrate: out of host memory");
  if (!quiet) printf("\n  in-step rates: single-rank training steps on the %s executor (%d "
                     "thread(s)), ops of the steps after the first\n", backend, threads);
  fb_status st = run_pass(runs, nruns, backend, NULL, split, threads, 1, quiet, a);
  if (st != FB_OK) goto out;
  in_step_fit f = {.robust = !cpu, .kernels = hw->kernels, .nkernels = &hw->nkernels};
  fit_pass(a, hw, quiet, &f);
  hw->gemm_max_eff = f.E;
  hw->gemm_half_size = f.h;
  hw->attn_eff = f.attn;
  if (diag) {
    diag->gemm_rms = f.gemm_rms;
    if (!isnan(f.attn_raw)) diag->attn_raw = f.attn_raw;
    if (!isnan(f.kernel_rms)) diag->kernel_rms = f.kernel_rms;
  }
  hw->split_ranks = 0;
  hw->nsplit_kernels = 0;
  if (threads < 2) goto out;

  /* the split: `threads` 1-thread ranks at once (ddp: the same compute ops as single; fsdp:
   * those and its gathers' and flat copies' kernels) */
  const calib_run *sruns = quick ? split_quick : cpu ? split_full : split_device;
  const int nsruns = quick ? NRUNS(split_quick) : cpu ? NRUNS(split_full) : NRUNS(split_device);
  if (!quiet) printf("\n  split rates: %d ranks of 1 thread at once (%s, local communicator), "
                     "every rank's ops of the steps after the first\n", threads, split);
  if ((st = run_pass(sruns, nsruns, backend, NULL, split, threads, threads, quiet, a)) != FB_OK)
    goto out;
  in_step_fit g = {.robust = !cpu, .kernels = hw->split_kernels,
                   .nkernels = &hw->nsplit_kernels};
  fit_pass(a, hw, quiet, &g);
  hw->split_ranks = threads;
  hw->split_gemm_max_eff = g.E;
  hw->split_gemm_half_size = g.h;
  hw->split_attn_eff = g.attn;
  /* after the split rates: the drift fit simulates the split runs with them */
  if (strcmp(backend, "cpu") && hw->collectives == FB_COLLS_SHARED_MEMORY &&
      (st = fit_comm_drift(a, hw, sruns, nsruns, split, threads, quiet)) != FB_OK)
    goto out;
  if (diag) {
    diag->split_gemm_rms = g.gemm_rms;
    diag->split_attn_raw = g.attn_raw;
    diag->split_kernel_rms = g.kernel_rms;
  }
out:
  free(a);
  return st;
}
