/* `fsdpbench plan`: the candidates (every strategy and the options that matter for it), one
 * simulated run of each through fb_run (backend sim, 2 steps, quiet), the memory filter and
 * the ranked table. The figures are the runner's own (the same as the report of a sim run):
 * step time is the last step of the slowest simulated rank, peak memory the largest peak; "no
 * overlap" is that step plus rank 0's comm time under compute (the top of the prediction's range).
 * This file does not model anything. */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../strategies/strategy.h"
#include "../engine/core/progress.h"
#include "../engine/exec/runner.h"
#include "common/report.h"
#include "../engine/sim/hardware.h"

typedef struct candidate {
  const char *strategy;
  int prefetch;  /* -1: leave as configured, 0 off, 1 on */
  int reshard;   /* -1, 0, 1: reshard_after_forward */
  int accum;     /* -1 or an fb_accum_mode */
  int shard;     /* > 0: --mesh (world / shard) x shard; 0: the strategy's own layout */
  int world;
  int zeropp;    /* -1: not zeropp; 0: its switches off; 1: qwZ + qgZ, and hpZ over a node */
} candidate;

static const char *accum_name(fb_accum_mode m) {
  switch (m) {
  case FB_ACCUM_REDUCE: return "reduce";
  case FB_ACCUM_NO_RESHARD: return "no-reshard";
  case FB_ACCUM_NO_REDUCE: return "no-reduce";
  }
  return "?";
}

/* Which accumulation modes change what a strategy does: reduce always, the others where the
 * strategy's table says it honours them. */
static bool accum_applies(const fb_strategy *s, fb_accum_mode m) {
  return m == FB_ACCUM_REDUCE || (s->accum_modes & (1u << m));
}

/* Every strategy of the registry that runs on more than one rank, with the options its table
 * says change what it does: prefetch, reshard-after-forward, the accumulation modes; and a
 * strategy that takes --mesh also sharded within a node and replicated across nodes (`node`
 * ranks per shard group, when the world is a multiple of more than one node), unless that is
 * already its own default (hsdp); zeropp with its switches all off and all on (hpZ over a
 * node when the world is several nodes). */
static int build_candidates(int micro_steps, int world, int node, candidate *out, int max) {
  int n = 0;
  const int naccum = micro_steps > 1 ? 3 : 1;
  const bool meshes = node > 1 && world > node && world % node == 0;
  for (int si = 0; si < fb_strategy_count(); si++) {
    const fb_strategy *s = fb_strategy_at(si);
    if (s->one_rank) continue; /* not a data-parallel candidate */
    const int np = s->tunes_prefetch ? 2 : 1, nr = s->tunes_reshard ? 2 : 1;
    const int nm = meshes && s->mesh && !s->mesh_node_default ? 2 : 1;
    const int nz = s->takes_zeropp ? 2 : 1;
    for (int g = 0; g < nm; g++)
      for (int a = 0; a < naccum; a++) {
        if (!accum_applies(s, (fb_accum_mode)a)) continue;
        for (int z = 0; z < nz; z++)
          for (int p = 0; p < np; p++)
            for (int r = 0; r < nr; r++) {
              if (n >= max) return n;
              out[n++] = (candidate){.strategy = s->name,
                                     .prefetch = s->tunes_prefetch ? 1 - p : -1,
                                     .reshard = s->tunes_reshard ? 1 - r : -1,
                                     .accum = micro_steps > 1 ? a : -1,
                                     .shard = g ? node : 0,
                                     .zeropp = s->takes_zeropp ? z : -1};
            }
      }
  }
  return n;
}

