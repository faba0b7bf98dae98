/* `fsdpbench validate --dataset FILE` (see validate_dataset.h): the driver. It tells the
 * file's kind by its header, hands every row to that kind's reader (validate_train.c,
 * validate_ops.c; validate_rows.h), and prints the rows, the ones it could not express, the
 * worst-row floor and the closing line. */
#include "validate_dataset.h"
#include "median.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/core/files.h"
#include "validate_rows.h"

static int fail(fb_status st) {
  fprintf(stderr, "fsdpbench validate: error: %s\n", fb_error_msg());
  return st == FB_EUSAGE ? 2 : 1;
}

/* ---- driver ------------------------------------------------------------------------------- */

typedef struct ds_kind {
  const char *key_column; /* a column only this kind of file has */
  const char *what, *unit, *closing;
  ds_row_fn row;
} ds_kind;

static const ds_kind kinds[] = {
    {.key_column = "tokens_per_s_per_gpu", .what = "training runs", .unit = "tok/s/GPU",
     .closing = "dev-set", .row = ds_train_row},
    {.key_column = "shape_kind", .what = "GEMM throughput", .unit = "TFLOP/s",
     .closing = "op-set", .row = ds_gemm_row},
    {.key_column = "head_dim", .what = "attention throughput", .unit = "TFLOP/s",
     .closing = "op-set", .row = ds_attention_row},
    {.key_column = "busbw_gbs", .what = "collective bus bandwidth", .unit = "GB/s",
     .closing = "op-set", .row = ds_collective_row},
};

static double err_pct(const ds_result *o) {
  return (o->predicted - o->published) / o->published * 100.0;
}

/* A training row off by more than 25 %: what the published figure asks of the prediction's
 * parts. Published step = predicted step x predicted / published (the same tokens per step).
 * Too slow a publication: even with no overlap at all, step <= compute + k x collectives, so
 * the collectives would have to take at least k = (step - compute) / collectives times their
 * modelled time (on the row's own stated network) for communication alone to explain it. Too
 * fast: a step shorter than the predicted compute alone puts the error in compute. A bound,
 * never a fit: nothing changes. 0 when the row is within 25 % or has no collectives. */
static double gap_factor(const ds_result *o) {
  if (o->step_s <= 0 || err_pct(o) <= 25.0 || !(o->comm_s > 0)) return 0;
  return ds_exposed_share(o, ds_published_step(o));
}

/* The one reason a row leaves the worst-row floor: its bound needs its collectives at least
 * this many times slower than its own stated network prices them. */
#define FLOOR_COMM_FACTOR 3.0
static const char floor_comm_why[] =
    "its bound needs the collectives at least three times slower than its own stated network "
    "prices them: no mechanism of that network explains it";

static void mark_floor(ds_ctx *x) {
  for (int i = 0; i < x->n; i++) {
    ds_result *o = &x->res[i];
    o->floor_why = !o->skip[0] && o->own_network && gap_factor(o) >= FLOOR_COMM_FACTOR
                       ? floor_comm_why : NULL;
  }
}

/* floor_why set by mark_floor first. */
static void print_gap(const ds_result *o) {
  double e = err_pct(o), pub = ds_published_step(o);
  if (o->step_s <= 0 || fabs(e) <= 25.0) return;
  printf("#        row %d: published step %.0f ms, predicted %.0f ms (compute %.0f ms, "
         "collectives %.0f ms): ", o->row, pub * 1e3, o->step_s * 1e3, o->compute_s * 1e3,
         o->comm_s * 1e3);
  double k = gap_factor(o);
  if (k > 1)
    printf("even with no overlap, communication alone explains it only if the collectives "
           "take >= %.1fx their modelled time%s\n", k, o->floor_why ?
           "; that is at least three times slower than its own stated network, so the row "
           "leaves the worst-row floor" : "");
  else if (e > 0 && o->comm_s > 0)
    printf("the collectives at their modelled time explain it if less of them overlaps "
           "compute than predicted: the published step leaves %.0f%% of them exposed, the "
           "prediction %.0f%%\n", 100 * ds_exposed_share(o, pub),
           100 * ds_exposed_share(o, o->step_s));
  else if (e > 0)
    printf("no collective to blame: the gap is in compute or on the host\n");
  else if (pub < o->compute_s)
    printf("shorter than the predicted compute alone: the compute model is too slow here\n");
  else
    printf("within the predicted compute: exposed communication or the host are too slow\n");
}

