/* The strategy suite on the opaque device: every registered strategy at W = 1, 2, 4 (at W = 2
 * and 4 with two micro-batches per rank in every accumulation mode too), with and without
 * recompute, and with the schedule options its table takes (zero1/zero2's post-step
 * broadcasts and whole-gradient all-reduces, zero1's overlapped reductions), runs on
 * cpu-opaque (memory the host cannot touch, every op checked against the stream and event
 * order, frees checked, collectives staged) and must end with per-step losses and a final
 * parameter sum bitwise equal to the same run on the cpu device. A strategy that reads device
 * memory on the host, forgets an event wait or frees a buffer another stream still uses fails
 * here (test_opaque_faults shows that each of those faults is caught). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "run_config.h"
#include "engine/exec/runner.h"
#include "strategies/strategy.h"

enum { STEPS = 2, SEQ = 32 };

typedef struct variant {
  const char *name;
  int micro_per_rank; /* micro-batches per rank */
  fb_accum_mode accum;
  fb_recompute recompute;
  bool schedule; /* the schedule options the strategy's table takes (--param-sync broadcast,
                    --overlap-grad-reduce, --grad-reduce all-reduce); a strategy without any
                    skips the variant */
} variant;

static const variant variants[] = {
    {.name = "one micro-batch", .micro_per_rank = 1, .accum = FB_ACCUM_REDUCE},
    {.name = "accum reduce", .micro_per_rank = 2, .accum = FB_ACCUM_REDUCE},
    {.name = "accum no-reshard", .micro_per_rank = 2, .accum = FB_ACCUM_NO_RESHARD},
    {.name = "accum no-reduce", .micro_per_rank = 2, .accum = FB_ACCUM_NO_REDUCE},
    {.name = "recompute full", .micro_per_rank = 1, .recompute = FB_RECOMPUTE_FULL},
    {.name = "schedule options", .micro_per_rank = 2, .schedule = true},
};

static fb_status run(const char *backend, const char *strategy, int world, const variant *v,
                     fb_run_result *res) {
  fb_run_config c;
  test_config(&c, backend, strategy, world);
  c.micro_batch = 1;
  c.batch = world * v->micro_per_rank;
  c.seq = SEQ;
  c.steps = STEPS;
  c.seed = 5;
  c.accum = v->accum;
  c.recompute = v->recompute;
  const fb_strategy *s = fb_strategy_lookup(strategy);
  if (v->schedule && s->param_sync) snprintf(c.param_sync, sizeof c.param_sync, "broadcast");
  if (v->schedule && s->grad_all_reduce)
    snprintf(c.grad_reduce, sizeof c.grad_reduce, "all-reduce");
  c.overlap_grad_reduce = v->schedule && s->tunes_grad_overlap;
  return test_run(&c, res);
}

static bool same(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void one(const char *strategy, int world, const variant *v) {
  fb_run_result ref, got;
  fb_status st = run("cpu", strategy, world, v, &ref);
  if (st == FB_EUSAGE) { /* a mode the strategy refuses on every device */
    printf("%-8s W=%d %-18s not available: %s\n", strategy, world, v->name, fb_error_msg());
    return;
  }
  CHECK_OK(st);
  if (st != FB_OK) return;
  st = run("cpu-opaque", strategy, world, v, &got);
  CHECK(st == FB_OK, "%s W=%d %s on cpu-opaque: %s (%s)", strategy, world, v->name,
        fb_error_msg(), fb_error_where());
  if (st != FB_OK) {
    fb_run_result_free(&ref);
    return;
  }
  bool eq = same(ref.param_sum, got.param_sum);
  for (int s = 0; s < STEPS; s++) eq = eq && same(ref.loss[s], got.loss[s]);
  CHECK(eq, "%s W=%d %s: cpu-opaque param sum %.17g loss %.17g, cpu %.17g loss %.17g", strategy,
        world, v->name, got.param_sum, got.loss[STEPS - 1], ref.param_sum, ref.loss[STEPS - 1]);
  printf("%-8s W=%d %-18s param sum %.17g  %s\n", strategy, world, v->name, got.param_sum,
         eq ? "bitwise = cpu" : "DIFFERS");
  fb_run_result_free(&ref);
  fb_run_result_free(&got);
}

int main(void) {
  const int worlds[] = {1, 2, 4};
  for (int i = 0; fb_strategy_at(i); i++) {
    const fb_strategy *s = fb_strategy_at(i);
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
      if (!strcmp(s->name, "single") && worlds[w] != 1) continue; /* one rank by definition */
      for (size_t v = 0; v < sizeof variants / sizeof *variants; v++)
        if ((worlds[w] > 1 || variants[v].micro_per_rank == 1) && /* W=1: the others = single */
            (!variants[v].schedule || s->param_sync || s->tunes_grad_overlap ||
             s->grad_all_reduce))
          one(s->name, worlds[w], &variants[v]);
    }
  }
  return fb_test_done("test_opaque_suite");
}
