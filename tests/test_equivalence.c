/* Equivalence regression: every strategy at W in {1,2,3,4,8} on the local communicator, one
 * micro-batch per rank, ends with per-step losses and a final parameter sum BITWISE equal to
 * `single` running the same W micro-batches with accumulation; with clipping on and off.
 * With several micro-batches per rank (three accumulation modes) the summation order differs:
 * within 1e-6 relative of single, and bitwise between strategies that sum in the same order.
 * Also: each rank's persistent state for zero3/fsdp/yafsdp is 1/W of single's (within
 * padding and the zero3 imbalance). Prints both sides in full when they differ. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine/exec/runner.h"

enum { STEPS = 10, GB = 24, SEQ = 32 };

static fb_status run(const char *strategy, int world, int micro, double clip, fb_accum_mode mode,
                     fb_run_result *res) {
  fb_run_config c;
  fb_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "debug");
  snprintf(c.strategy, sizeof c.strategy, "%s", strategy);
  snprintf(c.backend, sizeof c.backend, "cpu");
  snprintf(c.comm, sizeof c.comm, "local");
  c.world = world;
  c.batch = GB;
  c.micro_batch = micro;
  c.seq = SEQ;
  c.steps = STEPS;
  c.seed = 3;
  c.grad_clip = clip;
  c.accum = mode;
  c.quiet = true;
  c.threads = 2;
  fb_status st = fb_config_finalize(&c);
  if (st != FB_OK) return st;
  return fb_run(&c, res);
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

static const char *strategies[] = {"ddp", "zero3", "fsdp", "yafsdp"};

int main(void) {
  const int worlds[] = {1, 2, 3, 4, 8};
  fb_run_result ref, got;
  char what[96];
  /* one micro-batch per rank: bitwise, clipping on (1.0) and off (0) */
  for (int clip = 0; clip < 2; clip++) {
    const double gc = clip ? 1.0 : 0.0;
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
      const int W = worlds[w];
      if (!clip && W != 3 && W != 8) continue; /* clipping off: a subset keeps CI short */
      fb_status rst = run("single", 1, GB / W, gc, FB_ACCUM_REDUCE, &ref);
      CHECK_OK(rst);
      if (rst != FB_OK) return fb_test_done("test_equivalence");
      int64_t single_persistent = ref.ranks[0].persistent_bytes;
      for (size_t s = 0; s < 4; s++) {
        snprintf(what, sizeof what, "%s W=%d clip=%g", strategies[s], W, gc);
        fb_status st = run(strategies[s], W, 0, gc, FB_ACCUM_REDUCE, &got);
        CHECK_OK(st);
        if (st != FB_OK) continue;
        compare(what, &ref, &got, 0);
        if (strcmp(strategies[s], "ddp") && W > 1) {
          /* persistent state 1/W of single's, within padding (+W floats per unit and
           * optimizer copies) and zero3's imbalance */
          for (int r = 0; r < got.nranks; r++) {
            double share = (double)got.ranks[r].persistent_bytes / (double)single_persistent;
            double bound = 1.0 / W * got.ranks[r].zero3_imbalance * 1.02 +
                           (double)(got.model.nunits * W * 16 + 4096) / single_persistent;
            CHECK(share <= bound && share >= 0.8 / W * (strcmp(strategies[s], "zero3") ? 1 : 0.5),
                  "%s rank %d persistent %.4f of single (bound %.4f)", what, r, share, bound);
          }
        }
        fb_run_result_free(&got);
      }
      fb_run_result_free(&ref);
    }
  }
  /* several micro-batches per rank: W = 2, 3 micro-steps each */
  const int W = 2, micro = GB / W / 3;
  CHECK_OK(run("single", 1, micro, 1.0, FB_ACCUM_REDUCE, &ref));
  fb_run_result first = {0};
  bool have_first = false;
  const struct { const char *s; fb_accum_mode m; const char *name; } modes[] = {
      {"ddp", FB_ACCUM_REDUCE, "reduce"},         {"zero3", FB_ACCUM_REDUCE, "reduce"},
      {"fsdp", FB_ACCUM_REDUCE, "reduce"},        {"yafsdp", FB_ACCUM_REDUCE, "reduce"},
      {"fsdp", FB_ACCUM_NO_RESHARD, "no-reshard"}, {"zero3", FB_ACCUM_NO_RESHARD, "no-reshard"},
      {"fsdp", FB_ACCUM_NO_REDUCE, "no-reduce"},  {"ddp", FB_ACCUM_NO_REDUCE, "no-reduce"},
      {"zero3", FB_ACCUM_NO_REDUCE, "no-reduce"},
  };
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
    snprintf(what, sizeof what, "%s W=2 accum=%s x3", modes[i].s, modes[i].name);
    fb_status st = run(modes[i].s, W, micro, 1.0, modes[i].m, &got);
    CHECK_OK(st);
    if (st != FB_OK) continue;
    compare(what, &ref, &got, 1e-6);
    if (modes[i].m == FB_ACCUM_REDUCE || modes[i].m == FB_ACCUM_NO_RESHARD) {
      /* these all sum (g_r0 summed over ranks) + (g_r1 summed over ranks) + ... */
      if (!have_first) {
        first = got;
        have_first = true;
        continue;
      }
      snprintf(what, sizeof what, "%s %s vs %s reduce (same order)", modes[i].s, modes[i].name,
               modes[0].s);
      compare(what, &first, &got, 0);
    }
    fb_run_result_free(&got);
  }
  if (have_first) fb_run_result_free(&first);
  fb_run_result_free(&ref);
  return fb_test_done("test_equivalence");
}