static void print_rows(const ds_ctx *x) {
  printf("#  row  %-78s %-10s %12s %12s %8s\n", "configuration", "profile", "published",
         "predicted", "err %");
  printf("#  %*s %12s %12s\n", 89, "", x->unit, x->unit);
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    if (o->skip[0]) continue;
    printf("%6d  %-78s %-10s %12.1f %12.1f %+8.1f\n", o->row, o->what, o->gpu, o->published,
           o->predicted, err_pct(o));
    if (o->figures[0]) printf("#        row %d: published %s\n", o->row, o->figures);
    if (o->assumed[0]) printf("#        row %d: %s\n", o->row, o->assumed);
    if (o->ooms > 0)
      printf("#        row %d: the allocator model predicts %lld OOM\n", o->row, o->ooms);
    print_gap(o);
    ds_print_mem_row(o);
  }
  int noom = 0;
  for (int i = 0; i < x->n; i++) noom += !x->res[i].skip[0] && x->res[i].ooms > 0;
  if (noom)
    printf("# %d row(s) where the caching-allocator model predicts out-of-memory errors that the "
           "published run did not have (its memory model is too pessimistic there)\n", noom);
  int ns = 0;
  for (int i = 0; i < x->n; i++) ns += x->res[i].skip[0] != 0;
  if (ns) printf("# not expressible (%d rows):\n", ns);
  for (int i = 0; i < x->n; i++)
    if (x->res[i].skip[0])
      printf("#%5d  %-78s %s\n", x->res[i].row, x->res[i].what, x->res[i].skip);
}

/* Median, worst and the count within 15% of the |errors| of the expressed rows whose group
 * (profile or source, by `of`) is `name` (NULL: all); the worst leaves out the rows of the
 * floor. */
typedef struct err_stats {
  int n, within;
  double median, worst;
} err_stats;

static const char *profile_of(const ds_result *o) { return o->gpu; }
const char *ds_source_of(const ds_result *o) { return o->source; }

static err_stats stats(const ds_ctx *x, const char *(*of)(const ds_result *), const char *name,
                       double *e) {
  err_stats s = {0, 0, NAN, 0};
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    if (o->skip[0] || (name && strcmp(of(o), name))) continue;
    e[s.n] = fabs(err_pct(o));
    s.within += e[s.n] <= 15.0;
    if (!o->floor_why && e[s.n] > s.worst) s.worst = e[s.n];
    s.n++;
  }
  s.median = fb_median(e, s.n);
  if (!s.n) s.worst = NAN;
  return s;
}

/* The rows the worst-row floor leaves out, each with its error and reason. */
static void print_floor(const ds_ctx *x) {
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    if (o->skip[0] || !o->floor_why) continue;
    printf("# worst-row floor: row %d (%s, %+.1f%%) stays in the median, not in the worst: %s\n",
           o->row, o->what, err_pct(o), o->floor_why);
  }
}

int ds_groups(const ds_ctx *x, const char *(*of)(const ds_result *), const char **g, int cap) {
  int n = 0;
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    if (o->skip[0] || !of(o)[0]) continue;
    int j = 0;
    while (j < n && strcmp(g[j], of(o))) j++;
    if (j == n && n < cap) g[n++] = of(o);
  }
  return n;
}

/* The closing line; before it a line per profile, then per source (where the file names
 * sources): how each stands, as a reader of one source's table would ask. */
