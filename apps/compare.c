/* `fsdpbench compare` (compare.h): parses --strategies / --sweep / --out around the ordinary
 * run flags, refuses a bad sweep key or value before anything runs, then runs every grid point
 * x strategy through fb_run (same model, data and seed), streams one fixed-column table row per
 * run and writes the records below. A run that cannot be configured, does not fit or fails is
 * a row with its reason, not the end of the comparison. It computes no figure of its own: the
 * numbers are the report's summary of the run (apps/report.h conventions: step time is
 * the median over the measured steps, the rest means; the "mean" row over ranks); the table's
 * "no overlap" is the step if no collective overlapped compute, the step plus the comm compute
 * hid (fb_report_no_overlap: the top of a prediction's range where collectives weigh).
 *
 * Files under --out DIR (header line first, comma-separated, C locale, empty field when a
 * value does not exist, e.g. loss and param sum of predicted runs):
 *
 * compare.csv: one row per run.
 *   run            run id (1..N, grid order: first sweep key slowest, strategy fastest)
 *   point          sweep point id (runs of one point differ only in strategy)
 *   sweep          the point's swept values "key=value;key=value" (empty without --sweep)
 *   strategy, model, backend, hardware  as run ("" hardware = the backend's default)
 *   world, batch, micro_batch, seq, steps  as finalized (batch: global sequences per step)
 *   param_dtype, accum, prefetch_forward, prefetch_backward, reshard_after_forward,
 *   max_inflight, bucket_mb, recompute     the strategy options of the run (recompute: off,
 *                  full or selective)
 *   status         ok; no_fit (out of memory, or a predicted peak above the hardware
 *                  profile's memory per device: the figures are kept); bad_config (the grid
 *                  point is not a valid run, e.g. batch not divisible by world); unsupported;
 *                  timeout; failed
 *   predicted      1 when every time figure is a prediction (sim backend), else 0
 *   step_ms        median step time (ms)
 *   tokens_per_s, tokens_per_s_rank   global tokens per second, and per rank
 *   tflops         achieved TFLOP/s per rank (model FLOPs)
 *   compute_ms, comm_ms, exposed_ms   mean busy time per step of the compute stream, the
 *                  comm stream, and comm not hidden behind compute
 *   idle_ms        step_ms - compute_ms - exposed_ms (>= 0): neither computing nor waiting on
 *                  exposed communication (host work, launch gaps, skew)
 *   peak_bytes     peak memory of the rank that peaked highest (all categories together)
 *   param_shard_bytes, param_full_bytes, grad_shard_bytes, grad_full_bytes, optim_bytes,
 *   act_bytes, comm_bytes, temp_bytes, param_secondary_bytes  that rank's bytes per category
 *                  at its peak (param_secondary: zeropp's hpZ copy; they add
 *                  up to peak_bytes)
 *   persistent_bytes  params + grads + optimizer state owned after setup (same rank)
 *   coll_bytes     logical collective bytes per step per rank (all types)
 *   wire_bytes     bytes one rank sends per step (ring algorithms)
 *   final_loss     loss of the last step
 *   param_sum      final parameter sum, 17 significant digits
 *   param_match    "=" when param_sum equals, bit for bit, that of the first successful run of
 *                  the same point, "differs" otherwise (empty when there is no sum)
 *   error          why the run failed or does not fit (commas replaced by ';'), else empty
 *
 * compare_steps.csv: one row per (run, step), rank 0.
 *   run, strategy, world, step, wall_ms, compute_ms, comm_ms, exposed_ms, loss, grad_norm, lr
 *   (step: the number the step log line prints, 1-based)
 *
 * memory_timeline.csv: rank 0 of each successful run, the last step: one row at t_ms 0 with
 * the levels at the step's start (event "start"), then one row per allocation or free.
 *   run, strategy, world, t_ms (ms since the step's start), event (start|alloc|free),
 *   category (of the event), delta_bytes, label (of the buffer),
 *   param_shard, param_full, grad_shard, grad_full, optim, act, comm, temp, param_secondary,
 *   total
 *                  bytes of each category (and all together) after the event
 *
 * runs/<run>-<strategy>/: the run's own report files (summary.csv, steps.csv, memory.csv,
 * ledger.csv, report.json; trace.json with --trace).
 *
 * It does not dispatch the subcommand (apps/main.c) and does not draw (plots/). */
#include "compare.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../strategies/strategy.h"
#include "../traces/chrome_trace.h"
#include "../traces/kineto_trace.h"
#include "../engine/core/json_out.h"
#include "../engine/core/files.h"
#include "../engine/core/out_dir.h"
#include "../engine/config/config.h"
#include "common/report.h"
#include "../engine/sim/hardware.h"
#include "../engine/core/progress.h"
#include "../engine/exec/runner.h"

#define CMP_MAX_AXES 8
#define CMP_MAX_VALS 64
#define CMP_MAX_STRATEGIES 16
#define CMP_MAX_RUNS 4096
#define CMP_VAL 256

/* The default set: every registered strategy (one-rank ones run the same global batch on one
 * rank, the reference the others must match). */
static const char *default_strategies(void) {
  static char buf[512];
  size_t o = 0;
  for (int i = 0; fb_strategy_at(i) && o < sizeof buf; i++)
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? "," : "", fb_strategy_at(i)->name);
  return buf;
}
static const char DEFAULT_OUT[] = "compare-out";

typedef struct cmp_axis {
  char key[64];                      /* canonical option name */
  char vals[CMP_MAX_VALS][CMP_VAL];
  int n;
} cmp_axis;

