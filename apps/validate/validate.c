/* `fsdpbench validate`: executed vs simulated, op by op (see validate.h). */
#include "validate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../traces/chrome_trace.h"
#include "../engine/core/files.h"
#include "../engine/core/out_dir.h"
#include "../engine/core/json_out.h"
#include "../engine/backends/registry.h"
#include "../engine/device/device.h"
#include "../engine/exec/runner.h"
#include "../strategies/strategy.h"
#include "../engine/sim/gpu_profile.h"
#include "gpu_name.h"
#include "median.h"
#include "op_match.h"
#include "validate_dataset.h"

typedef fb_op_row op_row;

enum {
  MAX_REPEAT = 20, /* --repeat's ceiling */
  CAP = 64         /* op names one match holds */
};

static int fail(fb_status st) {
  fprintf(stderr, "fsdpbench validate: error: %s\n", fb_error_msg());
  return st == FB_EUSAGE ? 2 : 1;
}

static int by_time(const void *a, const void *b) {
  const op_row *x = a, *y = b;
  return (x->meas < y->meas) - (x->meas > y->meas);
}

/* validate's own flag, taken out of argv before the run flags are parsed: --repeat N, the
 * executed runs whose per-op times' median is compared (0 = not given). */
static fb_status take_repeat(int *argc, char **argv, int *repeat) {
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    const char *v = NULL;
    if (!strcmp(argv[i], "--repeat")) v = i + 1 < *argc ? argv[++i] : "";
    else if (!strncmp(argv[i], "--repeat=", 9)) v = argv[i] + 9;
    if (!v) {
      argv[out++] = argv[i];
      continue;
    }
    char *e;
    long n = strtol(v, &e, 10);
    if (!*v || *e || n < 1 || n > MAX_REPEAT)
      return FB_ERR(FB_EUSAGE, "--repeat: '%s' is not allowed (want an integer from 1 to %d: "
                    "executed runs whose per-op median is compared)", v, MAX_REPEAT);
    *repeat = (int)n;
  }
  *argc = out;
  return FB_OK;
}

/* A run's median step (rank 0, the first step left out when there are more than 2). */
static double median_step(const fb_run_result *r) {
  enum { MAXS = 4096 };
  double s[MAXS];
  int n = 0;
  for (int k = r->nsteps > 2 ? 1 : 0; k < r->nsteps && n < MAXS; k++) s[n++] = r->ranks[0].steps[k].wall;
  return fb_median(s, n);
}

/* The median over the executed runs of each op name's time (every run matched against the one
 * prediction, which is deterministic): rows[] holds the first run's match; each later run's
 * rows are looked up by name. A name a later run lacks keeps the runs that have it. spread[i]:
 * rows[i]'s name and the largest over the smallest of those times (1 = the runs agreed). */
typedef struct op_spread {
  const char *name;
  double ratio;
} op_spread;

static void median_rows(fb_op_row *rows, int nrows, fb_op_row runs[][CAP], const int *nruns,
                        int repeat, op_spread *spread) {
  for (int i = 0; i < nrows; i++) {
    double v[MAX_REPEAT], lo = rows[i].meas, hi = rows[i].meas;
    int n = 0;
    v[n++] = rows[i].meas;
    for (int r = 0; r < repeat - 1; r++)
      for (int k = 0; k < nruns[r]; k++)
        if (!strcmp(runs[r][k].name, rows[i].name)) {
          v[n++] = runs[r][k].meas;
          lo = fmin(lo, runs[r][k].meas), hi = fmax(hi, runs[r][k].meas);
        }
    rows[i].meas = fb_median(v, n);
    spread[i] = (op_spread){rows[i].name, lo > 0 ? hi / lo : NAN};
  }
}

/* One line after the table (rows in its order): how far apart the executed runs measured each
 * op family of at least 1 ms (largest / smallest), the measured side's own noise to read the
 * family's error against. */