static void print_summary(const ds_ctx *x) {
  double *e = malloc(sizeof *e * (size_t)(x->n + 1));
  if (!e) return;
  const char *g[64];
  print_floor(x);
  const char *(*by[])(const ds_result *) = {profile_of, ds_source_of};
  for (int k = 0; k < 2; k++) {
    const int n = ds_groups(x, by[k], g, 64);
    for (int q = 0; q < n; q++) {
      err_stats s = stats(x, by[k], g[q], e);
      printf("#   %s%-*s %4d rows, median |err| %.1f%%, worst %.1f%%, within 15%%: %d/%d\n",
             k ? "source " : "", k ? 26 : 10, g[q], s.n, s.median, s.worst, s.within, s.n);
    }
  }
  err_stats s = stats(x, profile_of, NULL, e);
  printf("%s: %d rows, median |err| %.1f%%, worst %.1f%%, within 15%%: %d/%d\n", x->closing,
         s.n, s.median, s.worst, s.within, s.n);
  free(e);
}

static fb_status write_csv(const ds_ctx *x, const char *dir) {
  char path[600];
  if (mkdir(dir, 0777) && access(dir, W_OK))
    return FB_ERR(FB_EUSAGE, "--out: cannot create or write '%s'", dir);
  snprintf(path, sizeof path, "%s/dataset.csv", dir);
  fb_out_file out; /* written under a temporary name, renamed when complete */
  FB_TRY(fb_out_open(&out, path, "--out"));
  FILE *f = out.f;
  /* text fields lose their commas (-> ';') so that awk -F, and gnuplot read the file */
  fprintf(f, "row,profile,configuration,published,predicted,err_pct,unit,not_expressible,"
             "published_peak_gib,predicted_peak_gib,peak_err_pct,published_step_ms,"
             "predicted_step_ms,compute_ms,collectives_ms,published_exposed_pct,"
             "predicted_exposed_pct,no_overlap_step_ms\n");
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    char what[sizeof o->what], why[sizeof o->skip];
    snprintf(what, sizeof what, "%s", o->what);
    snprintf(why, sizeof why, "%s", o->skip);
    for (char *c = what; *c; c++) *c = *c == ',' ? ';' : *c;
    for (char *c = why; *c; c++) *c = *c == ',' ? ';' : *c;
    double pub = NAN, pred = NAN, merr = NAN;
    ds_mem_figures(o, &pub, &pred, &merr);
    /* training rows: the step and its parts in ms, the exposed shares (NAN elsewhere) */
    const double ps = ds_published_step(o), ms = ps > 0 ? 1e3 : NAN;
    fprintf(f, "%d,%s,%s,%.6g,%.6g,%.3f,%s,%s,%.4g,%.4g,%.2f,%.6g,%.6g,%.6g,%.6g,%.1f,%.1f,%.6g\n",
            o->row, o->gpu, what, o->published, o->skip[0] ? NAN : o->predicted,
            o->skip[0] ? NAN : err_pct(o), x->unit, why, pub, pred, merr, ps * ms,
            o->step_s * ms, o->compute_s * ms, o->comm_s * ms, 100 * ds_exposed_share(o, ps),
            ps > 0 ? 100 * ds_exposed_share(o, o->step_s) : NAN, ds_no_overlap_step(o) * ms);
  }
  return fb_out_commit(&out);
}

