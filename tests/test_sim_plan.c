/* Whole simulated runs through the runner: predicted peak memory equals the executed one per
 * category (cpu vs sim, every strategy); more network bandwidth never slows a step; more ranks
 * never raise the per-rank sharded state; a 70B x 1024 step simulates in bounded time; plan
 * lists every strategy, drops what does not fit and ranks the rest by step time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "engine/config/config.h"
#include "engine/exec/runner.h"
#include "engine/sim/hardware.h"
#include "apps/plan.h"
#include "strategies/strategy.h"

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static fb_status config(fb_run_config *c, const char *model, const char *strategy,
                        const char *backend, const char *hw, int world, int batch, int seq,
                        int steps) {
  fb_config_defaults(c);
  snprintf(c->model, sizeof c->model, "%s", model);
  snprintf(c->strategy, sizeof c->strategy, "%s", strategy);
  snprintf(c->backend, sizeof c->backend, "%s", backend);
  snprintf(c->comm, sizeof c->comm, "%s", strcmp(backend, "sim") ? "local" : "sim");
  snprintf(c->hardware, sizeof c->hardware, "%s", hw);
  c->world = world;
  c->batch = batch;
  c->seq = seq;
  c->steps = steps;
  c->quiet = true;
  c->threads = 2;
  return fb_run_config_finalize(c);
}

/* Every data-parallel strategy of the registry (the one-rank reference is not one). */
static const char *strategies[32];
static int NSTRAT;
static void load_strategies(void) {
  for (int i = 0; fb_strategy_at(i) && NSTRAT < 32; i++)
    if (!fb_strategy_at(i)->one_rank) strategies[NSTRAT++] = fb_strategy_at(i)->name;
}

/* cpu (executed) and sim (predicted) peaks of rank 0 agree byte for byte, per category. */
static void check_memory_equal(void) {
  for (int si = 0; si < NSTRAT; si++) {
    fb_run_config ce, cs;
    CHECK_OK(config(&ce, "debug", strategies[si], "cpu", "cpu", 2, 4, 32, 2));
    CHECK_OK(config(&cs, "debug", strategies[si], "sim", "cpu", 2, 4, 32, 2));
    fb_run_result re, rs;
    fb_status a = fb_run(&ce, &re), b = fb_run(&cs, &rs);
    CHECK(a == FB_OK && b == FB_OK, "%s: run failed: %s", strategies[si], fb_error_msg());
    if (a == FB_OK && b == FB_OK) {
      CHECK(rs.predicted && !re.predicted, "predicted flags");
      const fb_mem_stats *me = &re.ranks[0].mem, *ms = &rs.ranks[0].mem;
      CHECK(me->peak_total == ms->peak_total, "%s: peak executed %lld, predicted %lld",
            strategies[si], (long long)me->peak_total, (long long)ms->peak_total);
      for (int c = 0; c < FB_MEM_NCAT; c++)
        CHECK(me->peak[c] == ms->peak[c] && me->at_peak[c] == ms->at_peak[c],
              "%s: category %s: executed peak %lld at-peak %lld, predicted %lld / %lld",
              strategies[si], fb_mem_cat_name((fb_mem_cat)c), (long long)me->peak[c],
              (long long)me->at_peak[c], (long long)ms->peak[c], (long long)ms->at_peak[c]);
      CHECK(me->n_alloc == ms->n_alloc, "%s: %lld allocations executed, %lld predicted",
            strategies[si], (long long)me->n_alloc, (long long)ms->n_alloc);
      CHECK(rs.ranks[0].steps[1].wall > 0, "%s: predicted step time %g", strategies[si],
            rs.ranks[0].steps[1].wall);
    }
    if (a == FB_OK) fb_run_result_free(&re);
    if (b == FB_OK) fb_run_result_free(&rs);
  }
}

static double sim_step(const char *model, const char *strategy, const char *hw, int world,
                       int batch, int seq, int64_t *persistent) {
  fb_run_config c;
  fb_status st = config(&c, model, strategy, "sim", hw, world, batch, seq, 2);
  CHECK(st == FB_OK, "config %s %s: %s", model, strategy, fb_error_msg());
  if (st != FB_OK) return NAN;
  fb_run_result r;
  st = fb_run(&c, &r);
  CHECK(st == FB_OK, "sim %s %s %s W=%d: %s", model, strategy, hw, world, fb_error_msg());
  if (st != FB_OK) return NAN;
  double t = r.ranks[0].steps[r.nsteps - 1].wall;
  if (persistent) *persistent = r.ranks[0].persistent_bytes;
  fb_run_result_free(&r);
  return t;
}