static void print_spread(const op_row *rows, int nrows, const op_spread *spread, int repeat) {
  printf("run to run (largest / smallest of %d executed runs, families of >= 1 ms):", repeat);
  const char *sep = "";
  for (int i = 0; i < nrows; i++) {
    if (!(rows[i].meas >= 1e-3)) continue;
    for (int k = 0; k < nrows; k++)
      if (spread[k].name == rows[i].name && isfinite(spread[k].ratio)) {
        printf("%s %s %.2f", sep, rows[i].name, spread[k].ratio);
        sep = ",";
      }
  }
  printf("\n");
}

/* The measured backend (--backend; auto = cpu): a device that executes, available here; its
 * communicator; and the profile the simulated run prices it with (--hardware, else cpu for a
 * CPU device, the GPU's shipped profile by its name on a GPU). */
static fb_status choose_backends(fb_run_config *c, char *gpu, size_t ngpu) {
  if (!strcmp(c->backend, "auto")) snprintf(c->backend, sizeof c->backend, "cpu");
  const fb_device_entry *e = fb_device_entry_lookup(c->backend);
  char why[512] = "", names[256];
  if (!e || !strcmp(c->backend, "sim")) {
    fb_device_names(names, sizeof names);
    return FB_ERR(FB_EUSAGE, "--backend: '%s' is not allowed (validate runs a device that "
                  "executes beside sim: one of %s but sim)", c->backend, names);
  }
  if (e->available && !e->available(why, sizeof why))
    return FB_ERR(FB_EUSAGE, "--backend %s: not available: %s", c->backend, why);
  snprintf(gpu, ngpu, "%s", c->backend);
  if (c->hardware[0]) return FB_OK;
  if (!e->caps->gpu) return snprintf(c->hardware, sizeof c->hardware, "cpu"), FB_OK;
  fb_gpu_name(gpu, ngpu);
  const char *prof = fb_gpu_profile_for(gpu, 0, why, sizeof why);
  if (!prof)
    return FB_ERR(FB_EUSAGE, "--hardware: the GPU '%s' has no shipped profile (%s); give one "
                  "(the file `fsdpbench calibrate --backend %s --out FILE` wrote)", gpu, why,
                  c->backend);
  snprintf(c->hardware, sizeof c->hardware, "%s", prof);
  return FB_OK;
}

/* The executed run's configuration: the options as given, on the backend. */
static fb_status configure_measured(const fb_run_config *c, fb_run_config *cm) {
  *cm = *c;
  if (!strcmp(c->backend, "cpu")) snprintf(cm->comm, sizeof cm->comm, "local");
  cm->hardware[0] = 0;
  return fb_run_config_finalize(cm);
}

/* The simulated run's: the executed run's EFFECTIVE options (what it resolved from auto and
 * from its backend: the world, batch and micro-batch, the threads, the parameter dtype, the
 * vocabulary padding a GPU backend's head takes, ...), on sim with the profile. Taken from the
 * options as given instead, each side would resolve its own: a cuda run pads the vocabulary
 * to a multiple of 128 and sim does not, so the head's ops and the peak memory differ. */
static fb_status configure_predicted(const fb_run_result *m, const fb_run_config *c,
                                     fb_run_config *cp) {
  *cp = m->cfg;
  snprintf(cp->backend, sizeof cp->backend, "sim");
  snprintf(cp->comm, sizeof cp->comm, "sim");
  snprintf(cp->hardware, sizeof cp->hardware, "%s", c->hardware);
  return fb_run_config_finalize(cp);
}