static void describe(const candidate *c, char *buf, size_t n) {
  size_t off = 0;
  buf[0] = '\0';
  if (c->prefetch >= 0)
    off += (size_t)snprintf(buf + off, n - off, "prefetch %s", c->prefetch ? "on" : "off");
  if (c->reshard >= 0 && off < n)
    off += (size_t)snprintf(buf + off, n - off, "%sreshard_after_forward %s", off ? ", " : "",
                            c->reshard ? "on" : "off");
  if (c->accum >= 0 && off < n)
    off += (size_t)snprintf(buf + off, n - off, "%saccum %s", off ? ", " : "",
                            accum_name((fb_accum_mode)c->accum));
  if (c->shard > 0 && off < n)
    off += (size_t)snprintf(buf + off, n - off, "%smesh %dx%d", off ? ", " : "",
                            c->world / c->shard, c->shard);
  if (c->zeropp >= 0 && off < n)
    off += (size_t)snprintf(buf + off, n - off, "%s%s", off ? ", " : "",
                            c->zeropp ? "qwZ+hpZ+qgZ" : "ZeRO++ off");
  if (!buf[0]) snprintf(buf, n, "-");
}

bool fb_plan_row_fits(const fb_plan_row *r, int64_t capacity) {
  return r->peak_bytes <= capacity && r->ooms == 0;
}

static void run_one(const fb_run_config *base, const candidate *cand, int64_t capacity,
                    int node, fb_plan_row *row) {
  memset(row, 0, sizeof *row);
  snprintf(row->strategy, sizeof row->strategy, "%s", cand->strategy);
  describe(cand, row->options, sizeof row->options);
  fb_run_config cfg = *base;
  snprintf(cfg.strategy, sizeof cfg.strategy, "%s", cand->strategy);
  if (cand->prefetch >= 0) cfg.prefetch_forward = cfg.prefetch_backward = cand->prefetch;
  if (cand->reshard >= 0) cfg.reshard_after_forward = cand->reshard;
  if (cand->accum >= 0) cfg.accum = (fb_accum_mode)cand->accum;
  if (cand->shard > 0)
    snprintf(cfg.mesh, sizeof cfg.mesh, "%dx%d", cfg.world / cand->shard, cand->shard);
  cfg.zeropp_quant_weights = cfg.zeropp_quant_grads = cand->zeropp == 1;
  cfg.zeropp_hpz = cand->zeropp == 1 ? node : 0; /* hpZ's group: the profile's node */
  fb_run_result res;
  fb_status st = fb_run(&cfg, &res);
  row->st = st;
  if (st != FB_OK) {
    snprintf(row->error, sizeof row->error, "%s", fb_error_msg());
    fb_run_result_free(&res);
    return;
  }
  const int last = res.nsteps - 1;
  double step = 0, exposed = 0;
  int64_t peak = 0;
  for (int r = 0; r < res.nranks; r++) {
    const fb_step_stats *ss = &res.ranks[r].steps[last];
    if (ss->wall > step) step = ss->wall;
    if (ss->exposed_comm > exposed) exposed = ss->exposed_comm;
    if (res.ranks[r].mem.peak_total > peak) peak = res.ranks[r].mem.peak_total;
  }
  row->step_s = step;
  row->exposed_comm_s = exposed;
  row->why = res.ranks[0].steps[last];
  row->no_overlap_s = step + fb_report_hidden(row->why.comm, row->why.exposed_comm);
  fb_dev_model m;
  if (res.ranks[0].rec && fb_recorder_model(res.ranks[0].rec, &m) && m.alloc_model)
    row->reserved_peak = m.reserved_peak;
  row->peak_bytes = peak;
  row->ooms = fb_report_ooms(&res, NULL);
  row->tokens_per_s_per_rank = step > 0 ? (double)res.tokens_per_step / step / res.world : 0;
  row->mfu = step > 0 && res.peak_flops > 0
                 ? res.model_flops_per_step / (step * res.world * res.peak_flops)
                 : 0;
  row->fits = fb_plan_row_fits(row, capacity);
  fb_run_result_free(&res);
}