typedef struct cmp_plan {
  cmp_axis axes[CMP_MAX_AXES];
  int naxes;
  char strategies[CMP_MAX_STRATEGIES][32];
  int nstrategies;
  bool strategies_given;
  char out[512];
  fb_run_config base;                /* parsed flags, not finalized */
  int npoints;
} cmp_plan;

/* What one run left for the table and the CSV. */
typedef struct cmp_row {
  int run, point;
  char strategy[32];
  char sweep[512];
  fb_run_config cfg;                 /* finalized when st == FB_OK or the run failed later */
  bool configured;
  fb_status st;
  char error[320];
  int world;
  bool predicted;
  fb_rank_summary sum;
  int64_t peak, at_peak[FB_MEM_NCAT], persistent;
  bool figures;                      /* the run completed (a predicted run may still not fit) */
  int64_t capacity;                  /* predicted runs: the profile's memory per device, else 0 */
  double coll_bytes, wire_bytes, final_loss, param_sum;
  const char *match;                 /* "=", "differs" or "" */
  fb_step_stats why;                 /* rank 0's last step: where the step goes */
  int64_t reserved;                  /* allocator model's reserved peak (0 without the model) */
} cmp_row;

typedef struct cmp_files {
  FILE *runs, *steps, *timeline;
} cmp_files;

/* ---- argument parsing ------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: fsdpbench compare [run flags] [--strategies a,b,...] "
          "[--sweep key=v1,v2[;key2=v1,v2]] [--out DIR]\n"
          "Runs each strategy on the same model, data and seed (and every point of the sweep "
          "grid), prints one table\nand writes DIR/compare.csv, DIR/compare_steps.csv, "
          "DIR/memory_timeline.csv and DIR/runs/<run>-<strategy>/.\n"
          "  --strategies LIST  comma-separated (default %s)\n"
          "  --sweep GRID       key=v1,v2 groups separated by ';' (repeatable); a key is any run "
          "flag\n                     below (world, model, seq, batch, micro-batch, "
          "prefetch-forward, accum, ...)\n"
          "  --out DIR          output directory (default %s)\n"
          "--mesh RxS applies to the strategies that take it; the others run on the same world "
          "without it.\n"
          "param sum column: '=' equals, bit for bit, the first successful strategy of the same "
          "sweep point.\n"
          "Exit codes: 0 at least one run completed and every record was written; 1 no run "
          "completed or a\nrecord could not be written (a failed run is a row with its error); "
          "2 bad usage. Progress\n(run k/N, elapsed, ETA) goes to stderr.\n\nThe run flags:\n\n",
          default_strategies(), DEFAULT_OUT);
  fb_config_print_help(f, fb_strategy_names());
}

/* Copies s into dst (size n); FB_EUSAGE naming `what` when it does not fit. */
static fb_status copy_text(char *dst, size_t n, const char *s, const char *what) {
  size_t len = strlen(s);
  if (len >= n)
    return FB_ERR(FB_EUSAGE, "%s: '%.40s...' is too long (at most %zu characters)", what, s,
                  n - 1);
  memcpy(dst, s, len + 1);
  return FB_OK;
}

static fb_status parse_strategies(cmp_plan *p, const char *list, const char *what) {
  char buf[1024];
  FB_TRY(copy_text(buf, sizeof buf, list, what));
  p->nstrategies = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (!fb_strategy_lookup(tok))
      return FB_ERR(FB_EUSAGE, "%s: unknown strategy '%s' (allowed: %s)", what, tok,
                    fb_strategy_names());
    if (p->nstrategies >= CMP_MAX_STRATEGIES)
      return FB_ERR(FB_EUSAGE, "%s: more than %d strategies", what, CMP_MAX_STRATEGIES);
    snprintf(p->strategies[p->nstrategies++], sizeof p->strategies[0], "%s", tok);
  }
  if (!p->nstrategies)
    return FB_ERR(FB_EUSAGE, "%s: '%s' names no strategy (want e.g. %s)", what, list,
                  default_strategies());
  return FB_OK;
}

/* A value of one sweep key on its own: the option's syntax and range, and for the keys that
 * name files (model, hardware, data) that the file exists and loads. */
static fb_status check_value(const cmp_plan *p, const fb_option *o, const char *v) {
  fb_run_config tmp = p->base;
  FB_TRY(fb_config_set(&tmp, o->name, v, "--sweep: "));
  char msg[512];
  if (!strcmp(o->name, "model")) {
    fb_model_spec spec;
    if (fb_model_spec_load(v, &spec) != FB_OK) {
      snprintf(msg, sizeof msg, "%s", fb_error_msg());
      return FB_ERR(FB_EUSAGE, "--sweep: model: '%s' cannot be used: %s", v, msg);
    }
  } else if (!strcmp(o->name, "hardware") && v[0]) {
    char path[4096];
    if (fb_resolve_yaml("models/hardware", v, path, sizeof path) != FB_OK) {
      snprintf(msg, sizeof msg, "%s", fb_error_msg());
      return FB_ERR(FB_EUSAGE, "--sweep: hardware: '%s' cannot be used: %s", v, msg);
    }
  } else if (!strcmp(o->name, "data") && strcmp(v, "synthetic") && access(v, R_OK)) {
    return FB_ERR(FB_EUSAGE, "--sweep: data: cannot read '%s' (want 'synthetic' or a token file)",
                  v);
  }
  return FB_OK;
}

