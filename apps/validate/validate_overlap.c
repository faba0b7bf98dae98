/* `validate --dataset` on training-run files: how much of its collectives a row's published
 * step leaves exposed, read against the prediction's own parts. The simulated step is compute
 * (rank 0's compute stream, contention included) plus whatever part of the collectives no
 * compute hides; the published step, set against the same predicted compute and collectives,
 * says what share of them it leaves exposed: (published step - compute) / collectives. A share
 * above 100 % is more than every collective run with no overlap at all (the collectives or the
 * compute are mispriced, not only their overlap); a published step shorter than the predicted
 * compute has no share (the compute model is too slow there). Where collectives weigh, a
 * prediction is read as a range, from the predicted step to the step if no collective
 * overlapped compute (the prediction plus the collectives' time compute hid in it); the lines
 * count the rows whose published step falls in it. It reads the row's numbers only: nothing is
 * fitted and it runs nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "median.h"
#include "report.h"
#include "validate_rows.h"

/* The published step: the predicted one scaled by predicted / published throughput (the same
 * tokens per step). 0 for a row with no step. */
double ds_published_step(const ds_result *o) {
  if (o->skip[0] || !(o->step_s > 0) || !(o->published > 0)) return 0;
  return o->step_s * o->predicted / o->published;
}

double ds_no_overlap_step(const ds_result *o) { return o->step_s + o->hidden_s; }

/* The share of the collectives a step of `step` seconds leaves exposed; NAN where the row has
 * no collectives or the step is shorter than the predicted compute. */
double ds_exposed_share(const ds_result *o, double step) {
  if (!(step > 0) || !(o->comm_s > 0) || step < o->compute_s) return NAN;
  return (step - o->compute_s) / o->comm_s;
}

/* Gaps the line below counts: a publication exposing this much more of the collectives than
 * the prediction (in points of the collectives' time). */
#define OVERLAP_GAP_POINTS 25.0
/* The rows it reads: collectives at least this share of the predicted compute. Below it the
 * share is the compute model's error magnified (a 2 % compute error where the collectives are
 * 2 % of the step reads as 100 % exposed); at a quarter, an error of e % in compute moves the
 * share by at most 4e points. */
#define OVERLAP_MIN_COMM FB_COMM_HEAVY
/* The range a prediction gives there: from the predicted step to that step with every
 * collective exposed (plus the part compute hid: ds_no_overlap_step), each end widened by this
 * share, the compute model's own median error on the fitted rows (train-runs.csv, 4.3 %),
 * rounded up. */
#define OVERLAP_RANGE_TOL 0.05

/* The shares over the rows of `source` (NULL: every row) whose collectives are at least a
 * quarter of the predicted compute: medians of the published and the predicted share over the
 * rows whose published step is at least that compute (`shorter`: the others), how many
 * publications expose more than 25 points above the prediction, how many more than every
 * collective. */
typedef struct overlap_stats {
  int n, above, beyond, shorter;
  int inside; /* of n + shorter: published step within the range (OVERLAP_RANGE_TOL) */
  double pub, pred; /* medians; NAN when n == 0 */
} overlap_stats;

static overlap_stats overlap_of(const ds_ctx *x, const char *source, double *pub, double *pred) {
  overlap_stats s = {0, 0, 0, 0, 0, NAN, NAN};
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    const double step = ds_published_step(o);
    if ((source && strcmp(o->source, source)) || !(step > 0) || !(o->comm_s > 0) ||
        o->comm_s < OVERLAP_MIN_COMM * o->compute_s)
      continue;
    s.inside += step >= (1 - OVERLAP_RANGE_TOL) * o->step_s &&
                step <= (1 + OVERLAP_RANGE_TOL) * ds_no_overlap_step(o);
    const double p = ds_exposed_share(o, step), q = ds_exposed_share(o, o->step_s);
    if (isnan(p) || isnan(q)) {
      s.shorter++;
      continue;
    }
    pub[s.n] = p, pred[s.n] = q;
    s.above += 100 * (p - q) > OVERLAP_GAP_POINTS;
    s.beyond += p > 1;
    s.n++;
  }
  if (s.n) s.pub = fb_median(pub, s.n), s.pred = fb_median(pred, s.n);
  return s;
}

/* The closing 'overlap:' line of a training file (overlap_of over every row), after one line a
 * source where the file names sources and the source has such rows. */
void ds_print_overlap_summary(const ds_ctx *x) {
  double *pub = malloc(sizeof *pub * (size_t)(x->n + 1));
  double *pred = malloc(sizeof *pred * (size_t)(x->n + 1));
  if (!pub || !pred) goto out;
  const char *g[64];
  const int ng = ds_groups(x, ds_source_of, g, 64);
  for (int i = 0; i < ng; i++) {
    const overlap_stats s = overlap_of(x, g[i], pub, pred);
    if (s.n)
      printf("#   source %-26s overlap %3d rows, exposed: published median %.0f%%, predicted "
             "median %.0f%%; in the range %d of %d\n", g[i], s.n, 100 * s.pub, 100 * s.pred,
             s.inside, s.n + s.shorter);
  }
  const overlap_stats s = overlap_of(x, NULL, pub, pred);
  if (!s.n) {
    if (s.shorter) printf("overlap: 0 rows with collectives of at least %.0f%% of the predicted "
                          "compute; %d rows faster than that compute; published step in the range "
                          "from the prediction to no overlap (%.0f%% slack): %d of %d\n",
                          100 * OVERLAP_MIN_COMM, s.shorter, 100 * OVERLAP_RANGE_TOL, s.inside,
                          s.shorter);
    goto out;
  }
  printf("overlap: %d rows with collectives of at least %.0f%% of the predicted compute, share of "
         "them left exposed: published (read against the predicted compute) median %.0f%%, "
         "predicted median %.0f%%; %d rows expose more than %.0f points above the prediction, %d "
         "more than every collective; %d rows faster than the predicted compute; published step "
         "in the range from the prediction to no overlap (%.0f%% slack): %d of %d\n", s.n,
         100 * OVERLAP_MIN_COMM, 100 * s.pub, 100 * s.pred, s.above, OVERLAP_GAP_POINTS,
         s.beyond, s.shorter, 100 * OVERLAP_RANGE_TOL, s.inside, s.n + s.shorter);
out:
  free(pub);
  free(pred);
}