fb_status fb_plan_run(const fb_run_config *base_in, fb_plan_row **rows, int *nrows,
                      int64_t *capacity) {
  *rows = NULL;
  *nrows = 0;
  fb_run_config base = *base_in;
  snprintf(base.backend, sizeof base.backend, "sim");
  snprintf(base.comm, sizeof base.comm, "sim");
  if (!base.hardware[0]) snprintf(base.hardware, sizeof base.hardware, "h100");
  base.quiet = true;
  base.trace = false;
  base.mem_snapshot = false;
  base.out[0] = '\0';
  if (base.steps < 2) base.steps = 2;
  if (base.steps > 2) base.steps = 2;
  /* measure the peak whatever it is; the capacity filter is ours */
  base.mem_limit = INT64_MAX / 4;
  fb_hardware hw;
  FB_TRY(fb_hardware_load(base.hardware, &hw));
  *capacity = hw.mem_capacity;
  if (base.world <= 0) base.world = hw.devices_per_node;
  int per_rank = base.world > 0 ? base.batch / base.world : base.batch;
  int micro = base.micro_batch > 0 && per_rank > 0 ? per_rank / base.micro_batch : 1;
  candidate cands[128];
  int n = build_candidates(micro, base.world, hw.devices_per_node, cands, 128);
  for (int i = 0; i < n; i++) cands[i].world = base.world;
  /* zeropp's hpZ group: a node of the profile when the world is several of them, else none */
  const int dpn = hw.devices_per_node;
  const int zpp_node = dpn > 1 && base.world > dpn && base.world % dpn == 0 ? dpn : 0;
  fb_plan_row *out = calloc(n > 0 ? (size_t)n : 1, sizeof *out);
  if (!out) return FB_ERR(FB_ENOMEM, "plan: out of host memory");
  fb_progress prog; /* stderr: in place on a terminal, else a line every few seconds */
  fb_progress_start(&prog, "plan: candidate", n, true);
  for (int i = 0; i < n; i++) {
    char opts[160], what[200];
    describe(&cands[i], opts, sizeof opts);
    snprintf(what, sizeof what, "done, running %s (%s)", cands[i].strategy, opts);
    fb_progress_update(&prog, i, what);
    run_one(&base, &cands[i], hw.mem_capacity, zpp_node, &out[i]);
  }
  fb_progress_end(&prog);
  *rows = out;
  *nrows = n;
  return FB_OK;
}

static int by_step(const void *a, const void *b) {
  const fb_plan_row *x = a, *y = b;
  return (x->step_s > y->step_s) - (x->step_s < y->step_s);
}

static double gib(int64_t b) { return (double)b / 1073741824.0; }

/* Where each fitting candidate's step goes (rank 0, last step), in the ranked order: the
 * compute stream's time by op kind, the exposed (not overlapped) time of each collective type,
 * the host's stalls and the allocator's cudaMalloc / retry time, what is left idle, and the
 * allocated and (allocator model) reserved peaks. */
/* "prefetch on, reshard_after_forward off, accum reduce" -> "pf on, raf off, acc reduce" */
static void abbreviate(const char *in, char *out, size_t n) {
  static const char *const from[] = {"prefetch", "reshard_after_forward", "accum"};
  static const char *const to[] = {"pf", "raf", "acc"};
  size_t o = 0;
  while (*in && o + 1 < n) {
    size_t k = 0;
    while (k < 3 && strncmp(in, from[k], strlen(from[k]))) k++;
    if (k < 3) {
      o += (size_t)snprintf(out + o, n - o, "%s", to[k]);
      in += strlen(from[k]);
    } else {
      out[o++] = *in++;
    }
  }
  out[o < n ? o : n - 1] = 0;
}