/* One --sweep argument: "key=v1,v2;key2=v1". Every key and value is checked here. */
static fb_status parse_sweep(cmp_plan *p, const char *arg) {
  char buf[4096];
  FB_TRY(copy_text(buf, sizeof buf, arg, "--sweep"));
  char *save = NULL;
  int groups = 0;
  for (char *grp = strtok_r(buf, ";", &save); grp; grp = strtok_r(NULL, ";", &save)) {
    groups++;
    char *eq = strchr(grp, '=');
    if (!eq || eq == grp)
      return FB_ERR(FB_EUSAGE, "--sweep: '%s' is not key=v1,v2 (e.g. world=1,2,4)", grp);
    *eq = '\0';
    const char *key = grp, *vals = eq + 1;
    if (!strcmp(key, "strategy") || !strcmp(key, "strategies")) {
      if (p->strategies_given)
        return FB_ERR(FB_EUSAGE, "--sweep: strategy: strategies are given twice (--strategies "
                                 "and --sweep strategy=...); keep one");
      FB_TRY(parse_strategies(p, vals, "--sweep: strategy"));
      p->strategies_given = true;
      continue;
    }
    const fb_option *o = fb_config_option(key);
    if (!o || o->kind == FB_OPT_CONFIG || o->kind == FB_OPT_HELP || o->kind == FB_OPT_VERSION) {
      fb_run_config tmp = p->base;
      return fb_config_set(&tmp, key, "", "--sweep: "); /* the "unknown key (allowed: ...)" line */
    }
    if (!strcmp(o->name, "out") || !strcmp(o->name, "quiet"))
      return FB_ERR(FB_EUSAGE, "--sweep: key '%s' cannot be swept (compare sets it for every "
                               "run)", o->name);
    for (int a = 0; a < p->naxes; a++)
      if (!strcmp(p->axes[a].key, o->name))
        return FB_ERR(FB_EUSAGE, "--sweep: key '%s' is given twice", o->name);
    if (p->naxes >= CMP_MAX_AXES)
      return FB_ERR(FB_EUSAGE, "--sweep: more than %d keys", CMP_MAX_AXES);
    cmp_axis *ax = &p->axes[p->naxes];
    memset(ax, 0, sizeof *ax);
    snprintf(ax->key, sizeof ax->key, "%s", o->name);
    if (!*vals) return FB_ERR(FB_EUSAGE, "--sweep: %s: no values (want %s=v1,v2)", key, key);
    /* split on ',' keeping empty values visible as errors */
    const char *s = vals;
    for (;;) {
      const char *c = strchr(s, ',');
      size_t len = c ? (size_t)(c - s) : strlen(s);
      if (!len) return FB_ERR(FB_EUSAGE, "--sweep: %s: empty value in '%s'", key, vals);
      if (len >= CMP_VAL) return FB_ERR(FB_EUSAGE, "--sweep: %s: value too long", key);
      if (ax->n >= CMP_MAX_VALS)
        return FB_ERR(FB_EUSAGE, "--sweep: %s: more than %d values", key, CMP_MAX_VALS);
      memcpy(ax->vals[ax->n], s, len);
      ax->vals[ax->n][len] = '\0';
      FB_TRY(check_value(p, o, ax->vals[ax->n]));
      ax->n++;
      if (!c) break;
      s = c + 1;
    }
    p->naxes++;
  }
  if (!groups) return FB_ERR(FB_EUSAGE, "--sweep: '%s' is empty (want key=v1,v2)", arg);
  return FB_OK;
}

/* Splits compare's own flags from the run flags; returns FB_OK with *help set for --help. */
static fb_status parse(cmp_plan *p, int argc, char **argv, bool *help) {
  memset(p, 0, sizeof *p);
  *help = false;
  fb_config_defaults(&p->base);
  p->base.mem_snapshot = true; /* the memory timeline; --no-mem-snapshot turns it off */
  snprintf(p->out, sizeof p->out, "%s", DEFAULT_OUT);
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) return FB_ERR(FB_ENOMEM, "compare: out of host memory");
  const char *sweeps[CMP_MAX_AXES];
  int nsweeps = 0, nrest = 0;
  const char *strategies = NULL;
  fb_status st = FB_OK;
  rest[nrest++] = argv[0];
  for (int i = 1; i < argc; i++) {
    static const char *const own[] = {"--strategies", "--sweep", "--out"};
    const char *a = argv[i], *val = NULL;
    int which = -1;
    for (int k = 0; k < 3; k++) {
      size_t l = strlen(own[k]);
      if (!strncmp(a, own[k], l) && (a[l] == '\0' || a[l] == '=')) {
        which = k;
        if (a[l] == '=') val = a + l + 1;
        else if (i + 1 < argc) val = argv[++i];
        break;
      }
    }
    if (which < 0) {
      if (!strcmp(a, "--help") || !strcmp(a, "-h")) *help = true;
      rest[nrest++] = argv[i];
      continue;
    }
    if (!val) {
      st = FB_ERR(FB_EUSAGE, "%s: missing value", own[which]);
      goto done;
    }
    if (which == 0) {
      strategies = val;
    } else if (which == 1) {
      if (nsweeps >= CMP_MAX_AXES) {
        st = FB_ERR(FB_EUSAGE, "--sweep: given more than %d times", CMP_MAX_AXES);
        goto done;
      }
      sweeps[nsweeps++] = val;
    } else {
      if (!*val) {
        st = FB_ERR(FB_EUSAGE, "--out: '' is not allowed (want a directory)");
        goto done;
      }
      FB_CHECK_GOTO(st, copy_text(p->out, sizeof p->out, val, "--out"), done);
    }
  }
  if (*help) goto done;
  fb_cli_action action = FB_CLI_RUN;
  FB_CHECK_GOTO(st, fb_config_parse_cli(&p->base, nrest, rest, 1, &action), done);
  if (action != FB_CLI_RUN) {
    *help = true;
    goto done;
  }
  if (strategies) {
    FB_CHECK_GOTO(st, parse_strategies(p, strategies, "--strategies"), done);
    p->strategies_given = true;
  }
  for (int s = 0; s < nsweeps; s++) FB_CHECK_GOTO(st, parse_sweep(p, sweeps[s]), done);
  if (!p->nstrategies) FB_CHECK_GOTO(st, parse_strategies(p, default_strategies(), "--strategies"),
                                     done);
  long long total = 1;
  for (int a = 0; a < p->naxes; a++) total *= p->axes[a].n;
  if (total * p->nstrategies > CMP_MAX_RUNS) {
    st = FB_ERR(FB_EUSAGE, "--sweep: the grid has %lld runs (at most %d)",
                total * p->nstrategies, CMP_MAX_RUNS);
    goto done;
  }
  p->npoints = (int)total;
