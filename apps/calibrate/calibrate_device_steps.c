/* The in-step figures of `calibrate --backend B` (see calibrate_device.h): what each op family
 * costs as a training step on this device runs it, not as a microbenchmark repeats it on warm
 * buffers. The microbenchmarks (calibrate_device.c, calibrate_attention.c) give the shape of
 * each curve; short single-rank training runs on the device then set its level:
 *  - every memory-bound op a step issues gets its own measured rate (kernel_gbs: the bytes its
 *    wrapper counts over its time less the launch overhead), instead of the datasheet
 *    bandwidth times a framework's kernel-chain factor; the profile then prices this program's
 *    kernels (eager_mem_factor 0: no eager PyTorch chains);
 *  - on a profile with the GPU shape model (sm_count > 0): each run is simulated with the
 *    profile so far and matched op by op (op_match.h); the GEMM ceiling and the attention
 *    curve's forward and backward efficiencies are scaled by predicted / measured time of their
 *    ops, three times over (a fixed point: launch and memory terms do not scale); the step
 *    factor sustained_compute is then 1, since the ceilings are a step's;
 *  - on a CPU device's profile (the size curve: cpu-opaque, the tests' GPU stand-in): the cpu
 *    calibration's own in-step refit (calibrate_steps.c) on this device, split figures
 *    included (on fsdp runs of 1-thread ranks: its gathers' and flat copies' kernels too),
 *    and the local communicator measured between two ranks of this device (its collectives
 *    staged through host memory, as a step's are; each collective kind at its own in-step
 *    rate, coll_gbs); kernels and collectives at the median of their step pairs, the
 *    statistic validate's measured side takes.
 * It writes nothing (calibrate_device.c writes the profile). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/backends/registry.h"
#include "../engine/config/config.h"
#include "../strategies/strategy.h"
#include "calibrate_comm.h"
#include "calibrate_device.h"
#include "op_match.h"

/* ---- a CPU device --------------------------------------------------------------------------- */

static fb_status cpu_device_in_step(fb_devcal *c) {
  fb_hardware *h = &c->hw;
  const char *be = c->o->backend;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads = cores > 0 ? (int)cores : 1;
  h->nkernels = h->nsplit_kernels = h->nkernel_fixed = 0; /* every table measured here */
  printf("\n  local communicator between 2 ranks of %s\n", be);
  FB_TRY(fb_calibrate_local_comm(h, be, c->o->quick, false, NULL));
  const char *how = "the local communicator, 2 rank threads of this device, idle and beside GEMMs";
  const double micro_lat = h->intra_lat, micro_bw = h->intra_bw;
  FB_TRY(fb_calibrate_in_step(h, be, "fsdp", threads, c->o->quick, false, NULL));
  char in[160];
  snprintf(in, sizeof in, "%s", how);
  if (h->intra_bw != micro_bw)
    snprintf(in, sizeof in, "in-step: the collectives of fsdp runs of %d 1-thread ranks at "
             "once on %s (micro-benchmark %.3g GB/s)", threads, be, micro_bw * 1e-9);
  fb_devcal_tag_key(c, "intra_bw_gbs", h->intra_bw * 1e-9, in);
  fb_devcal_tag_key(c, "inter_bw_gbs", h->inter_bw * 1e-9, in);
  snprintf(in, sizeof in, "%s", how);
  if (h->intra_lat != micro_lat)
    snprintf(in, sizeof in, "in-step: the collectives of fsdp runs of %d 1-thread ranks at "
             "once on %s (micro-benchmark %.0f us)", threads, be, micro_lat * 1e6);
  fb_devcal_tag_key(c, "intra_lat_us", h->intra_lat * 1e6, in);
  fb_devcal_tag_key(c, "inter_lat_us", h->inter_lat * 1e6, in);
  if (h->rank_jitter > 0)
    fb_devcal_tag_key(c, "rank_jitter", h->rank_jitter,
                      "in-step: fitted with the latency and the bandwidth on the same "
                      "collectives, the runs simulated (a collective waits for the peer that "
                      "drifted behind)");
  snprintf(in, sizeof in, "in-step refit on the ops of single-rank training runs on %s", be);
  fb_devcal_tag_key(c, "gemm_max_efficiency", h->gemm_max_eff, in);
  fb_devcal_tag_key(c, "gemm_half_size", h->gemm_half_size, in);
  fb_devcal_tag_key(c, "attention_efficiency", h->attn_eff, in);
  if (h->split_ranks > 1) {
    snprintf(in, sizeof in, "in-step refit on %d 1-thread ranks at once (fsdp) on %s",
             h->split_ranks, be);
    fb_devcal_tag_key(c, "split_ranks", h->split_ranks, in);
    fb_devcal_tag_key(c, "split_gemm_max_efficiency", h->split_gemm_max_eff, in);
    fb_devcal_tag_key(c, "split_gemm_half_size", h->split_gemm_half_size, in);
    fb_devcal_tag_key(c, "split_attention_efficiency", h->split_attn_eff, in);
    /* The split rates are fsdp steps' own: their ops ran beside the run's gathers and
     * reduce-scatters as often as a step overlaps them, so they carry that slowdown already.
     * The base profile's flat factor on top priced the cpu-opaque loop's overlapped ops twice
     * (layernorm_fwd +57 to +72 %, residual_add +42 %; docs/simulator.md). */
    h->overlap_slowdown = 1;
    fb_devcal_tag_key(c, "overlap_slowdown", 1,
                      "1: the split rates above were measured beside the steps' own collectives");
  }
  c->tables = true;
  return FB_OK;
}