static void print_why(FILE *f, const fb_plan_row *rows, int nrows) {
  fprintf(f, "\nwhere the predicted step goes (ms; rank 0, last step; exposed = not hidden "
             "under compute; idle = step - compute - exposed comm):\n");
  fb_report_why_head(f, "rank strategy options");
  int k = 0;
  for (int i = 0; i < nrows; i++) {
    const fb_plan_row *r = &rows[i];
    if (r->st != FB_OK || !r->fits) continue;
    char label[96], opt[96];
    abbreviate(r->options, opt, sizeof opt);
    snprintf(label, sizeof label, "%4d %-7s %.22s", ++k, r->strategy, opt);
    fb_report_why_row(f, label, &r->why, r->peak_bytes, r->reserved_peak);
  }
}

void fb_plan_print(FILE *f, const fb_run_config *base, const fb_plan_row *rows_in, int nrows,
                   int64_t capacity) {
  fb_plan_row *rows = malloc(sizeof *rows * (size_t)(nrows > 0 ? nrows : 1));
  if (!rows) return;
  memcpy(rows, rows_in, sizeof *rows * (size_t)nrows);
  for (int i = 0; i < nrows; i++)
    rows[i].fits = fb_plan_row_fits(&rows[i], capacity);
  qsort(rows, (size_t)nrows, sizeof *rows, by_step);
  int nfit = 0, nbig = 0, nfail = 0;
  for (int i = 0; i < nrows; i++) {
    if (rows[i].st != FB_OK) nfail++;
    else if (rows[i].fits) nfit++;
    else nbig++;
  }
  fprintf(f, "\nranked by predicted step time (fits in %.1f GiB per device):\n", gib(capacity));
  fprintf(f, "%4s  %-7s %-56s %10s %13s %7s %12s %15s %9s\n", "rank", "strategy", "options",
          "step ms", "tok/s/GPU", "MFU %", "exposed ms", "no overlap ms", "peak GiB");
  int k = 0;
  for (int i = 0; i < nrows; i++) {
    const fb_plan_row *r = &rows[i];
    if (r->st != FB_OK || !r->fits) continue;
    fprintf(f, "%4d  %-7s %-56s %10.2f %13.0f %7.1f %12.2f %15.2f %9.2f\n", ++k, r->strategy,
            r->options, r->step_s * 1e3, r->tokens_per_s_per_rank, 100 * r->mfu,
            r->exposed_comm_s * 1e3, r->no_overlap_s * 1e3, gib(r->peak_bytes));
  }
  if (nfit) print_why(f, rows, nrows);
  if (!nfit) fprintf(f, "      (no candidate fits: activation recomputation (--recompute full), "
                        "a smaller --micro-batch or --seq, bf16 parameters or more ranks may)\n");
  if (nbig) {
    fprintf(f, "\ndoes not fit (predicted peak per rank > %.1f GiB, or the caching allocator's "
               "reserved memory over it: out of memory):\n", gib(capacity));
    for (int i = 0; i < nrows; i++) {
      const fb_plan_row *r = &rows[i];
      if (r->st != FB_OK || r->fits) continue;
      fprintf(f, "      %-7s %-56s peak %9.2f GiB (step would be %.2f ms)", r->strategy,
              r->options, gib(r->peak_bytes), r->step_s * 1e3);
      if (r->peak_bytes <= capacity)
        fprintf(f, "; reserved %.2f GiB: %lld out-of-memory error(s)", gib(r->reserved_peak),
                (long long)r->ooms);
      fputc('\n', f);
    }
  }
  if (nfail) {
    fprintf(f, "\ncould not run:\n");
    for (int i = 0; i < nrows; i++) {
      const fb_plan_row *r = &rows[i];
      if (r->st == FB_OK) continue;
      fprintf(f, "      %-7s %-56s %s: %s\n", r->strategy, r->options, fb_status_name(r->st),
              r->error);
    }
  }
  /* the registry's one-rank strategies are not data-parallel candidates: say so, by name */
  for (int i = 0; fb_strategy_at(i); i++)
    if (fb_strategy_at(i)->one_rank)
      fprintf(f, "\nnot a candidate: %s (runs one rank; the reference the others are tested "
                 "against)\n", fb_strategy_at(i)->name);
  (void)base;
  free(rows);
}