done:
  free(rest);
  return st;
}

/* ---- one run ------------------------------------------------------------------------------ */

/* Sets the point's swept values on cfg and describes them ("world=2;seq=64"). */
static void apply_point(const cmp_plan *p, int point, fb_run_config *cfg, char *desc, size_t n) {
  size_t off = 0;
  desc[0] = '\0';
  int rem = point;
  int idx[CMP_MAX_AXES];
  for (int a = p->naxes - 1; a >= 0; a--) {
    idx[a] = rem % p->axes[a].n;
    rem /= p->axes[a].n;
  }
  for (int a = 0; a < p->naxes; a++) {
    const char *v = p->axes[a].vals[idx[a]];
    fb_status st = fb_config_set(cfg, p->axes[a].key, v, "--sweep: ");
    assert(st == FB_OK && "sweep values are checked before any run");
    (void)st;
    if (off < n)
      off += (size_t)snprintf(desc + off, n - off, "%s%s=%s", a ? ";" : "", p->axes[a].key, v);
  }
}

static void set_error(cmp_row *row, fb_status st) {
  row->st = st;
  snprintf(row->error, sizeof row->error, "%s", fb_error_msg());
  for (char *c = row->error; *c; c++)
    if (*c == ',' || *c == '\n' || *c == '"') *c = ';';
}

/* Rank 0's memory over the last step: levels at the step's start, then every event. */
static void write_timeline(FILE *f, const cmp_row *row, const fb_rank_result *rr,
                           int nsteps) {
  int64_t n = 0;
  const fb_rec_mem *m = rr->rec ? fb_recorder_mems(rr->rec, &n) : NULL;
  if (!m || n == 0 || nsteps <= 0) return;
  const fb_step_stats *ss = &rr->steps[nsteps - 1];
  int64_t lvl[FB_MEM_NCAT] = {0}, total = 0;
  int64_t i = 0;
  for (; i < n && m[i].t < ss->t_start; i++) {
    lvl[m[i].cat] = m[i].cat_after;
    total = m[i].total_after;
  }
  fprintf(f, "%d,%s,%d,0,start,,0,", row->run, row->strategy, row->world);
  for (int c = 0; c < FB_MEM_NCAT; c++) fprintf(f, ",%lld", (long long)lvl[c]);
  fprintf(f, ",%lld\n", (long long)total);
  double last = 0;
  for (; i < n && m[i].t <= ss->t_end; i++) {
    if (m[i].delta == 0) continue; /* baseline markers carry no change */
    lvl[m[i].cat] = m[i].cat_after;
    total = m[i].total_after;
    double t = (m[i].t - ss->t_start) * 1e3;
    if (t < last) t = last; /* events are in accounting order; keep the time axis monotonic */
    last = t;
    char label[64];
    snprintf(label, sizeof label, "%s", m[i].label ? m[i].label : "");
    for (char *c = label; *c; c++)
      if (*c == ',' || *c == '"') *c = ';';
    fprintf(f, "%d,%s,%d,%.6f,%s,%s,%lld,%s", row->run, row->strategy, row->world, t,
            m[i].delta > 0 ? "alloc" : "free", fb_mem_cat_name(m[i].cat),
            (long long)m[i].delta, label);
    for (int c = 0; c < FB_MEM_NCAT; c++) fprintf(f, ",%lld", (long long)lvl[c]);
    fprintf(f, ",%lld\n", (long long)total);
  }
}

static void csv_num(FILE *f, double x, const char *fmt) {
  fputc(',', f);
  if (isfinite(x)) fprintf(f, fmt, x);
}

static void write_steps(FILE *f, const cmp_row *row, const fb_run_result *res) {
  const fb_rank_result *rr = &res->ranks[0];
  for (int s = 0; s < res->nsteps; s++) {
    const fb_step_stats *ss = &rr->steps[s];
    fprintf(f, "%d,%s,%d,%d", row->run, row->strategy, row->world,
            fb_step_number(res->first_step + s));
    csv_num(f, ss->wall * 1e3, "%.6f");
    csv_num(f, ss->compute * 1e3, "%.6f");
    csv_num(f, ss->comm * 1e3, "%.6f");
    csv_num(f, ss->exposed_comm * 1e3, "%.6f");
    csv_num(f, res->loss ? res->loss[s] : NAN, "%.9g");
    csv_num(f, res->grad_norm ? res->grad_norm[s] : NAN, "%.9g");
    csv_num(f, res->lr ? res->lr[s] : NAN, "%.9g");
    fputc('\n', f);
  }
}

