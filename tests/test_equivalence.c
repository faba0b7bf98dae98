/* Equivalence regression: every strategy at W in {1,2,3,4,8} on the local communicator, one
 * micro-batch per rank, ends with per-step losses and a final parameter sum BITWISE equal to
 * `single` running the same W micro-batches with accumulation; with clipping on and off.
 * With several micro-batches per rank (three accumulation modes) the summation order differs:
 * within 1e-6 relative of single, and bitwise between strategies that sum in the same order.
 * Every strategy comes from the registry (accumulation modes from its table). Also: each rank's
 * persistent state is 1/W of single's for strategies that shard everything (within
 * padding and the zero3 imbalance). Every strategy that takes --mesh, on 2x2, 2x4 and 4x1
 * (shard groups of 2, 4 and 1 rank): bitwise equal to single too, and so is every strategy
 * under the schedule options its table takes (--param-sync broadcast, --overlap-grad-reduce,
 * --grad-reduce all-reduce).
 * Prints both sides in full when they differ. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "run_config.h"
#include "engine/exec/runner.h"
#include "strategies/strategy.h"

enum { STEPS = 6, GB = 24, SEQ = 32 }; /* bitwise from the first step on: 6 keep CI short */

static fb_status run_mesh(const char *strategy, int world, const char *mesh, int micro,
                          double clip, fb_accum_mode mode, fb_run_result *res) {
  fb_run_config c;
  test_config(&c, "cpu", strategy, world);
  snprintf(c.mesh, sizeof c.mesh, "%s", mesh);
  c.batch = GB;
  c.micro_batch = micro;
  c.seq = SEQ;
  c.steps = STEPS;
  c.seed = 3;
  c.grad_clip = clip;
  c.accum = mode;
  return test_run(&c, res);
}

static fb_status run(const char *strategy, int world, int micro, double clip, fb_accum_mode mode,
                     fb_run_result *res) {
  return run_mesh(strategy, world, "", micro, clip, mode, res);
}

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void compare(const char *what, const fb_run_result *ref, const fb_run_result *got,
                    double rtol) {
  bool ok = true;
  for (int s = 0; s < STEPS; s++) {
    bool eq = rtol == 0 ? same_bits(ref->loss[s], got->loss[s])
                        : fabs(ref->loss[s] - got->loss[s]) <= rtol * fabs(ref->loss[s]);
    if (!eq) {
      ok = false;
      fprintf(stderr, "  %s step %d loss: reference %.17g, got %.17g\n", what, s, ref->loss[s],
              got->loss[s]);
    }
  }
  bool eq = rtol == 0 ? same_bits(ref->param_sum, got->param_sum)
                      : fabs(ref->param_sum - got->param_sum) <= rtol * fabs(ref->param_sum);
  if (!eq)
    fprintf(stderr, "  %s final param sum: reference %.17g, got %.17g\n", what, ref->param_sum,
            got->param_sum);
  CHECK(ok && eq, "%s differs from its reference (rtol %g)", what, rtol);
  printf("%-34s loss[last] %.17g  param sum %.17g  %s\n", what, got->loss[STEPS - 1],
         got->param_sum, ok && eq ? (rtol == 0 ? "bitwise" : "within tol") : "DIFFERS");
}

/* The registry's one-rank strategy: what every other one must match. */
static const char *reference(void) {
  for (int i = 0; fb_strategy_at(i); i++)
    if (fb_strategy_at(i)->one_rank) return fb_strategy_at(i)->name;
  return "single";
}

static const char *accum_name(fb_accum_mode m) {
  return m == FB_ACCUM_REDUCE ? "reduce" : m == FB_ACCUM_NO_RESHARD ? "no-reshard" : "no-reduce";
}

/* Persistent state 1/W of single's, within padding (+W floats per unit and optimizer copies)
 * and zero3's imbalance, for strategies that shard parameters, gradients and optimizer. */
