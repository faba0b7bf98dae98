/* `fsdpbench validate`: executed vs simulated, op by op (see validate.h). */
#include "validate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../traces/chrome_trace.h"
#include "../engine/core/files.h"
#include "../engine/core/json_out.h"
#include "../engine/exec/runner.h"
#include "../strategies/strategy.h"
#include "validate_dataset.h"

typedef struct op_row {
  const char *name;
  int64_t n;
  double meas, pred; /* seconds, summed over matched ops */
} op_row;

static int fail(fb_status st) {
  fprintf(stderr, "fsdpbench validate: error: %s\n", fb_error_msg());
  return st == FB_EUSAGE ? 2 : 1;
}

static op_row *row_of(op_row *rows, int *nrows, int cap, const char *name) {
  for (int i = 0; i < *nrows; i++)
    if (!strcmp(rows[i].name, name)) return &rows[i];
  if (*nrows == cap) return NULL;
  rows[*nrows] = (op_row){.name = name};
  return &rows[(*nrows)++];
}

static int by_time(const void *a, const void *b) {
  const op_row *x = a, *y = b;
  return (x->meas < y->meas) - (x->meas > y->meas);
}

static double median_step(const fb_run_result *r) {
  double s[4096];
  int n = 0;
  for (int k = r->nsteps > 2 ? 1 : 0; k < r->nsteps && n < 4096; k++) s[n++] = r->ranks[0].steps[k].wall;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
      double t = s[j];
      s[j] = s[j - 1];
      s[j - 1] = t;
    }
  return n ? (n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2])) : NAN;
}

/* Matches the kept ops of measured rank `i` with predicted rank `i`, track by track. */
static fb_status match(const fb_run_result *m, const fb_run_result *p, op_row *rows, int *nrows,
                       int cap, int64_t *mismatched) {
  for (int i = 0; i < m->nranks && i < p->nranks; i++) {
    int64_t nm, np;
    const fb_rec_op *om = fb_recorder_ops(m->ranks[i].rec, &nm);
    const fb_rec_op *op = fb_recorder_ops(p->ranks[i].rec, &np);
    for (int tr = 0; tr < fb_recorder_nstreams(m->ranks[i].rec); tr++) {
      int64_t a = 0, b = 0;
      for (;;) {
        while (a < nm && om[a].stream != tr) a++;
        while (b < np && op[b].stream != tr) b++;
        if (a >= nm || b >= np) break;
        if (strcmp(om[a].name, op[b].name) || om[a].step != op[b].step) {
          (*mismatched)++;
          break; /* the sequences diverged on this track: stop matching it */
        }
        op_row *row = row_of(rows, nrows, cap, om[a].name);
        if (!row) return FB_ERR(FB_EINTERNAL, "validate: more than %d op names", cap);
        row->n++;
        row->meas += om[a].t1 - om[a].t0;
        row->pred += op[b].t1 - op[b].t0;
        a++, b++;
      }
    }
  }
  return FB_OK;
}

int fb_validate_main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strncmp(argv[i], "--dataset", 9)) return fb_validate_dataset_main(argc, argv);
  fb_run_config c;
  fb_cli_action action = FB_CLI_RUN;
  fb_config_defaults(&c);
  fb_status st = fb_config_parse_cli(&c, argc, argv, 1, &action);
  if (st != FB_OK) return fail(st);
  if (action != FB_CLI_RUN) {
    printf("usage: fsdpbench validate [run flags] [--hardware PROFILE] [--out DIR]\n"
           "runs the configuration on the cpu backend and on sim, and compares them op by op\n\n");
    fb_config_print_help(stdout, fb_strategy_names());
    return 0;
  }
  if (strcmp(c.backend, "auto") && strcmp(c.backend, "cpu")) {
    fprintf(stderr, "fsdpbench validate: error: --backend: '%s' is not allowed (validate runs "
                    "cpu and sim itself)\n", c.backend);
    return 2;
  }
  if (!c.hardware[0]) snprintf(c.hardware, sizeof c.hardware, "cpu");
  if (!c.out[0]) snprintf(c.out, sizeof c.out, "validate-out");
  c.trace = true;
  c.trace_wait = 0;
  c.trace_warmup = c.steps > 2 ? 1 : 0; /* the first step warms caches */
  c.trace_active = c.steps - c.trace_warmup > 0 ? c.steps - c.trace_warmup : 1;
  c.quiet = true;
  fb_run_config cm = c, cp = c;
  snprintf(cm.backend, sizeof cm.backend, "cpu");
  snprintf(cm.comm, sizeof cm.comm, "local");
  cm.hardware[0] = 0;
  snprintf(cp.backend, sizeof cp.backend, "sim");
  snprintf(cp.comm, sizeof cp.comm, "sim");
  if ((st = fb_run_config_finalize(&cm)) != FB_OK || (st = fb_run_config_finalize(&cp)) != FB_OK)
    return fail(st);
  static const char *const outputs[] = {"trace.json", "validate.csv", NULL};
  if ((st = fb_check_output_dir(c.out, outputs, "--out")) != FB_OK) return fail(st);
  fb_run_result m, p;
  if ((st = fb_run(&cm, &m)) != FB_OK) return fail(st);
  if ((st = fb_run(&cp, &p)) != FB_OK) {
    fb_run_result_free(&m);
    return fail(st);
  }
  enum { CAP = 64 };
  op_row rows[CAP];
  int nrows = 0;
  int64_t mismatched = 0;
  st = match(&m, &p, rows, &nrows, CAP, &mismatched);
  if (st == FB_OK) {
    const double sm = median_step(&m), sp = median_step(&p);
    printf("# validate: model %s, strategy %s, world %d, batch %d x seq %d: measured on cpu vs "
           "predicted by sim with hardware %s (steps %d.., ops of every rank)\n",
           m.cfg.model, m.cfg.strategy, m.world, m.cfg.batch, m.cfg.seq, p.hardware,
           c.trace_warmup);
    printf("step time: measured %.1f ms, predicted %.1f ms, error %+.1f%%\n", sm * 1e3, sp * 1e3,
           100 * (sp - sm) / sm);
    printf("peak memory rank 0: measured %lld B, predicted %lld B (%s)\n",
           (long long)m.ranks[0].mem.peak_total, (long long)p.ranks[0].mem.peak_total,
           m.ranks[0].mem.peak_total == p.ranks[0].mem.peak_total ? "equal" : "DIFFERENT");
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
    st = fb_trace_write_pair(c.out, "trace.json", &m, " (measured)", &p, " (predicted)");
    FILE *f = NULL;
    if (st == FB_OK) st = fb_json_open(c.out, "validate.csv", &f);
    if (st == FB_OK) {
      fputs("op,count,measured_ms,predicted_ms,error_pct\n", f);
      for (int i = 0; i < nrows; i++)
        fprintf(f, "%s,%lld,%.6f,%.6f,%.3f\n", rows[i].name, (long long)rows[i].n,
                rows[i].meas * 1e3, rows[i].pred * 1e3,
                rows[i].meas > 0 ? 100 * (rows[i].pred - rows[i].meas) / rows[i].meas : NAN);
      st = fb_json_close(f, "validate.csv");
    }
    if (st == FB_OK) printf("side-by-side trace: %s/trace.json; per-op table: %s/validate.csv\n",
                            c.out, c.out);
  }
  fb_run_result_free(&m);
  fb_run_result_free(&p);
  return st == FB_OK ? 0 : fail(st);
}