/* Fills row from a finished run. */
static void collect(cmp_row *row, const fb_run_result *res) {
  row->world = res->world;
  row->predicted = res->predicted;
  fb_report_summary(res, -1, &row->sum);
  int hi = 0;
  for (int r = 1; r < res->nranks; r++)
    if (res->ranks[r].mem.peak_total > res->ranks[hi].mem.peak_total) hi = r;
  const fb_rank_result *rr = &res->ranks[hi];
  row->why = res->ranks[0].steps[res->nsteps - 1];
  fb_dev_model dm;
  if (res->ranks[0].rec && fb_recorder_model(res->ranks[0].rec, &dm) && dm.alloc_model)
    row->reserved = dm.reserved_peak;
  row->peak = rr->mem.peak_total;
  memcpy(row->at_peak, rr->mem.at_peak, sizeof row->at_peak);
  row->persistent = rr->persistent_bytes;
  row->coll_bytes = row->wire_bytes = 0;
  for (int c = 0; c < FB_NCOLL; c++) {
    row->coll_bytes += row->sum.coll_bytes[c];
    row->wire_bytes += row->sum.wire_bytes[c];
  }
  row->final_loss = res->nsteps > 0 && res->loss ? res->loss[res->nsteps - 1] : NAN;
  row->param_sum = res->predicted ? NAN : res->param_sum;
}

/* cfg runs `name`; a one-rank strategy (the reference) takes the others' global batch on one
 * rank, their micro-batches in turn; --mesh applies to the strategies whose table takes it,
 * the others run without (its world stays); the --zeropp-* switches reach only zeropp. */
static void set_strategy(fb_run_config *cfg, const char *name) {
  snprintf(cfg->strategy, sizeof cfg->strategy, "%s", name);
  const fb_strategy *strat = fb_strategy_lookup(name);
  if (strat && !strat->mesh && cfg->mesh[0]) {
    int rep = 0, shard = 0;
    if (cfg->world <= 0 && fb_config_mesh(cfg, 0, &rep, &shard) == FB_OK && rep > 0)
      cfg->world = rep * shard;
    cfg->mesh[0] = '\0';
  }
  if (strat && !strat->takes_zeropp) /* --zeropp-* apply to zeropp alone */
    cfg->zeropp_quant_weights = cfg->zeropp_quant_grads = false, cfg->zeropp_hpz = 0;
  if (strat && strat->one_rank && cfg->world > 1) {
    if (cfg->batch <= 0) cfg->batch = fb_auto_batch(cfg->world);
    if (cfg->micro_batch <= 0) cfg->micro_batch = cfg->batch / cfg->world;
    cfg->world = 1;
  }
}

static fb_status run_one(const cmp_plan *p, cmp_row *row, const cmp_files *files) {
  fb_run_config cfg = p->base;
  apply_point(p, row->point, &cfg, row->sweep, sizeof row->sweep);
  set_strategy(&cfg, row->strategy);
  cfg.quiet = true;
  cfg.out[0] = '\0';
  row->world = cfg.world;
  row->param_sum = row->final_loss = NAN;
  row->match = "";
  fb_status st = fb_run_config_finalize(&cfg);
  row->cfg = cfg;
  row->configured = true;
  row->predicted = !strcmp(cfg.backend, "sim");
  if (st != FB_OK) {
    set_error(row, st);
    return FB_OK;
  }
  fb_run_result res;
  memset(&res, 0, sizeof res);
  st = fb_run(&cfg, &res);
  if (st != FB_OK) {
    set_error(row, st);
    fb_run_result_free(&res);
    return FB_OK;
  }
  row->st = FB_OK;
  row->figures = true;
  row->cfg = res.cfg;
  collect(row, &res);
  if (res.predicted) {
    /* the simulated device counts bytes without a ceiling: the profile's capacity decides */
    row->capacity = res.mem_capacity;
    if (row->capacity > 0 && row->peak > row->capacity) {
      row->st = FB_ENOMEM;
      snprintf(row->error, sizeof row->error,
               "predicted peak %.2f GiB per rank > %.2f GiB of %s (step would be %.3f ms)",
               (double)row->peak / 1073741824.0, (double)row->capacity / 1073741824.0,
               res.hardware, row->sum.step_s * 1e3);
    }
  }
  write_steps(files->steps, row, &res);
  for (int r = 0; r < res.nranks; r++)
    if (res.ranks[r].rank == 0) write_timeline(files->timeline, row, &res.ranks[r], res.nsteps);
  char dir[700];
  snprintf(dir, sizeof dir, "%s/runs/%03d-%s", p->out, row->run, row->strategy);
  st = fb_report_write(dir, &res);
  if (st == FB_OK && cfg.trace) st = fb_trace_write(dir, &res);
  if (st == FB_OK && cfg.trace) st = fb_kineto_write(dir, &res);
  fb_run_result_free(&res);
  return st;
}

/* ---- table ------------------------------------------------------------------------------- */

static const char *const MEM_HEAD[FB_MEM_NCAT] = {"p_shard", "p_full", "g_shard", "g_full",
                                                  "optim",   "act",    "comm",    "temp",
                                                  "p_sec"};

/* Width of each sweep column in the table (key or longest value). */
static int axis_width(const cmp_axis *ax) {
  int w = (int)strlen(ax->key);
  for (int v = 0; v < ax->n; v++)
    if ((int)strlen(ax->vals[v]) > w) w = (int)strlen(ax->vals[v]);
  return w;
}