static void check_bandwidth_and_ranks(void) {
  /* a profile like h100 with twice the network and NVLink bandwidth */
  fb_hardware hw;
  CHECK_OK(fb_hardware_load("h100", &hw));
  const char *fast = "/tmp/fb_test_sim_plan_fast.yaml";
  hw.inter_bw *= 2;
  hw.intra_bw *= 2;
  snprintf(hw.name, sizeof hw.name, "h100-fast");
  CHECK_OK(fb_hardware_write(fast, &hw, "test: h100 with doubled links"));
  for (int si = 0; si < NSTRAT; si++) {
    for (int w = 8; w <= 64; w *= 8) {
      double slow = sim_step("1B", strategies[si], "h100", w, w, 512, NULL);
      double quick = sim_step("1B", strategies[si], fast, w, w, 512, NULL);
      CHECK(quick <= slow * (1 + 1e-9), "%s W=%d: doubled bandwidth slowed the step %g -> %g",
            strategies[si], w, slow, quick);
    }
    /* per-rank persistent state never grows with the world (constant for replicas) */
    int64_t prev = INT64_MAX;
    for (int w = 2; w <= 256; w *= 4) {
      int64_t p = 0;
      sim_step("1B", strategies[si], "h100", w, w, 128, &p);
      CHECK(p > 0 && p <= prev, "%s: persistent bytes per rank %lld at W=%d, %lld before",
            strategies[si], (long long)p, w, (long long)prev);
      prev = p;
    }
  }
  remove(fast);
}

static void check_scale_time(void) {
  double t0 = wall();
  double step = sim_step("70B", "yafsdp", "h100", 1024, 1024, 512, NULL);
  double t = wall() - t0;
  CHECK(step > 0 && isfinite(step), "70B x 1024 predicted step %g", step);
  CHECK(t < 10.0, "70B x 1024 took %.2f s to simulate (limit 10 s)", t);
  printf("70B x 1024 yafsdp: predicted step %.3f s, simulated in %.3f s\n", step, t);
}

static void check_plan(void) {
  fb_run_config c;
  CHECK_OK(config(&c, "1B", "fsdp", "sim", "h100", 16, 32, 1024, 2));
  fb_plan_row *rows = NULL;
  int n = 0;
  int64_t cap = 0;
  CHECK_OK(fb_plan_run(&c, &rows, &n, &cap));
  CHECK(n >= 7, "only %d candidates", n);
  fb_hardware hw;
  CHECK_OK(fb_hardware_load("h100", &hw));
  CHECK(cap == hw.mem_capacity, "capacity %lld", (long long)cap);
  bool seen[32] = {0};
  int64_t fsdp_reshard = -1, fsdp_keep = -1, ddp = -1;
  for (int i = 0; i < n; i++) {
    for (int si = 0; si < NSTRAT; si++)
      if (!strcmp(rows[i].strategy, strategies[si]) && rows[i].st == FB_OK) seen[si] = true;
    if (rows[i].st != FB_OK) continue;
    CHECK(rows[i].fits == (rows[i].peak_bytes <= cap && rows[i].ooms == 0), "fits flag wrong");
    CHECK(rows[i].step_s > 0 && rows[i].mfu > 0 && rows[i].mfu < 1, "%s %s: step %g mfu %g",
          rows[i].strategy, rows[i].options, rows[i].step_s, rows[i].mfu);
    if (!strcmp(rows[i].strategy, "fsdp") && strstr(rows[i].options, "prefetch on")) {
      if (strstr(rows[i].options, "reshard_after_forward on")) fsdp_reshard = rows[i].peak_bytes;
      if (strstr(rows[i].options, "reshard_after_forward off")) fsdp_keep = rows[i].peak_bytes;
    }
    if (!strcmp(rows[i].strategy, "ddp")) ddp = rows[i].peak_bytes;
  }
  for (int si = 0; si < NSTRAT; si++) CHECK(seen[si], "plan did not run %s", strategies[si]);
  CHECK(fsdp_reshard > 0 && fsdp_keep >= fsdp_reshard, "fsdp reshard on %lld, off %lld",
        (long long)fsdp_reshard, (long long)fsdp_keep);
  CHECK(ddp > fsdp_reshard, "ddp peak %lld not above fsdp's %lld", (long long)ddp,
        (long long)fsdp_reshard);
  /* the printed table ranks by step time and names what does not fit */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fb_plan_print(f, &c, rows, n, ddp - 1); /* a capacity ddp does not fit in */
  fclose(f);
  CHECK(strstr(buf, "does not fit") && strstr(buf, "ddp"), "table:\n%s", buf);
  double prev = 0;
  int ranked = 0;
  for (char *line = strstr(buf, "peak GiB\n"); line && (line = strchr(line, '\n'));) {
    line++;
    int rank;
    char strat[32];
    if (sscanf(line, "%d %31s", &rank, strat) != 2) break;
    /* the step ms column is the 6th number from the end of the line (then tok/s/GPU, MFU,
     * exposed, no overlap and peak), and no overlap is never below it */
    char row[512];
    size_t l = strcspn(line, "\n");
    snprintf(row, sizeof row, "%.*s", (int)l, line);
    char *tok[64];
    int nt = 0;
    for (char *t = strtok(row, " "); t && nt < 64; t = strtok(NULL, " ")) tok[nt++] = t;
    double step_ms = nt >= 6 ? atof(tok[nt - 6]) : -1;
    double no_overlap_ms = nt >= 6 ? atof(tok[nt - 2]) : -1;
    CHECK(step_ms >= prev, "ranked row %d: step %g ms after %g ms", rank, step_ms, prev);
    CHECK(no_overlap_ms >= step_ms - 0.005, "ranked row %d: no overlap %g ms below its step %g ms",
          rank, no_overlap_ms, step_ms);
    prev = step_ms;
    ranked++;
    CHECK(strcmp(strat, "ddp") != 0, "ddp ranked although it does not fit");
  }
  CHECK(ranked >= 3, "only %d ranked rows in:\n%s", ranked, buf);
  free(buf);
  free(rows);
}