static void check_share(const char *what, const fb_strategy *s, const fb_run_result *got, int W,
                        int64_t single_persistent) {
  if (!s->shards_all || W == 1) return;
  for (int r = 0; r < got->nranks; r++) {
    double share = (double)got->ranks[r].persistent_bytes / (double)single_persistent;
    double bound = 1.0 / W * got->ranks[r].zero3_imbalance * 1.02 +
                   (double)(got->model.nunits * W * 16 + 4096) / single_persistent;
    CHECK(share <= bound && share >= 0.8 / W * (got->ranks[r].zero3_imbalance > 1 ? 0.5 : 1),
          "%s rank %d persistent %.4f of single (bound %.4f)", what, r, share, bound);
  }
}

/* Every strategy that takes --mesh, on meshes of 4 and 8 ranks (shard groups of 2 and 4, and
 * of one rank: replication only): bitwise equal to single, the local communicator summing both
 * stages of a reduction in world rank order; clipping on. */
static void check_meshes(void) {
  static const struct { int world; const char *mesh; } meshes[] = {
      {4, "2x2"}, {8, "2x4"}, {4, "4x1"}};
  char what[96];
  for (size_t k = 0; k < sizeof meshes / sizeof *meshes; k++) {
    const int W = meshes[k].world;
    fb_run_result ref, got;
    fb_status rst = run(reference(), 1, GB / W, 1.0, FB_ACCUM_REDUCE, &ref);
    CHECK_OK(rst);
    if (rst != FB_OK) return;
    for (int i = 0; fb_strategy_at(i); i++) {
      const fb_strategy *s = fb_strategy_at(i);
      if (!s->mesh) continue;
      snprintf(what, sizeof what, "%s W=%d --mesh %s", s->name, W, meshes[k].mesh);
      fb_status st = run_mesh(s->name, W, meshes[k].mesh, 0, 1.0, FB_ACCUM_REDUCE, &got);
      CHECK_OK(st);
      if (st != FB_OK) continue;
      compare(what, &ref, &got, 0);
      fb_run_result_free(&got);
    }
    fb_run_result_free(&ref);
  }
}

/* The schedule options a strategy's table takes (--param-sync broadcast, --overlap-grad-reduce,
 * --grad-reduce all-reduce) change when and how bytes move, never the bits: W=4 flat and on
 * 2x2 where it takes --mesh, bitwise equal to single; with two micro-batches per rank and
 * every accumulation mode the strategy has, bitwise equal to itself without them. */
static fb_status run_scheduled(const fb_strategy *s, int world, const char *mesh, int micro,
                               fb_accum_mode mode, fb_run_result *res) {
  fb_run_config c;
  test_config(&c, "cpu", s->name, world);
  c.batch = GB, c.micro_batch = micro, c.seq = SEQ, c.steps = STEPS, c.seed = 3;
  c.grad_clip = 1.0, c.accum = mode;
  snprintf(c.mesh, sizeof c.mesh, "%s", mesh);
  if (s->param_sync) snprintf(c.param_sync, sizeof c.param_sync, "broadcast");
  if (s->grad_all_reduce) snprintf(c.grad_reduce, sizeof c.grad_reduce, "all-reduce");
  c.overlap_grad_reduce = s->tunes_grad_overlap;
  return test_run(&c, res);
}

static void check_schedule_options(void) {
  const int W = 4;
  fb_run_result ref, got, plain;
  char what[128];
  fb_status rst = run(reference(), 1, GB / W, 1.0, FB_ACCUM_REDUCE, &ref);
  CHECK_OK(rst);
  if (rst != FB_OK) return;
  for (int i = 0; fb_strategy_at(i); i++) {
    const fb_strategy *s = fb_strategy_at(i);
    if (!s->param_sync && !s->tunes_grad_overlap && !s->grad_all_reduce) continue;
    for (int m = 0; m < (s->mesh ? 2 : 1); m++) {
      snprintf(what, sizeof what, "%s W=%d%s%s%s%s", s->name, W, m ? " --mesh 2x2" : "",
               s->param_sync ? " --param-sync broadcast" : "",
               s->tunes_grad_overlap ? " --overlap-grad-reduce" : "",
               s->grad_all_reduce ? " --grad-reduce all-reduce" : "");
      fb_status st = run_scheduled(s, W, m ? "2x2" : "", 0, FB_ACCUM_REDUCE, &got);
      CHECK_OK(st);
      if (st != FB_OK) continue;
      compare(what, &ref, &got, 0);
      fb_run_result_free(&got);
    }
    for (fb_accum_mode mode = FB_ACCUM_REDUCE; mode <= FB_ACCUM_NO_REDUCE; mode++) {
      if (mode != FB_ACCUM_REDUCE && !(s->accum_modes & (1u << mode))) continue;
      fb_status st = run(s->name, W, GB / W / 2, 1.0, mode, &plain);
      CHECK_OK(st);
      if (st != FB_OK) continue;
      snprintf(what, sizeof what, "%s W=%d 2 micro %s, both options", s->name, W,
               accum_name(mode));
      st = run_scheduled(s, W, "", GB / W / 2, mode, &got);
      CHECK_OK(st);
      if (st == FB_OK) compare(what, &plain, &got, 0), fb_run_result_free(&got);
      fb_run_result_free(&plain);
    }
  }
  fb_run_result_free(&ref);
}