/* ---- the GPU shape model -------------------------------------------------------------------- */

typedef struct gpu_run {
  const char *model, *strategy;
  int batch, seq, steps;
} gpu_run;

/* A GPT-2 and a Llama at a half and a quarter of the token counts scripts/gpu_check.sh
 * validates (gpt2-124m 8 x 1024 single, 1B 4 x 2048 fsdp): the validation stays a prediction,
 * and each activation-sized kernel is timed at two sizes (its time per call is a line in its
 * bytes: a small kernel's fixed part does not scale, the H200 of 2026-11-29 showed); the Llama
 * under fsdp on one rank, so its gathers' copies and flat-gradient kernels are measured too. */
static const gpu_run gpu_runs[] = {{"gpt2-124m", "single", 4, 1024, 3},
                                   {"gpt2-124m", "single", 2, 1024, 3},
                                   {"1B", "fsdp", 2, 2048, 3},
                                   {"1B", "fsdp", 1, 2048, 3}};
static const gpu_run gpu_runs_quick[] = {{"debug", "single", 2, 64, 2},
                                         {"debug-llama", "fsdp", 2, 64, 2}};
enum { MAX_RUNS = 4, ITERATIONS = 3, MAX_ROWS = 64 };

/* One measured run on the device: single rank, the steps after the first traced. */
static fb_status measure_run(const fb_devcal *c, const gpu_run *r, fb_run_result *m) {
  fb_run_config cfg;
  fb_config_defaults(&cfg);
  snprintf(cfg.model, sizeof cfg.model, "%s", r->model);
  snprintf(cfg.strategy, sizeof cfg.strategy, "%s", r->strategy);
  snprintf(cfg.backend, sizeof cfg.backend, "%.*s", (int)sizeof cfg.backend - 1, c->o->backend);
  cfg.world = 1;
  cfg.batch = r->batch;
  cfg.seq = r->seq;
  cfg.steps = r->steps;
  cfg.quiet = true;
  cfg.trace = true;
  cfg.trace_wait = 0;
  cfg.trace_warmup = 1;
  cfg.trace_active = r->steps - 1;
  FB_TRY(fb_run_config_finalize(&cfg));
  return fb_run(&cfg, m);
}

/* The memory-bound ops of one name over the measured runs: the sums of a line in the bytes of
 * each call (its time less the launch overhead), which also hold the totals. */
typedef struct mem_sum {
  const char *name;
  fb_calib_line line;
} mem_sum;

static void add_mem_ops(const fb_devcal *c, const fb_run_result *m, mem_sum *ms, int *nms) {
  for (int r = 0; r < m->nranks; r++) {
    int64_t n = 0;
    const fb_rec_op *ops = fb_recorder_ops(m->ranks[r].rec, &n);
    for (int64_t i = 0; i < n; i++) {
      const fb_rec_op *o = &ops[i];
      if ((o->kind != FB_OP_MEM && o->kind != FB_OP_OPTIM) || !(o->t1 > o->t0)) continue;
      int k = 0;
      while (k < *nms && strcmp(ms[k].name, o->name)) k++;
      if (k == *nms) {
        if (*nms >= FB_HW_MAX_KERNELS) continue;
        ms[(*nms)++] = (mem_sum){.name = o->name};
      }
      fb_calib_line_add(&ms[k].line, (double)o->bytes, o->t1 - o->t0 - c->hw.launch_s);
    }
  }
}