/* sm: the measured step, the median over the executed runs of each one's median step. */
static void print_table(const fb_run_result *m, const fb_run_result *p, const fb_run_config *c,
                        double sm, int repeat, op_row *rows, int nrows, int64_t mismatched) {
  const double sp = median_step(p);
  printf("# validate: model %s, strategy %s, world %d, batch %d x seq %d: measured on %s vs "
         "predicted by sim with hardware %s (steps %d.., ops of every rank; measured: the "
         "median of %d executed run%s)\n", m->cfg.model, m->cfg.strategy, m->world,
         m->cfg.batch, m->cfg.seq, m->backend, p->hardware, c->trace_warmup, repeat,
         repeat > 1 ? "s" : "");
  printf("step time: measured %.1f ms, predicted %.1f ms, error %+.1f%%\n", sm * 1e3, sp * 1e3,
         100 * (sp - sm) / sm);
  printf("peak memory rank 0: measured %lld B, predicted %lld B (%s)\n",
         (long long)m->ranks[0].mem.peak_total, (long long)p->ranks[0].mem.peak_total,
         m->ranks[0].mem.peak_total == p->ranks[0].mem.peak_total ? "equal" : "DIFFERENT");
  qsort(rows, (size_t)nrows, sizeof *rows, by_time);
  printf("%-22s %8s %12s %12s %9s\n%-22s %8s %12s %12s %9s\n", "op", "count", "measured",
         "predicted", "error", "", "", "(ms)", "(ms)", "(%)");
  double tm = 0, tp = 0;
  for (int i = 0; i < nrows; i++) {
    tm += rows[i].meas;
    tp += rows[i].pred;
    printf("%-22s %8lld %12.3f %12.3f %+9.1f\n", rows[i].name, (long long)rows[i].n,
           rows[i].meas * 1e3, rows[i].pred * 1e3,
           rows[i].meas > 0 ? 100 * (rows[i].pred - rows[i].meas) / rows[i].meas : NAN);
  }
  printf("%-22s %8s %12.3f %12.3f %+9.1f\n", "all ops", "", tm * 1e3, tp * 1e3,
         tm > 0 ? 100 * (tp - tm) / tm : NAN);
  if (mismatched) printf("note: %lld track(s) diverged and were matched only up to there\n",
                         (long long)mismatched);
}

/* DIR/trace.json (both runs side by side) and DIR/validate.csv (the table). */
static fb_status write_outputs(const char *dir, const fb_run_result *m, const fb_run_result *p,
                               const op_row *rows, int nrows) {
  FB_TRY(fb_trace_write_pair(dir, "trace.json", m, " (measured)", p, " (predicted)"));
  FILE *f = NULL;
  FB_TRY(fb_json_open(dir, "validate.csv", &f));
  fputs("op,count,measured_ms,predicted_ms,error_pct\n", f);
  for (int i = 0; i < nrows; i++)
    fprintf(f, "%s,%lld,%.6f,%.6f,%.3f\n", rows[i].name, (long long)rows[i].n,
            rows[i].meas * 1e3, rows[i].pred * 1e3,
            rows[i].meas > 0 ? 100 * (rows[i].pred - rows[i].meas) / rows[i].meas : NAN);
  return fb_json_close(f, "validate.csv");
}

static int usage(void) {
  printf("usage: fsdpbench validate [run flags] [--backend cpu|cpu-opaque|cuda] "
         "[--hardware PROFILE] [--out DIR] [--repeat N]\n"
         "runs the configuration on the backend (default cpu) and on sim with the profile "
         "(default: cpu\non a CPU device, the GPU's shipped profile on a GPU; after `fsdpbench "
         "calibrate --backend cuda\n--out F`, --hardware F), and compares them op by op; "
         "--repeat N executes it N times and\ncompares each op's median (default 3 on a CPU "
         "device, which shares the machine; 1 on a GPU)\n\n");
  fb_config_print_help(stdout, fb_strategy_names());
  return 0;
}

/* --backend cuda in a build without CUDA: say so, as where the driver is missing (the option
 * parser only knows the backends this build has). */
static bool cuda_not_built(int argc, char **argv) {
  if (fb_device_entry_lookup("cuda")) return false;
  for (int i = 1; i < argc; i++)
    if ((!strcmp(argv[i], "--backend") && i + 1 < argc && !strcmp(argv[i + 1], "cuda")) ||
        !strcmp(argv[i], "--backend=cuda")) {
      fprintf(stderr, "fsdpbench validate: error: --backend cuda: not available: this build has "
                      "no CUDA (build where nvcc is found: cmake -DFSDPB_CUDA=ON)\n");
      return true;
    }
  return false;
}

struct outputs {
  const fb_run_result *m, *p;
  const op_row *rows;
  int nrows;
};

static fb_status write_set(const char *dir, void *ctx) {
  const struct outputs *o = ctx;
  return write_outputs(dir, o->m, o->p, o->rows, o->nrows);
}