static bool shown_axis(const cmp_axis *ax) { return strcmp(ax->key, "world") != 0; }

static void print_head(FILE *f, const cmp_plan *p) {
  for (int u = 0; u < 2; u++) {
    fprintf(f, "%4s %-8s %6s", u ? "" : "run", u ? "" : "strategy", u ? "ranks" : "world");
    for (int a = 0; a < p->naxes; a++)
      if (shown_axis(&p->axes[a])) fprintf(f, " %-*s", axis_width(&p->axes[a]), u ? "" : p->axes[a].key);
    fprintf(f, " %4s %10s %12s %10s %10s", u ? "" : "src", u ? "ms" : "step",
            u ? "tokens/s" : "tok/s", u ? "ms" : "exposed", u ? "ms" : "no overlap");
    for (int c = 0; c < FB_MEM_NCAT; c++) fprintf(f, " %8s", u ? "MiB" : MEM_HEAD[c]);
    fprintf(f, " %9s %10s %24s %s\n", u ? "MiB" : "peak", u ? "MiB/step" : "moved",
            u ? "" : "param sum", u ? "" : "same");
  }
}

static double mib(double b) { return b / 1048576.0; }

static void point_value(const cmp_plan *p, int point, int axis, char *out, size_t n) {
  int rem = point;
  for (int a = p->naxes - 1; a >= 0; a--) {
    if (a == axis) {
      snprintf(out, n, "%s", p->axes[a].vals[rem % p->axes[a].n]);
      return;
    }
    rem /= p->axes[a].n;
  }
}

static void print_row(FILE *f, const cmp_plan *p, const cmp_row *row) {
  fprintf(f, "%4d %-8s %6d", row->run, row->strategy, row->world);
  for (int a = 0; a < p->naxes; a++) {
    if (!shown_axis(&p->axes[a])) continue;
    char v[CMP_VAL];
    point_value(p, row->point, a, v, sizeof v);
    fprintf(f, " %-*s", axis_width(&p->axes[a]), v);
  }
  if (!row->figures) {
    fprintf(f, " %s: %s\n", row->st == FB_ENOMEM ? "does not fit" : "failed", row->error);
    return;
  }
  if (row->st != FB_OK) {
    fprintf(f, " %4s does not fit: %s\n", "pred", row->error);
    return;
  }
  fprintf(f, " %4s %10.3f %12.1f %10.3f %10.3f", row->predicted ? "pred" : "meas",
          row->sum.step_s * 1e3, row->sum.tokens_per_s, row->sum.exposed_s * 1e3,
          fb_report_no_overlap(&row->sum) * 1e3);
  for (int c = 0; c < FB_MEM_NCAT; c++) fprintf(f, " %8.1f", mib((double)row->at_peak[c]));
  fprintf(f, " %9.1f %10.2f", mib((double)row->peak), mib(row->coll_bytes));
  if (isfinite(row->param_sum))
    fprintf(f, " %24.17g %s\n", row->param_sum, row->match);
  else
    fprintf(f, " %24s %s\n", "-", "-");
}

/* ---- records ----------------------------------------------------------------------------- */

static const char CSV_HEAD[] =
    "run,point,sweep,strategy,model,backend,hardware,world,batch,micro_batch,seq,steps,"
    "param_dtype,accum,prefetch_forward,prefetch_backward,reshard_after_forward,max_inflight,"
    "bucket_mb,recompute,status,predicted,step_ms,tokens_per_s,tokens_per_s_rank,tflops,"
    "compute_ms,comm_ms,exposed_ms,idle_ms,peak_bytes,param_shard_bytes,param_full_bytes,"
    "grad_shard_bytes,grad_full_bytes,optim_bytes,act_bytes,comm_bytes,temp_bytes,"
    "param_secondary_bytes,persistent_bytes,coll_bytes,wire_bytes,final_loss,param_sum,param_match,error\n";

static const char STEPS_HEAD[] =
    "run,strategy,world,step,wall_ms,compute_ms,comm_ms,exposed_ms,loss,grad_norm,lr\n";

static const char TIMELINE_HEAD[] =
    "run,strategy,world,t_ms,event,category,delta_bytes,label,param_shard,param_full,"
    "grad_shard,grad_full,optim,act,comm,temp,param_secondary,total\n";

static const char *accum_text(fb_accum_mode m) {
  switch (m) {
  case FB_ACCUM_REDUCE: return "reduce";
  case FB_ACCUM_NO_RESHARD: return "no-reshard";
  case FB_ACCUM_NO_REDUCE: return "no-reduce";
  }
  return "?";
}

/* CSV status word: ok, no_fit (does not fit in memory), or the error class. */
static const char *status_text(fb_status st) {
  switch (st) {
  case FB_OK: return "ok";
  case FB_ENOMEM: return "no_fit";
  case FB_EUSAGE: return "bad_config";
  case FB_EUNSUPPORTED: return "unsupported";
  case FB_ETIMEOUT: return "timeout";
  default: return "failed";
  }
}

