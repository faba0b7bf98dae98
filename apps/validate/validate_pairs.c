/* `validate --dataset` on training-run files, scored as users read a comparison table: for
 * every pair of rows of one source that differ only in strategy (same GPUs, same model, same
 * work per GPU) or only in GPU count (same strategy), the published ratio of their throughputs
 * and the predicted one, and the difference in points (100 x the difference of the ratios);
 * and whether the published ratio lies in the range the two rows' predicted ranges give (each
 * row from its prediction to its step with no collective hidden: ds_no_overlap_step), between
 * the predicted ratio and the ratio with nothing overlapped, 5 points either side.
 * Which rows pair is decided by the key and strategy label ds_train_row gives each row from
 * what it ran, never from the figures. Before the closing line, each source's own count. It
 * prints; it computes nothing else. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "validate_rows.h"

#define POINTS_OK 5.0 /* the "within 5 points" */

typedef struct pair_score {
  int n, within, in_range, left_out;
  double worst;
} pair_score;

/* One pair: its points (NAN when a row is not expressible) and whether the published ratio is
 * in the range. */
typedef struct pair_result {
  double pts;
  bool in_range;
} pair_result;

/* A row's predicted tok/s/GPU with no collective hidden under compute. */
static double no_overlap_tps(const ds_result *o) {
  const double no = ds_no_overlap_step(o);
  return o->step_s > 0 && no > 0 ? o->predicted * o->step_s / no : o->predicted;
}

/* What the two rows differ in: "strategy", "GPUs", or NULL when not a pair. */
static const char *pair_kind(const ds_result *a, const ds_result *b) {
  if (!a->key[0] || strcmp(a->key, b->key)) return NULL;
  const bool same_strat = !strcmp(a->strat, b->strat);
  if (a->world == b->world && !same_strat) return "strategy";
  if (a->world != b->world && same_strat) return "GPUs";
  return NULL;
}

/* Prints the pair's ratios and scores it. */
static pair_result score_pair(const ds_result *a, const ds_result *b, const char *kind) {
  if (a->skip[0] || b->skip[0] || !(a->predicted > 0) || !(b->predicted > 0)) {
    printf("# pair rows %d/%d (%s differ): not scored, row %d is not expressible\n", a->row,
           b->row, kind, a->skip[0] ? a->row : b->row);
    return (pair_result){NAN, false};
  }
  const double pub = b->published / a->published, pred = b->predicted / a->predicted;
  const double none = no_overlap_tps(b) / no_overlap_tps(a);
  const double pts = fabs(pub - pred) * 100.0, slack = POINTS_OK / 100.0;
  const bool in = pub >= fmin(pred, none) - slack && pub <= fmax(pred, none) + slack;
  printf("# pair rows %d/%d: %-9s %s x%d / %s x%d: tok/s/GPU ratio published %.3f, predicted "
         "%.3f, %.1f points%s; with no overlap %.3f%s\n", a->row, b->row, kind, b->strat,
         b->world, a->strat, a->world, pub, pred, pts, pts <= POINTS_OK ? "" : " (more than 5)",
         none, in ? "" : " (published outside the range)");
  return (pair_result){pts, in};
}

static void tally(pair_score *s, pair_result r) {
  if (isnan(r.pts)) {
    s->left_out++;
    return;
  }
  s->n++;
  s->within += r.pts <= POINTS_OK;
  s->in_range += r.in_range;
  if (r.pts > s->worst) s->worst = r.pts;
}

enum { MAX_SOURCES = 64 };

/* The pairs' score of each source (pairs never span sources: the key includes it), in the
 * order the sources first pair. */
typedef struct source_scores {
  const char *name[MAX_SOURCES];
  pair_score score[MAX_SOURCES];
  int n;
} source_scores;

static pair_score *score_of(source_scores *ss, const char *source) {
  for (int i = 0; i < ss->n; i++)
    if (!strcmp(ss->name[i], source)) return &ss->score[i];
  if (ss->n == MAX_SOURCES) return NULL;
  ss->name[ss->n] = source;
  return &ss->score[ss->n++];
}

void ds_print_pairs(const ds_ctx *x) {
  pair_score s = {0};
  static source_scores ss;
  memset(&ss, 0, sizeof ss);
  printf("# pairs: rows of one source that differ only in strategy or only in GPU count; "
         "ratio = second row / first row, predicted tok/s/GPU vs published\n");
  for (int i = 0; i < x->n; i++)
    for (int j = i + 1; j < x->n; j++) {
      const char *kind = pair_kind(&x->res[i], &x->res[j]);
      if (!kind) continue;
      const pair_result r = score_pair(&x->res[i], &x->res[j], kind);
      tally(&s, r);
      pair_score *p = x->res[i].source[0] ? score_of(&ss, x->res[i].source) : NULL;
      if (p) tally(p, r);
    }
  if (s.left_out)
    printf("# %d pair(s) not scored: one of their rows is not expressible\n", s.left_out);
  for (int i = 0; i < ss.n; i++)
    printf("#   source %-26s pairs %3d, within 5 points: %3d, worst %.1f points; in the range "
           "%3d\n", ss.name[i], ss.score[i].n, ss.score[i].within, ss.score[i].worst,
           ss.score[i].in_range);
  printf("pairs: %d, within 5 points: %d, worst %.1f points; published ratio in the range from "
         "the predicted to the no-overlap ratio (5 points slack): %d\n", s.n, s.within, s.worst,
         s.in_range);
}