static void remove_tmpdir(const char *dir) {
  char path[128];
  snprintf(path, sizeof path, "%s/model.yaml", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/row.yaml", dir);
  unlink(path);
  rmdir(dir);
}

static void usage(FILE *f) {
  fprintf(f, "usage: fsdpbench validate --dataset FILE [--hardware PROFILE] [--out DIR]\n"
             "reproduces every row of a public measurement file it can express with the\n"
             "simulator (training runs) or the cost model (GEMM, attention, collectives) and\n"
             "prints published vs predicted per row, then 'dev-set:' / 'op-set:' with the\n"
             "median and worst |error|; training files also compare each row's published\n"
             "peak memory where its source's unit and metric are known ('memory:') and close\n"
             "with the pairs ('pairs:'). The file kinds are told apart by their header.\n"
             "--hardware PROFILE prices every row on that profile (e.g. one `calibrate\n"
             "--backend cuda --out` wrote) instead of the one its GPU name picks.\n");
}

int fb_validate_dataset_main(int argc, char **argv) {
  const char *file = NULL, *out = NULL, *hw = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = !strcmp(a, "--dataset") ? &file : !strcmp(a, "--out") ? &out
                       : !strcmp(a, "--hardware") ? &hw : NULL;
    if (!strncmp(a, "--dataset=", 10)) file = a + 10;
    else if (!strncmp(a, "--out=", 6)) out = a + 6;
    else if (!strncmp(a, "--hardware=", 11)) hw = a + 11;
    else if (!strcmp(a, "--help")) return usage(stdout), 0;
    else if (dst && i + 1 < argc) *dst = argv[++i];
    else {
      fprintf(stderr, "fsdpbench validate: error: %s: '%s' is not allowed with --dataset "
                      "(want --dataset FILE [--hardware PROFILE] [--out DIR])\n", dst ? "missing value" : "flag", a);
      return 2;
    }
  }
  if (!file || !*file) {
    fprintf(stderr, "fsdpbench validate: error: --dataset: '' is not allowed (want a CSV file)\n");
    return 2;
  }
  static const char *const outputs[] = {"dataset.csv", NULL};
  fb_status st = out ? fb_check_output_dir(out, outputs, "--out") : FB_OK; /* before the rows */
  if (st != FB_OK) return fail(st);
  fb_csv t;
  st = fb_csv_read(file, "--dataset", &t);
  if (st != FB_OK) return fail(st);
  const ds_kind *kind = NULL;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !kind; i++)
    if (fb_csv_col(&t, kinds[i].key_column) >= 0) kind = &kinds[i];
  if (!kind) {
    fb_csv_free(&t);
    fprintf(stderr, "fsdpbench validate: error: --dataset: '%s' has none of the known headers "
                    "(a column tokens_per_s_per_gpu, shape_kind, head_dim or busbw_gbs)\n", file);
    return 2;
  }
  if (hw) {
    fb_hardware probe;
    if ((st = fb_hardware_load(hw, &probe)) != FB_OK) {
      fb_csv_free(&t);
      return fail(st);
    }
  }
  ds_ctx x = {.t = &t, .unit = kind->unit, .closing = kind->closing, .hardware = hw};
  x.res = calloc((size_t)t.nrows, sizeof *x.res);
  snprintf(x.tmpdir, sizeof x.tmpdir, "/tmp/fsdpbench-dataset-XXXXXX");
  if (!x.res || !mkdtemp(x.tmpdir)) {
    free(x.res);
    fb_csv_free(&t);
    fprintf(stderr, "fsdpbench validate: error: out of memory or no temporary directory\n");
    return 1;
  }
  printf("# fsdpbench validate --dataset %s: %s, %d rows; every predicted figure comes from %s%s "
         "%s\n", file, kind->what, t.nrows - 1, hw ? "the profile " : "the profiles in ",
         hw ? hw : "models/hardware/", hw ? "as it is" : "as they are");
  for (int r = 1; r < t.nrows && st == FB_OK; r++) {
    ds_result *o = &x.res[x.n++];
    o->row = r;
    if (fb_csv_col(&t, "source_id") >= 0)
      snprintf(o->source, sizeof o->source, "%s", ds_col(&x, r, "source_id"));
    st = kind->row(&x, r, o);
  }
  remove_tmpdir(x.tmpdir);
  int rc = 0;
  if (st != FB_OK) {
    rc = fail(st);
  } else {
    mark_floor(&x);
    print_rows(&x);
    print_summary(&x);
    if (kind->row == ds_train_row) ds_print_overlap_summary(&x);
    if (kind->row == ds_train_row) ds_print_mem_summary(&x);
    if (kind->row == ds_train_row) ds_print_pairs(&x); /* the closing line of a training file */
    if (out && (st = write_csv(&x, out)) != FB_OK) rc = fail(st);
  }
  free(x.res);
  fb_csv_free(&t);
  return rc;
}