/* A candidate whose allocated peak fits but whose caching-allocator model runs out of memory
 * (fragmentation: MPT-70B on 64 A100-40GB at micro-batch 4, fsdp reshard-after-forward: 39.8
 * GiB allocated, 48 GiB reserved) is not ranked: it is listed as not fitting, with its OOMs. */
static void check_plan_oom(void) {
  fb_run_config c;
  fb_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "mpt-70b");
  snprintf(c.strategy, sizeof c.strategy, "fsdp");
  snprintf(c.backend, sizeof c.backend, "sim");
  snprintf(c.comm, sizeof c.comm, "sim");
  snprintf(c.hardware, sizeof c.hardware, "a100-40gb");
  c.world = 64;
  c.batch = 256;
  c.micro_batch = 4;
  c.seq = 2048;
  c.steps = 2;
  c.quiet = true;
  c.recompute = FB_RECOMPUTE_FULL;
  c.param_dtype = FB_BF16;
  c.reduce_dtype = FB_BF16;
  CHECK_OK(fb_run_config_finalize(&c));
  fb_plan_row *rows = NULL;
  int n = 0;
  int64_t cap = 0;
  CHECK_OK(fb_plan_run(&c, &rows, &n, &cap));
  int found = 0;
  for (int i = 0; i < n; i++) {
    const fb_plan_row *r = &rows[i];
    if (r->st != FB_OK || strcmp(r->strategy, "fsdp") ||
        !strstr(r->options, "prefetch on, reshard_after_forward on"))
      continue;
    found++;
    CHECK(r->peak_bytes <= cap && r->ooms > 0 && r->reserved_peak > cap && !r->fits,
          "fsdp: allocated %lld, reserved %lld, capacity %lld, %lld OOMs, fits %d",
          (long long)r->peak_bytes, (long long)r->reserved_peak, (long long)cap,
          (long long)r->ooms, r->fits);
  }
  CHECK(found == 1, "%d fsdp prefetch-on reshard-on rows", found);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fb_plan_print(f, &c, rows, n, cap);
  fclose(f);
  const char *nf = buf ? strstr(buf, "does not fit") : NULL;
  const char *row = nf ? strstr(nf, "fsdp    prefetch on, reshard_after_forward on") : NULL;
  CHECK(row && strstr(row, "out-of-memory error(s)"), "table:\n%s", buf ? buf : "");
  free(buf);
  free(rows);
}

int main(void) {
  load_strategies();
  check_plan_oom();
  check_memory_equal();
  check_bandwidth_and_ranks();
  check_scale_time();
  check_plan();
  return fb_test_done("test_sim_plan");
}