static void write_csv_row(FILE *f, const cmp_row *row) {
  const fb_run_config *c = &row->cfg;
  char model[256];
  snprintf(model, sizeof model, "%s", c->model);
  for (char *q = model; *q; q++)
    if (*q == ',' || *q == '"') *q = ';';
  fprintf(f, "%d,%d,%s,%s,%s,%s,%s,%d,%d,%d,%d,%d,%s,%s,%d,%d,%d,%d,%g,%s,%s,%d", row->run,
          row->point, row->sweep, row->strategy, model, c->backend, c->hardware, row->world,
          c->batch, c->micro_batch, c->seq, c->steps, fb_dtype_name(c->param_dtype),
          accum_text(c->accum), c->prefetch_forward, c->prefetch_backward,
          c->reshard_after_forward, c->max_inflight, (double)c->bucket_bytes / 1048576.0,
          fb_recompute_name(c->recompute), status_text(row->st), row->predicted);
  if (!row->figures) {
    /* the 24 figure columns stay empty: 8 times, peak, the categories, persistent, coll, wire,
     * loss, param sum, match */
    for (int k = 0; k < 8 + 1 + FB_MEM_NCAT + 1 + 2 + 3; k++) fputc(',', f);
    fprintf(f, ",%s\n", row->error);
    return;
  }
  const fb_rank_summary *s = &row->sum;
  double idle = s->step_s - s->compute_s - s->exposed_s;
  csv_num(f, s->step_s * 1e3, "%.6f");
  csv_num(f, s->tokens_per_s, "%.3f");
  csv_num(f, s->tokens_per_s_rank, "%.3f");
  csv_num(f, s->tflops, "%.6g");
  csv_num(f, s->compute_s * 1e3, "%.6f");
  csv_num(f, s->comm_s * 1e3, "%.6f");
  csv_num(f, s->exposed_s * 1e3, "%.6f");
  csv_num(f, (idle > 0 ? idle : 0) * 1e3, "%.6f");
  fprintf(f, ",%lld", (long long)row->peak);
  for (int k = 0; k < FB_MEM_NCAT; k++) fprintf(f, ",%lld", (long long)row->at_peak[k]);
  fprintf(f, ",%lld", (long long)row->persistent);
  csv_num(f, row->coll_bytes, "%.0f");
  csv_num(f, row->wire_bytes, "%.0f");
  csv_num(f, row->final_loss, "%.9g");
  csv_num(f, row->param_sum, "%.17g");
  fprintf(f, ",%s,%s\n", row->match, row->st == FB_OK ? "" : row->error);
}

static fb_status open_files(const cmp_plan *p, cmp_files *files) {
  memset(files, 0, sizeof *files);
  char runs[600];
  snprintf(runs, sizeof runs, "%s/runs", p->out);
  fb_status mk = fb_mkdir_p(runs);
  if (mk != FB_OK) return mk == FB_EIO ? FB_EUSAGE : mk; /* a bad --out is bad input */
  FB_TRY(fb_json_open(p->out, "compare.csv", &files->runs));
  fputs(CSV_HEAD, files->runs);
  fb_status st = fb_json_open(p->out, "compare_steps.csv", &files->steps);
  if (st != FB_OK) goto fail_steps;
  fputs(STEPS_HEAD, files->steps);
  st = fb_json_open(p->out, "memory_timeline.csv", &files->timeline);
  if (st != FB_OK) goto fail_timeline;
  fputs(TIMELINE_HEAD, files->timeline);
  return FB_OK;
fail_timeline:
  fb_json_discard(files->steps);
fail_steps:
  fb_json_discard(files->runs);
  return st;
}

static fb_status close_files(cmp_files *files) {
  fb_status a = fb_json_close(files->runs, "compare.csv");
  fb_status b = fb_json_close(files->steps, "compare_steps.csv");
  fb_status c = fb_json_close(files->timeline, "memory_timeline.csv");
  return a != FB_OK ? a : b != FB_OK ? b : c;
}

/* ---- the command ------------------------------------------------------------------------- */

/* Predicted runs: where each step goes (the same table as plan's). */
static void print_why(FILE *f, const cmp_row *rows, int n) {
  int np = 0;
  for (int i = 0; i < n; i++) np += rows[i].figures && rows[i].predicted;
  if (!np) return;
  fprintf(f, "\nwhere the predicted step goes (ms; rank 0, last step; exposed = not hidden "
             "under compute; idle = step - compute - exposed comm):\n");
  fb_report_why_head(f, "run strategy");
  for (int i = 0; i < n; i++) {
    const cmp_row *r = &rows[i];
    if (!r->figures || !r->predicted) continue;
    char label[64];
    snprintf(label, sizeof label, "%4d %s", r->run, r->strategy);
    fb_report_why_row(f, label, &r->why, r->peak, r->reserved);
  }
}

static void print_intro(FILE *f, const cmp_plan *p) {
  const fb_run_config *b = &p->base;
  fprintf(f, "compare: model %s, backend %s%s%s, ", b->model, b->backend,
          b->hardware[0] ? ", hardware " : "", b->hardware);
  if (b->world > 0) fprintf(f, "world %d, ", b->world);
  fprintf(f, "%d step%s, seed %llu; strategies", b->steps, b->steps == 1 ? "" : "s",
          (unsigned long long)b->seed);
  for (int s = 0; s < p->nstrategies; s++) fprintf(f, "%s%s", s ? "," : " ", p->strategies[s]);
  if (p->naxes) {
    fprintf(f, "; sweep");
    for (int a = 0; a < p->naxes; a++) {
      fprintf(f, "%s%s=", a ? ";" : " ", p->axes[a].key);
      for (int v = 0; v < p->axes[a].n; v++) fprintf(f, "%s%s", v ? "," : "", p->axes[a].vals[v]);
    }
  }
  fprintf(f, " (%d runs)\n", p->npoints * p->nstrategies);
  fprintf(f, "memory: each category at the peak of the rank that peaked highest; moved: "
             "collective bytes per rank per step; same: '=' when the final parameter sum "
             "equals the point's first run bit for bit\n\n");
}