/* Each memory-bound op's in-step rate into the profile's kernel table, and where its calls'
 * bytes span enough (two run sizes, tensors of several sizes) the fixed time a call takes
 * into kernel_us (fb_calib_line_fit: the line through its calls, its rate at most the measured
 * copy bandwidth); an op that is all launch overhead (busy under 20 us in all) keeps the
 * roofline. */
static void set_kernel_rates(fb_devcal *c, const mem_sum *ms, int nms) {
  fb_hardware *h = &c->hw;
  h->nkernels = h->nkernel_fixed = 0;
  const double copy = h->mem_bw * h->mem_eff;
  printf("  %-28s %10s %12s %12s %10s\n", "memory-bound ops in step", "ops", "MB/op", "GB/s",
         "us/call");
  for (int i = 0; i < nms; i++) {
    const fb_calib_line *l = &ms[i].line; /* l->st: busy time, launch overheads taken off */
    if (!(l->sb > 0) || !(l->st > 20e-6) || strlen(ms[i].name) >= sizeof h->kernels[0].name)
      continue;
    double bw, fixed;
    fb_calib_line_fit(l, copy, &bw, &fixed);
    fb_hw_kernel *k = &h->kernels[h->nkernels++];
    snprintf(k->name, sizeof k->name, "%s", ms[i].name);
    k->bw = fb_calib_sig4(bw);
    if (fixed >= 0.05e-6) {
      fb_hw_kernel *f = &h->kernel_fixed[h->nkernel_fixed++];
      snprintf(f->name, sizeof f->name, "%s", ms[i].name);
      f->bw = fb_calib_sig4(fixed);
    }
    printf("  %-28s %10.0f %12.3f %12.2f %10.2f\n", ms[i].name, l->n, l->sb / l->n * 1e-6,
           k->bw * 1e-9, fixed >= 0.05e-6 ? fixed * 1e6 : 0.0);
  }
  c->tables = true;
}

/* Predicted and measured seconds of the op families the in-step refit scales. */
typedef struct family_sums {
  double gemm[2], fwd[2], bwd[2]; /* [0] measured, [1] predicted */
} family_sums;

/* Simulates every measured run with `hw` (written to `path`) and sums its families. */
static fb_status predict_runs(const fb_hardware *hw, const char *path, const fb_run_result *m,
                              int nruns, family_sums *f) {
  FB_TRY(fb_calib_write_profile(path, hw, "calibrate --backend: in-step refit (temporary)",
                                true));
  memset(f, 0, sizeof *f);
  for (int r = 0; r < nruns; r++) {
    fb_run_config cp = m[r].cfg; /* the executed run's effective options, on sim */
    snprintf(cp.backend, sizeof cp.backend, "sim");
    snprintf(cp.comm, sizeof cp.comm, "sim");
    snprintf(cp.hardware, sizeof cp.hardware, "%s", path);
    FB_TRY(fb_run_config_finalize(&cp));
    fb_run_result p;
    FB_TRY(fb_run(&cp, &p));
    fb_op_row rows[MAX_ROWS];
    int nrows = 0;
    int64_t mismatched = 0;
    fb_status st = fb_op_match(&m[r], &p, rows, &nrows, MAX_ROWS, &mismatched);
    fb_run_result_free(&p);
    FB_TRY(st);
    if (mismatched) /* the ops matched up to there still price the families */
      printf("  note: the simulated %s run's ops part from the executed run's on %lld "
             "track(s); matched up to there\n", m[r].cfg.model, (long long)mismatched);
    for (int i = 0; i < nrows; i++) {
      double *s = !strncmp(rows[i].name, "matmul_", 7)  ? f->gemm
                  : !strcmp(rows[i].name, "attention_fwd") ? f->fwd
                  : !strcmp(rows[i].name, "attention_bwd") ? f->bwd
                                                             : NULL;
      if (s) s[0] += rows[i].meas, s[1] += rows[i].pred;
    }
  }
  return FB_OK;
}

/* v times predicted / measured (a time goes as 1 / efficiency), within (0, 1]. */
static void scale(double *v, const double s[2]) {
  if (*v > 0 && s[0] > 0 && s[1] > 0) *v = fmin(1.0, *v * s[1] / s[0]);
}

static void print_families(const char *when, const family_sums *f) {
  printf("  %-28s GEMMs %+.1f%%, attention fwd %+.1f%%, bwd %+.1f%% (predicted vs measured)\n",
         when, 100 * (f->gemm[1] / f->gemm[0] - 1), 100 * (f->fwd[1] / f->fwd[0] - 1),
         100 * (f->bwd[1] / f->bwd[0] - 1));
}

