/* Mixed precision executed on the CPU (bf16 parameters and compute from fp32 masters, the CUDA
 * kernels' rounding rules): every registered strategy at W = 2 ends bitwise equal to `single`
 * running the same micro-batches with an fp32 reduction (with a bf16 reduction: bitwise equal
 * among themselves, within 1e-4 of single), and the bf16 loss curve stays
 * within 1% of the fp32 curve at every step of a 20-step run. It does not test the kernels one
 * by one (test_ops_bf16 does). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "run_config.h"
#include "engine/exec/runner.h"
#include "strategies/strategy.h"

enum { STEPS = 20, GB = 8, SEQ = 32 };

static fb_status run(const char *strategy, int world, fb_dtype pdt, fb_dtype rdt, int steps,
                     fb_run_result *res) {
  fb_run_config c;
  test_config(&c, "cpu", strategy, world);
  c.batch = GB;
  c.micro_batch = GB / 2; /* single runs the two ranks' micro-batches one after the other */
  c.seq = SEQ;
  c.steps = steps;
  c.seed = 11;
  c.param_dtype = pdt;
  c.reduce_dtype = rdt;
  return test_run(&c, res);
}

static bool same(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void strategies_agree(fb_dtype rdt) {
  fb_run_result ref;
  fb_status st = run("single", 1, FB_BF16, rdt, 4, &ref);
  CHECK_OK(st);
  if (st != FB_OK) return;
  double first = NAN; /* strategies sum in the same order: bitwise equal among themselves */
  for (int i = 0; fb_strategy_at(i); i++) {
    const char *name = fb_strategy_at(i)->name;
    if (!strcmp(name, "single")) continue;
    fb_run_result got;
    st = run(name, 2, FB_BF16, rdt, 4, &got);
    CHECK(st == FB_OK, "%s bf16: %s", name, fb_error_msg());
    if (st != FB_OK) continue;
    bool eq = same(ref.param_sum, got.param_sum);
    for (int s = 0; s < 4; s++) eq = eq && same(ref.loss[s], got.loss[s]);
    /* a bf16 reduction rounds each rank's contribution before the sum, single does not */
    if (rdt == FB_F32)
      CHECK(eq, "%s W=2 bf16: param sum %.17g, single %.17g", name, got.param_sum, ref.param_sum);
    else
      CHECK(fabs(got.param_sum - ref.param_sum) <= 1e-4 * fabs(ref.param_sum),
            "%s W=2 bf16 reduce: param sum %.17g, single %.17g", name, got.param_sum,
            ref.param_sum);
    if (isnan(first)) first = got.param_sum;
    CHECK(same(first, got.param_sum), "%s W=2 bf16: param sum %.17g, other strategies %.17g",
          name, got.param_sum, first);
    printf("bf16 params, %s reduce: %-7s W=2 param sum %.17g  %s\n", fb_dtype_name(rdt), name,
           got.param_sum, eq ? "bitwise = single" : "within 1e-4 of single");
    fb_run_result_free(&got);
  }
  fb_run_result_free(&ref);
}

static void loss_tracks_fp32(void) {
  fb_run_result a, b;
  fb_status sa = run("fsdp", 2, FB_F32, FB_F32, STEPS, &a);
  fb_status sb = run("fsdp", 2, FB_BF16, FB_F32, STEPS, &b);
  CHECK_OK(sa);
  CHECK_OK(sb);
  if (sa != FB_OK || sb != FB_OK) return;
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    double rel = fabs(b.loss[s] - a.loss[s]) / a.loss[s];
    if (rel > worst) worst = rel;
    CHECK(rel <= 0.01, "step %d: bf16 loss %.6f vs fp32 %.6f (%.2f%%)", s, b.loss[s], a.loss[s],
          100 * rel);
  }
  CHECK(b.loss[STEPS - 1] < 0.8 * b.loss[0], "bf16 loss falls: %.4f -> %.4f", b.loss[0],
        b.loss[STEPS - 1]);
  printf("fsdp W=2 %d steps: fp32 loss %.4f -> %.4f, bf16 %.4f -> %.4f, worst step %.3f%% apart\n",
         STEPS, a.loss[0], a.loss[STEPS - 1], b.loss[0], b.loss[STEPS - 1], 100 * worst);
  fb_run_result_free(&a);
  fb_run_result_free(&b);
}

int main(void) {
  strategies_agree(FB_F32);
  strategies_agree(FB_BF16);
  loss_tracks_fp32();
  return fb_test_done("test_bf16_train");
}