/* The executed run's repeats 2..repeat: each matched against the prediction, each op name's
 * time and the step then the median over all the runs (steps[0] is the first run's). The
 * trace and the peak memory stay the first run's (memory is the same every run). */
static fb_status measure_again(const fb_run_config *cm, const fb_run_result *p, int repeat,
                               op_row *rows, int nrows, double *steps, op_spread *spread) {
  static op_row runs[MAX_REPEAT - 1][CAP];
  int nruns[MAX_REPEAT - 1] = {0};
  for (int r = 0; r < repeat - 1; r++) {
    fb_run_result m;
    FB_TRY(fb_run(cm, &m));
    int64_t mismatched = 0;
    fb_status st = fb_op_match(&m, p, runs[r], &nruns[r], CAP, &mismatched);
    steps[r + 1] = median_step(&m);
    fb_run_result_free(&m);
    FB_TRY(st);
  }
  median_rows(rows, nrows, runs, nruns, repeat, spread);
  return FB_OK;
}

int fb_validate_main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strncmp(argv[i], "--dataset", 9)) return fb_validate_dataset_main(argc, argv);
  if (cuda_not_built(argc, argv)) return 2;
  fb_run_config c, cm, cp;
  fb_cli_action action = FB_CLI_RUN;
  fb_config_defaults(&c);
  int repeat = 0;
  fb_status st = take_repeat(&argc, argv, &repeat);
  if (st == FB_OK) st = fb_config_parse_cli(&c, argc, argv, 1, &action);
  if (st != FB_OK) return fail(st);
  if (action != FB_CLI_RUN) return usage();
  char gpu[160];
  if ((st = choose_backends(&c, gpu, sizeof gpu)) != FB_OK) return fail(st);
  /* a CPU device's timing shares the machine with every other process: three runs, their
   * median; a GPU runs alone: one */
  if (!repeat) repeat = fb_device_entry_lookup(c.backend)->caps->gpu ? 1 : 3;
  if (!c.out[0]) snprintf(c.out, sizeof c.out, "validate-out");
  c.trace = true;
  c.trace_wait = 0;
  c.trace_warmup = c.steps > 2 ? 1 : 0; /* the first step warms caches */
  c.trace_active = c.steps - c.trace_warmup > 0 ? c.steps - c.trace_warmup : 1;
  c.quiet = true;
  if ((st = configure_measured(&c, &cm)) != FB_OK) return fail(st);
  static const char *const outputs[] = {"trace.json", "validate.csv", NULL};
  if ((st = fb_check_output_dir(c.out, outputs, "--out")) != FB_OK) return fail(st);
  fb_run_result m, p;
  if ((st = fb_run(&cm, &m)) != FB_OK) return fail(st);
  if ((st = configure_predicted(&m, &c, &cp)) != FB_OK || (st = fb_run(&cp, &p)) != FB_OK) {
    fb_run_result_free(&m);
    return fail(st);
  }
  op_row rows[CAP];
  int nrows = 0;
  int64_t mismatched = 0;
  st = fb_op_match(&m, &p, rows, &nrows, CAP, &mismatched);
  double steps[MAX_REPEAT] = {median_step(&m)};
  op_spread spread[CAP];
  if (st == FB_OK && repeat > 1)
    st = measure_again(&cm, &p, repeat, rows, nrows, steps, spread);
  if (st == FB_OK) {
    if (strcmp(gpu, c.backend)) printf("# the GPU: %s\n", gpu);
    print_table(&m, &p, &c, fb_median(steps, repeat), repeat, rows, nrows, mismatched);
    if (repeat > 1) print_spread(rows, nrows, spread, repeat);
    struct outputs o = {&m, &p, rows, nrows}; /* whole or absent (engine/core/out_dir.h) */
    static const char *const ours[] = {"trace.json", "validate.csv", NULL};
    st = fb_out_dir_write(c.out, ours, "--out", write_set, &o);
    /* where the set landed, not the temporary it was written into */
    if (st == FB_OK && c.out[0])
      printf("side-by-side trace: %s/trace.json; per-op table: %s/validate.csv\n", c.out,
             c.out);
  }
  fb_run_result_free(&m);
  fb_run_result_free(&p);
  return st == FB_OK ? 0 : fail(st);
}
