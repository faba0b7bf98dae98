/* The fits calibration shares (calibrate_cpu.c, calibrate_steps.c, calibrate_device.c): the
 * GEMM size curve, a coordinate search over a profile's figures through the cost model, a
 * kernel's time per call as a line in its bytes, and the rounding a measured figure is
 * written with. Pure functions: nothing is measured here. */
#include <math.h>

#include "calibrate.h"

/* rate(s) = peak * E * s / (s + h), least squares on log(rate) (relative errors, so neither
 * the big nor the small shapes dominate by their size), each point weighted by w[i] (NULL:
 * equally): for each h on a log grid the best log E is the weighted mean residual; E is
 * capped at 1. Returns the fit's relative RMS residual, weighted the same way. */
/* Point i's weight: w[i], or 1 without weights. */
static double weight(const double *w, int i) { return w ? w[i] : 1; }

double fb_calibrate_fit_gemm(const double *s, const double *rate, const double *w, int n,
                             double peak, double *E, double *h) {
  double best_err = INFINITY, wsum = 0;
  for (int i = 0; i < n; i++) wsum += weight(w, i);
  *E = 1;
  *h = 1;
  if (!(wsum > 0)) return 0;
  for (double hh = 1; hh <= FB_CALIB_GEMM_H_MAX; hh *= 1.05) {
    double mean = 0;
    for (int i = 0; i < n; i++) mean += weight(w, i) * log(rate[i] / (peak * s[i] / (s[i] + hh)));
    mean /= wsum;
    double e = fmin(1.0, exp(mean)), err = 0;
    for (int i = 0; i < n; i++) {
      double r = log(rate[i]) - log(peak * e * s[i] / (s[i] + hh));
      err += weight(w, i) * r * r;
    }
    if (err < best_err) {
      best_err = err;
      *E = e;
      *h = hh;
    }
  }
  double sq = 0;
  for (int i = 0; i < n; i++) {
    double r = peak * *E * s[i] / (s[i] + *h) / rate[i] - 1;
    sq += weight(w, i) * r * r;
  }
  return sqrt(sq / wsum);
}

/* x rounded to 4 significant digits (0 stays 0). */
double fb_calib_sig4(double x) {
  if (!(x != 0) || !isfinite(x)) return x;
  double p = pow(10.0, 3 - floor(log10(fabs(x))));
  return round(x * p) / p;
}

static double log_rms(const double *measured, int n, fb_calib_model_fn model, void *ctx) {
  double sq = 0;
  for (int i = 0; i < n; i++) {
    double m = model(ctx, i), r = m > 0 && measured[i] > 0 ? log(m / measured[i]) : 10.0;
    sq += r * r;
  }
  return n > 0 ? sqrt(sq / n) : 0;
}

double fb_calib_fit_figures(fb_calib_param *params, int np, const double *measured, int n,
                            fb_calib_model_fn model, void *ctx) {
  double best = log_rms(measured, n, model, ctx), step = 1.5;
  for (int round = 0; round < 200 && step > 1.001; round++) {
    bool improved = false;
    for (int p = 0; p < np; p++) {
      const double keep = *params[p].v;
      for (int dir = 0; dir < 2; dir++) {
        *params[p].v = fmin(params[p].hi, fmax(params[p].lo, dir ? keep / step : keep * step));
        double r = log_rms(measured, n, model, ctx);
        if (r < best - 1e-12) {
          best = r;
          improved = true;
          break;
        }
        *params[p].v = keep;
      }
    }
    if (!improved) step = sqrt(step);
  }
  return best;
}

void fb_calib_line_add(fb_calib_line *l, double bytes, double seconds) {
  if (l->n == 0 || bytes < l->bmin) l->bmin = bytes;
  if (l->n == 0 || bytes > l->bmax) l->bmax = bytes;
  l->n += 1;
  l->sb += bytes;
  l->st += seconds;
  l->sbb += bytes * bytes;
  l->sbt += bytes * seconds;
}

void fb_calib_line_fit(const fb_calib_line *l, double ceiling, double *bw, double *fixed_s) {
  *bw = l->st > 0 ? l->sb / l->st : 0;
  *fixed_s = 0;
  const double den = l->n * l->sbb - l->sb * l->sb;
  if (l->n < 4 || !(l->bmax >= 1.5 * l->bmin) || !(den > 0)) return;
  double slope = (l->n * l->sbt - l->sb * l->st) / den;
  if (ceiling > 0 && !(slope >= 1 / ceiling)) slope = 1 / ceiling;
  const double fixed = (l->st - slope * l->sb) / l->n;
  if (!(fixed > 0)) return;
  *bw = 1 / slope;
  *fixed_s = fixed;
}