static int plan_fail(fb_status st) {
  fprintf(stderr, "fsdpbench plan: error: %s\n", fb_error_msg());
  return fb_exit_code(st);
}

int fb_plan_main(int argc, char **argv) {
  fb_run_config cfg;
  fb_config_defaults(&cfg);
  bool help = false;
  fb_status st = fb_config_parse_args(&cfg, argc, argv, 1, &help);
  if (help) {
    printf("usage: fsdpbench plan --model NAME --hardware PROFILE --world W [run flags]\n"
           "Simulates every data-parallel strategy of the registry (%s) with the options\n"
           "each one honours (prefetch, reshard_after_forward on/off; each accumulation mode\n"
           "when there are several micro-steps) with --backend sim, drops what does not fit in\n"
           "the profile's memory and ranks the rest by predicted step time. The run flags are\n"
           "those of the main command.\n"
           "Exit codes: 0 ranked; 1 runtime failure; 2 bad usage; 3 no candidate fits. Progress\n"
           "(candidate k/N, elapsed, ETA) goes to stderr.\n\n", fb_strategy_names());
    fb_config_print_help(stdout, fb_strategy_names());
    return 0;
  }
  if (st == FB_OK) {
    snprintf(cfg.backend, sizeof cfg.backend, "sim");
    snprintf(cfg.comm, sizeof cfg.comm, "sim");
    if (!cfg.hardware[0]) snprintf(cfg.hardware, sizeof cfg.hardware, "h100");
    st = fb_run_config_finalize(&cfg);
  }
  if (st != FB_OK) return plan_fail(st);
  fb_hardware hw;
  st = fb_hardware_load(cfg.hardware, &hw);
  if (st != FB_OK) return plan_fail(st);
  int world = cfg.world > 0 ? cfg.world : hw.devices_per_node;
  int batch = cfg.batch > 0 ? cfg.batch : fb_auto_batch(world); /* what the runs will take */
  int per_rank = batch / world;
  int micro_batch = cfg.micro_batch > 0 ? cfg.micro_batch : per_rank;
  fb_dtype pdt = fb_resolve_param_dtype(cfg.param_dtype, "sim", &hw); /* what the runs take */
  printf("plan: model %s, hardware %s (%.1f GiB, %d per node), world %d, batch %d x seq %d "
         "(micro-batch %d, %d micro-step%s per step), params %s, reduce %s — every figure "
         "predicted by the sim backend\n",
         cfg.spec.name, hw.name, gib(hw.mem_capacity), hw.devices_per_node, world, batch,
         cfg.seq, micro_batch, micro_batch > 0 ? per_rank / micro_batch : 1,
         micro_batch > 0 && per_rank / micro_batch > 1 ? "s" : "", fb_dtype_name(pdt),
         fb_dtype_name(cfg.reduce_dtype));
  fflush(stdout);
  fb_plan_row *rows = NULL;
  int n = 0;
  int64_t capacity = 0;
  st = fb_plan_run(&cfg, &rows, &n, &capacity);
  if (st != FB_OK) return plan_fail(st);
  fb_plan_print(stdout, &cfg, rows, n, capacity);
  int ok = 0, fit = 0;
  for (int i = 0; i < n; i++) {
    ok += rows[i].st == FB_OK;
    fit += rows[i].st == FB_OK && fb_plan_row_fits(&rows[i], capacity);
  }
  free(rows);
  if (!ok) {
    fprintf(stderr, "fsdpbench plan: error: no candidate could be simulated\n");
    return fb_exit_code(FB_EINTERNAL);
  }
  if (!fit) {
    fprintf(stderr, "fsdpbench plan: no candidate fits in %.1f GiB per device with model %s on "
            "world %d (exit 3; see the table above)\n", gib(capacity), cfg.spec.name, world);
    return fb_exit_code(FB_ENOMEM);
  }
  return 0;
}
