/* `validate --dataset` on training-run files: how much of its collectives a row's published
 * step leaves exposed, read against the prediction's own parts. The simulated step is compute
 * (rank 0's compute stream, contention included) plus whatever part of the collectives no
 * compute hides; the published step, set against the same predicted compute and collectives,
 * says what share of them it leaves exposed: (published step - compute) / collectives. A share
 * above 100 % is more than every collective run with no overlap at all (the collectives or the
 * compute are mispriced, not only their overlap); a published step shorter than the predicted
 * compute has no share (the compute model is too slow there). It reads the row's numbers only:
 * nothing is fitted and it runs nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "median.h"
#include "validate_rows.h"

/* The published step: the predicted one scaled by predicted / published throughput (the same
 * tokens per step). 0 for a row with no step. */
double ds_published_step(const ds_result *o) {
  if (o->skip[0] || !(o->step_s > 0) || !(o->published > 0)) return 0;
  return o->step_s * o->predicted / o->published;
}

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
#define OVERLAP_MIN_COMM 0.25

/* The closing 'overlap:' line of a training file: over the rows whose collectives are at least a
 * quarter of the predicted compute and whose published step is at least that compute, the
 * median share each leaves exposed and the median share the prediction leaves; how many
 * publications expose more than 25 points above the prediction, and how many more than every
 * collective. */
void ds_print_overlap_summary(const ds_ctx *x) {
  double *pub = malloc(sizeof *pub * (size_t)(x->n + 1));
  double *pred = malloc(sizeof *pred * (size_t)(x->n + 1));
  if (!pub || !pred) goto out;
  int n = 0, above = 0, beyond = 0, shorter = 0;
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    const double step = ds_published_step(o);
    if (!(step > 0) || !(o->comm_s >= OVERLAP_MIN_COMM * o->compute_s) || !(o->comm_s > 0))
      continue;
    const double p = ds_exposed_share(o, step), q = ds_exposed_share(o, o->step_s);
    if (isnan(p) || isnan(q)) {
      shorter++;
      continue;
    }
    pub[n] = p, pred[n] = q;
    above += 100 * (p - q) > OVERLAP_GAP_POINTS;
    beyond += p > 1;
    n++;
  }
  if (!n) {
    if (shorter) printf("overlap: 0 rows with collectives of at least %.0f%% of the predicted "
                        "compute; %d rows faster than that compute\n", 100 * OVERLAP_MIN_COMM,
                        shorter);
    goto out;
  }
  printf("overlap: %d rows with collectives of at least %.0f%% of the predicted compute, share of "
         "them left exposed: published (read against the predicted compute) median %.0f%%, "
         "predicted median %.0f%%; %d rows expose more than %.0f points above the prediction, %d "
         "more than every collective; %d rows faster than the predicted compute\n", n,
         100 * OVERLAP_MIN_COMM, 100 * fb_median(pub, n), 100 * fb_median(pred, n), above,
         OVERLAP_GAP_POINTS, beyond, shorter);
out:
  free(pub);
  free(pred);
}