int fb_compare_main(int argc, char **argv) {
  cmp_plan *p = calloc(1, sizeof *p);
  cmp_row *rows = NULL;
  if (!p) {
    fprintf(stderr, "fsdpbench compare: error: out of host memory\n");
    return 1;
  }
  int rc = 0;
  bool help = false;
  fb_status st = parse(p, argc, argv, &help);
  if (help && st == FB_OK) {
    usage(stdout);
    goto done;
  }
  if (st == FB_OK) {
    /* the base configuration with the first value of every key must be a valid run, so that
     * a mistake outside the sweep is caught before anything runs */
    fb_run_config probe = p->base;
    char desc[512];
    apply_point(p, 0, &probe, desc, sizeof desc);
    set_strategy(&probe, p->strategies[0]);
    st = fb_run_config_finalize(&probe);
  }
  if (st != FB_OK) {
    fprintf(stderr, "fsdpbench compare: error: %s\n", fb_error_msg());
    rc = st == FB_EUSAGE ? 2 : 1;
    goto done;
  }
  const int nruns = p->npoints * p->nstrategies;
  rows = calloc((size_t)nruns, sizeof *rows);
  if (!rows) {
    fprintf(stderr, "fsdpbench compare: error: out of host memory\n");
    rc = 1;
    goto done;
  }
  /* the set is written beside --out and renamed into place at the end, whole or absent
   * (engine/core/out_dir.h); p->out names the temporary meanwhile */
  static const char *const ours[] = {"compare.csv", "compare_steps.csv", "memory_timeline.csv",
                                     "runs", NULL};
  char dest[sizeof p->out];
  snprintf(dest, sizeof dest, "%s", p->out);
  fb_out_dir od = {0};
  st = fb_out_dir_check(dest, "--out");
  static const char *const files_of[] = {"compare.csv", "compare_steps.csv",
                                          "memory_timeline.csv", NULL}; /* regular files */
  if (st == FB_OK) st = fb_check_output_dir(dest, files_of, "--out"); /* a FIFO is the user's */
  if (st == FB_OK) st = fb_out_dir_begin(&od, dest, ours, "--out");
  if (st == FB_OK &&
      snprintf(p->out, sizeof p->out, "%s", fb_out_dir_path(&od)) >= (int)sizeof p->out)
    st = fb_out_dir_fail(&od, FB_ERR(FB_EUSAGE, "--out: path too long: '%s'", dest));
  cmp_files files;
  if (st == FB_OK) {
    st = open_files(p, &files);
    if (st != FB_OK) st = fb_out_dir_fail(&od, st);
  }
  if (st != FB_OK) {
    fprintf(stderr, "fsdpbench compare: error: %s\n", fb_error_msg());
    rc = st == FB_EUSAGE ? 2 : 1;
    goto done;
  }
  print_intro(stdout, p);
  print_head(stdout, p);
  int ok = 0;
  fb_status write_st = FB_OK;
  char werr[1024] = "";
  fb_progress prog; /* stderr: in place on a terminal, else a line every few seconds */
  fb_progress_start(&prog, "compare: run", nruns, true);
  for (int i = 0; i < nruns && !fb_out_dir_stopped(); i++) {
    cmp_row *row = &rows[i];
    row->run = i + 1;
    row->point = i / p->nstrategies;
    snprintf(row->strategy, sizeof row->strategy, "%s", p->strategies[i % p->nstrategies]);
    char now[96];
    snprintf(now, sizeof now, "done, running %s", row->strategy);
    fb_progress_update(&prog, i, now);
    fb_status wst = run_one(p, row, &files);
    fb_progress_clear(&prog);
    if (wst != FB_OK && write_st == FB_OK) { /* said once, at the end */
      write_st = wst;
      snprintf(werr, sizeof werr, "%s", fb_error_msg());
    }
    if (row->figures) ok++;
    if (row->st == FB_OK) {
      if (isfinite(row->param_sum)) {
        const cmp_row *ref = NULL;
        for (int j = i - i % p->nstrategies; j < i && !ref; j++)
          if (rows[j].st == FB_OK && isfinite(rows[j].param_sum)) ref = &rows[j];
        row->match = !ref || !memcmp(&ref->param_sum, &row->param_sum, sizeof(double))
                         ? "="
                         : "differs";
      }
    }
    print_row(stdout, p, row);
    write_csv_row(files.runs, row);
    fflush(files.runs);
  }
  fb_progress_end(&prog);
  st = close_files(&files);
  if (st != FB_OK && write_st == FB_OK) write_st = st;
  else if (write_st != FB_OK) (void)FB_ERR(write_st, "%s", werr);
  if (write_st == FB_OK && fb_out_dir_stopped())
    write_st = FB_ERR(FB_EINTERRUPTED, "--out: stopped by signal %d", fb_out_dir_stopped());
  if (write_st == FB_OK) write_st = fb_out_dir_commit(&od);
  else write_st = fb_out_dir_fail(&od, write_st);
  snprintf(p->out, sizeof p->out, "%s", dest);
  if (write_st != FB_OK) fprintf(stderr, "fsdpbench compare: error: %s\n", fb_error_msg());
  print_why(stdout, rows, nruns);
  printf("\n%d of %d runs completed; records %s %s/compare.csv, compare_steps.csv, "
         "memory_timeline.csv, runs/\n", ok, nruns, write_st == FB_OK ? "in" : "not written to",
         p->out);
  if (!ok) fprintf(stderr, "fsdpbench compare: error: no run completed\n");
  rc = (!ok || write_st != FB_OK) ? 1 : 0;
done:
  free(rows);
  free(p);
  return rc;
}
