/* The run configuration the C tests start from: the debug model on the CPU backend with the
 * local communicator, quiet, two threads per rank. A test sets what it varies, then calls
 * test_run, which finalizes the configuration and runs it. Header-only; tests only. */
#ifndef FB_TEST_RUN_CONFIG_H
#define FB_TEST_RUN_CONFIG_H
#include <stdio.h>

#include "engine/config/config.h"
#include "engine/exec/runner.h"
#include "strategies/strategy.h"

static inline void test_config(fb_run_config *c, const char *backend, const char *strategy,
                               int world) {
  fb_config_defaults(c);
  snprintf(c->model, sizeof c->model, "debug");
  snprintf(c->strategy, sizeof c->strategy, "%s", strategy);
  snprintf(c->backend, sizeof c->backend, "%s", backend);
  snprintf(c->comm, sizeof c->comm, "local");
  c->world = world;
  c->quiet = true;
  c->threads = 2;
}

static inline fb_status test_run(fb_run_config *c, fb_run_result *res) {
  fb_status st = fb_run_config_finalize(c);
  return st != FB_OK ? st : fb_run(c, res);
}

#endif