static fb_status refit_families(fb_devcal *c, const fb_run_result *m, int nruns) {
  fb_hardware *h = &c->hw;
  char path[] = "/tmp/fsdpbench-calibrate-XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  if (fd < 0) return FB_ERR(FB_EIO, "calibrate: cannot create a temporary profile in /tmp");
  close(fd);
  family_sums f;
  fb_status st = FB_OK;
  for (int it = 0; it < ITERATIONS && st == FB_OK; it++) {
    if ((st = predict_runs(h, path, m, nruns, &f)) != FB_OK) break;
    if (it == 0) print_families("microbenchmark figures:", &f);
    scale(&h->gemm_max_eff, f.gemm);
    if (h->flash_fwd_eff > 0) {
      scale(&h->flash_fwd_eff, f.fwd);
      scale(&h->flash_bwd_eff, f.bwd);
    } else {
      const double both[2] = {f.fwd[0] + f.bwd[0], f.fwd[1] + f.bwd[1]};
      scale(&h->attn_eff, both);
    }
  }
  if (st == FB_OK && (st = predict_runs(h, path, m, nruns, &f)) == FB_OK)
    print_families("in-step figures:", &f);
  unlink(path);
  return st;
}

static fb_status gpu_in_step(fb_devcal *c) {
  const bool quick = c->o->quick;
  const gpu_run *runs = quick ? gpu_runs_quick : gpu_runs;
  const int nruns = quick ? (int)(sizeof gpu_runs_quick / sizeof *gpu_runs_quick)
                          : (int)(sizeof gpu_runs / sizeof *gpu_runs);
  fb_run_result m[MAX_RUNS];
  mem_sum ms[FB_HW_MAX_KERNELS];
  int done = 0, nms = 0;
  fb_status st = FB_OK;
  printf("\n  in-step figures: single-rank training runs on %s, ops of the steps after the "
         "first\n", c->o->backend);
  for (; done < nruns && st == FB_OK; done++) {
    if ((st = measure_run(c, &runs[done], &m[done])) != FB_OK) break;
    printf("  %-12s %-6s batch %d x seq %d, %d steps\n", runs[done].model, runs[done].strategy,
           runs[done].batch, runs[done].seq, runs[done].steps);
    add_mem_ops(c, &m[done], ms, &nms);
  }
  if (st == FB_OK) {
    set_kernel_rates(c, ms, nms);
    c->hw.eager_mem_factor = 0; /* the kernels are this program's: no framework chains */
    c->hw.sustained = 0;        /* a step's rates: the refit ceilings hold the step factor */
    st = refit_families(c, m, done);
  }
  for (int i = 0; i < done; i++) fb_run_result_free(&m[i]);
  if (st != FB_OK) return st;
  fb_hardware *h = &c->hw;
  char how[160];
  snprintf(how, sizeof how, "in-step refit: GEMM and attention ops of %d training run(s), "
           "simulated and matched op by op", done);
  fb_devcal_tag_key(c, "gemm_max_efficiency", h->gemm_max_eff, how);
  if (h->flash_fwd_eff > 0) {
    fb_devcal_tag_key(c, "flash_fwd_efficiency", h->flash_fwd_eff, how);
    fb_devcal_tag_key(c, "flash_bwd_efficiency", h->flash_bwd_eff, how);
  } else {
    fb_devcal_tag_key(c, "attention_efficiency", h->attn_eff, how);
  }
  if (c->base.sustained > 0)
    fb_devcal_tag_key(c, "sustained_compute", 1, "1: the in-step ceilings above are a step's");
  if (c->base.eager_mem_factor > 0)
    fb_devcal_tag_key(c, "eager_mem_factor", 0, "0: this program's kernels, each at its "
                      "in-step rate (kernel_gbs), no eager framework chains");
  if (fb_device_caps_of(c->d)->gemm_epilogues) {
    h->gemm_epilogue_gelu = true;
    fb_devcal_tag_key(c, "gemm_epilogue_gelu", 1, "1: this device's GEMMs apply GELU and its "
                      "gradient in their epilogue (its declared capability)");
  }
  return FB_OK;
}

fb_status fb_devcal_in_step(fb_devcal *c) {
  return c->hw.sm_count > 0 ? gpu_in_step(c) : cpu_device_in_step(c);
}
