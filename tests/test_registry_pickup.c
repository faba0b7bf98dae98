/* A strategy registered only in this test ("twin": ddp's hooks under another name) is picked up
 * by everything that enumerates the registry: the configuration accepts it, --help lists it,
 * plan simulates it, and it trains to the reference's final parameters bitwise, as the
 * equivalence suite demands of every registered strategy. It does not test ddp itself. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/exec/runner.h"
#include "apps/plan.h"
#include "strategies/strategy.h"

extern const fb_strategy fb_strategy_ddp;

static fb_strategy twin;

static fb_status config(fb_run_config *c, const char *strategy, const char *backend, int world,
                        int micro) {
  fb_config_defaults(c);
  snprintf(c->model, sizeof c->model, "debug");
  snprintf(c->strategy, sizeof c->strategy, "%s", strategy);
  snprintf(c->backend, sizeof c->backend, "%s", backend);
  c->world = world;
  c->batch = 8;
  c->micro_batch = micro;
  c->seq = 32;
  c->steps = 3;
  c->seed = 9;
  c->quiet = true;
  c->threads = 2;
  return fb_run_config_finalize(c);
}

int main(void) {
  twin = fb_strategy_ddp;
  twin.name = "twin";
  twin.summary = "ddp's hooks under another name (test only)";
  CHECK(fb_strategy_register(&twin), "register");
  CHECK(!fb_strategy_register(&twin), "a name registers once");
  CHECK(fb_strategy_lookup("twin") == &twin, "lookup");
  CHECK(strstr(fb_strategy_names(), "twin") != NULL, "names: %s", fb_strategy_names());

  char *help = NULL;
  size_t hn = 0;
  FILE *f = open_memstream(&help, &hn);
  fb_config_print_help(f, fb_strategy_names());
  fclose(f);
  CHECK(help && strstr(help, "twin"), "--help does not list the new strategy");
  free(help);

  fb_run_config c;
  fb_run_result ref, got;
  CHECK_OK(config(&c, "single", "cpu", 1, 4));
  CHECK_OK(fb_run(&c, &ref));
  CHECK_OK(config(&c, "twin", "cpu", 2, 0));
  fb_status st = fb_run(&c, &got);
  CHECK_OK(st);
  if (st == FB_OK) {
    CHECK(!memcmp(&ref.param_sum, &got.param_sum, sizeof got.param_sum),
          "twin W=2 param sum %.17g, single %.17g", got.param_sum, ref.param_sum);
    printf("twin W=2 final param sum %.17g (single %.17g)\n", got.param_sum, ref.param_sum);
    fb_run_result_free(&got);
  }
  fb_run_result_free(&ref);

  fb_plan_row *rows = NULL;
  int n = 0;
  int64_t cap = 0;
  CHECK_OK(config(&c, "fsdp", "sim", 8, 0));
  snprintf(c.hardware, sizeof c.hardware, "h100");
  CHECK_OK(fb_plan_run(&c, &rows, &n, &cap));
  bool planned = false;
  for (int i = 0; i < n; i++) planned |= !strcmp(rows[i].strategy, "twin") && rows[i].st == FB_OK;
  CHECK(planned, "plan did not simulate the new strategy");
  free(rows);
  return fb_test_done("test_registry_pickup");
}