int main(void) {
  printf("reference: %s; strategies: %s\n", reference(), fb_strategy_names());
  check_schedule_options();
  check_meshes();
  const int worlds[] = {1, 2, 3, 4, 8};
  fb_run_result ref, got;
  char what[96];
  /* one micro-batch per rank: bitwise, clipping on (1.0) and off (0) */
  for (int clip = 0; clip < 2; clip++) {
    const double gc = clip ? 1.0 : 0.0;
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
      const int W = worlds[w];
      if (!clip && W != 3) continue; /* clipping off: one world (an odd one) keeps CI short */
      fb_status rst = run(reference(), 1, GB / W, gc, FB_ACCUM_REDUCE, &ref);
      CHECK_OK(rst);
      if (rst != FB_OK) return fb_test_done("test_equivalence");
      int64_t single_persistent = ref.ranks[0].persistent_bytes;
      for (int i = 0; fb_strategy_at(i); i++) {
        const fb_strategy *s = fb_strategy_at(i);
        if (s->one_rank) continue; /* the reference itself */
        snprintf(what, sizeof what, "%s W=%d clip=%g", s->name, W, gc);
        fb_status st = run(s->name, W, 0, gc, FB_ACCUM_REDUCE, &got);
        CHECK_OK(st);
        if (st != FB_OK) continue;
        compare(what, &ref, &got, 0);
        check_share(what, s, &got, W, single_persistent);
        fb_run_result_free(&got);
      }
      fb_run_result_free(&ref);
    }
  }
  /* several micro-batches per rank: W = 2, 3 micro-steps each */
  const int W = 2, micro = GB / W / 3;
  CHECK_OK(run(reference(), 1, micro, 1.0, FB_ACCUM_REDUCE, &ref));
  fb_run_result first = {0};
  const char *first_name = NULL;
  for (int i = 0; fb_strategy_at(i); i++) {
    const fb_strategy *s = fb_strategy_at(i);
    if (s->one_rank) continue;
    for (int m = 0; m < 3; m++) {
      if (m != FB_ACCUM_REDUCE && !(s->accum_modes & (1u << m))) continue;
      snprintf(what, sizeof what, "%s W=2 accum=%s x3", s->name, accum_name((fb_accum_mode)m));
      fb_status st = run(s->name, W, micro, 1.0, (fb_accum_mode)m, &got);
      CHECK_OK(st);
      if (st != FB_OK) continue;
      compare(what, &ref, &got, 1e-6);
      if (m == FB_ACCUM_NO_REDUCE) { /* sums each rank's micro-steps first: its own order */
        fb_run_result_free(&got);
        continue;
      }
      /* reduce and no-reshard sum (g_r0 summed over ranks) + (g_r1 summed over ranks) + ... */
      if (!first_name) {
        first = got;
        first_name = s->name;
        continue;
      }
      snprintf(what, sizeof what, "%s %s vs %s reduce (same order)", s->name,
               accum_name((fb_accum_mode)m), first_name);
      compare(what, &first, &got, 0);
      fb_run_result_free(&got);
    }
  }
  if (first_name) fb_run_result_free(&first);
  fb_run_result_free(&ref);
  return fb_test_done("test_equivalence");
}
