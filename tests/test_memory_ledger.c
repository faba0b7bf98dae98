/* Memory and communication properties of every strategy on the debug model (cpu, local):
 *  - the collective ledger equals theory per rank-step: ddp all-reduces 2 x the flat gradient,
 *    fsdp / yafsdp gather twice and reduce-scatter once the padded flat units, zero3
 *    broadcasts twice and reduces once the real parameters; the sharded strategies add the
 *    exact-norm bins (one all-reduce of 512 u64);
 *  - memory returns to its post-setup state after every step (nothing leaks across steps);
 *  - fsdp's peak <= sharded state + (params of root + current + in-flight units) + (grads of
 *    root + current unit) + activations + scratch; yafsdp's gathered and unsharded-gradient
 *    bytes are allocated once and never change (2 x largest unit params, 2 x largest block +
 *    root grads); ddp's peak >= single's;
 *  - exposed comm <= comm and overlap in [0, 1] on every step of every rank. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "run_config.h"
#include "strategies/strategy.h"
#include "engine/exec/runner.h"
#include "strategies/common.h"

static fb_status run(const char *strategy, int world, int batch, fb_run_result *res) {
  fb_run_config c;
  test_config(&c, "cpu", strategy, world);
  c.batch = batch;
  c.seq = 32;
  c.steps = 3;
  c.mem_snapshot = true; /* keep the whole memory timeline */
  return test_run(&c, res);
}

static void check_ledger(const char *s, const fb_run_result *r) {
  const fb_model *m = &r->model;
  const int W = r->world;
  double flat = 0, padded = 0, real = (double)m->numel;
  for (int u = 0; u < m->nunits; u++) {
    flat += (double)m->units[u].numel;
    padded += (double)fb_round_up(m->units[u].numel, W);
  }
  const double bins = W > 1 ? 2.0 * 2 * FB_NORM_BINS * 8 : 0; /* all-reduce counts 2x */
  double want[FB_NCOLL] = {0};
  if (!strcmp(s, "ddp")) {
    want[FB_COLL_ALL_REDUCE] = W > 1 ? 2 * flat * 4 : 0;
  } else if (!strcmp(s, "zero3")) {
    want[FB_COLL_BROADCAST] = 2 * real * 4;
    want[FB_COLL_REDUCE] = real * 4;
    want[FB_COLL_ALL_REDUCE] = bins;
  } else if (!strcmp(s, "fsdp") || !strcmp(s, "yafsdp") ||
             !strcmp(s, "hsdp") /* on cpu without --mesh: 1 x W, fsdp's collectives */) {
    want[FB_COLL_ALL_GATHER] = 2 * padded * 4;
    want[FB_COLL_REDUCE_SCATTER] = padded * 4;
    want[FB_COLL_ALL_REDUCE] = bins;
  } else if (!strcmp(s, "fsdp2")) {
    /* per-parameter dim-0 shards: P'(u) = sum of rows padded to a multiple of W x cols; the
     * root stays gathered from its forward to its backward */
    double pu[2] = {0, 0}; /* root, blocks */
    for (int i = 0; i < m->nparams; i++) {
      const fb_param *p = &m->params[i];
      pu[p->unit > 0] += (double)fb_round_up(p->rows, W) * (double)p->cols;
    }
    want[FB_COLL_ALL_GATHER] = (2 * pu[1] + pu[0]) * 4;
    want[FB_COLL_REDUCE_SCATTER] = (pu[0] + pu[1]) * 4;
    want[FB_COLL_ALL_REDUCE] = bins;
  } else if (!strcmp(s, "zeropp")) { /* switches off: units padded to a multiple of 2W */
    double padded2 = 0;
    for (int u = 0; u < m->nunits; u++) padded2 += (double)fb_round_up(m->units[u].numel, 2 * W);
    want[FB_COLL_ALL_GATHER] = 2 * padded2 * 4;
    want[FB_COLL_REDUCE_SCATTER] = padded2 * 4;
    want[FB_COLL_ALL_REDUCE] = bins;
  } else if (!strcmp(s, "zero1") || !strcmp(s, "zero2")) {
    want[FB_COLL_ALL_GATHER] = padded * 4;     /* the updated slices, once per step */
    want[FB_COLL_REDUCE_SCATTER] = padded * 4; /* the gradients, once */
    want[FB_COLL_ALL_REDUCE] = bins;
  } else if (!strcmp(s, "single")) {
  } else {
    /* a registered strategy without its formula here is a test failure, not a silent pass */
    CHECK(0, "%s: no communication ledger formula in test_memory_ledger.c: add one", s);
    return;
  }
  /* yafsdp keeps a released unit resident in its buffer until another gather takes it: the
   * backward starts without gathering again what the end of forward left there (at most the
   * root and the last block), so its all-gather ledger sits in [2 psi - those, 2 psi) */
  const double resident = !strcmp(s, "yafsdp")
                              ? (double)(fb_round_up(m->units[0].numel, W) +
                                         fb_round_up(m->units[m->nunits - 1].numel, W)) * 4
                              : 0;
  for (int rk = 0; rk < r->nranks; rk++)
    for (int st = 0; st < r->nsteps; st++)
      for (int c = 0; c < FB_NCOLL; c++) {
        double got = r->ranks[rk].steps[st].coll_bytes[c];
        if (c == FB_COLL_ALL_GATHER && resident > 0)
          CHECK(got < want[c] && got >= want[c] - resident,
                "%s W=%d rank %d step %d all_gather: %.0f bytes, theory [%.0f, %.0f)", s, W, rk,
                st, got, want[c] - resident, want[c]);
        else
          CHECK(got == want[c], "%s W=%d rank %d step %d %s: %.0f bytes, theory %.0f", s, W, rk,
                st, fb_coll_name((fb_coll)c), got, want[c]);
      }
  printf("%-7s W=%d ledger per rank-step: %.3f psi (psi = %.0f params x 4 B)\n", s, W,
         (want[0] + want[1] + want[2] + want[3] + want[4]) / (real * 4), real);
}

static void check_steps(const char *s, const fb_run_result *r) {
  for (int rk = 0; rk < r->nranks; rk++) {
    const fb_rank_result *rr = &r->ranks[rk];
    for (int st = 0; st < r->nsteps; st++) {
      const fb_step_stats *x = &rr->steps[st];
      CHECK(x->exposed_comm <= x->comm + 1e-12 && x->exposed_comm >= 0,
            "%s rank %d step %d: exposed %.6f comm %.6f", s, rk, st, x->exposed_comm, x->comm);
      if (x->comm > 0) {
        double ov = 1 - x->exposed_comm / x->comm;
        CHECK(ov >= 0 && ov <= 1, "%s overlap %.3f", s, ov);
      }
    }
    /* after the last step every transient buffer is back: same bytes as after setup */
    for (int c = 0; c < FB_MEM_NCAT; c++)
      CHECK(rr->mem.cur[c] == rr->mem_setup.cur[c],
            "%s rank %d %s: %lld bytes after the steps, %lld after setup", s, rk,
            fb_mem_cat_name((fb_mem_cat)c), (long long)rr->mem.cur[c],
            (long long)rr->mem_setup.cur[c]);
  }
}

/* yafsdp: no param_full / grad_full allocation or free between setup and the end. */
static void check_yafsdp_constant(const fb_run_result *r) {
  const fb_model *m = &r->model;
  const int W = r->world;
  int64_t max_all = 0, max_block = 0;
  for (int u = 0; u < m->nunits; u++) {
    int64_t p = fb_round_up(m->units[u].numel, W);
    if (p > max_all) max_all = p;
    if (u > 0 && p > max_block) max_block = p;
  }
  const int64_t root = fb_round_up(m->units[0].numel, W);
  for (int rk = 0; rk < r->nranks; rk++) {
    const fb_rank_result *rr = &r->ranks[rk];
    CHECK(rr->mem.peak[FB_MEM_PARAM_FULL] == 2 * max_all * 4 &&
              rr->mem.cur[FB_MEM_PARAM_FULL] == 2 * max_all * 4,
          "yafsdp gathered params: peak %lld cur %lld, want %lld",
          (long long)rr->mem.peak[FB_MEM_PARAM_FULL], (long long)rr->mem.cur[FB_MEM_PARAM_FULL],
          (long long)(2 * max_all * 4));
    CHECK(rr->mem.peak[FB_MEM_GRAD_FULL] == (2 * max_block + root) * 4 &&
              rr->mem.cur[FB_MEM_GRAD_FULL] == (2 * max_block + root) * 4,
          "yafsdp unsharded grads: peak %lld, want %lld",
          (long long)rr->mem.peak[FB_MEM_GRAD_FULL], (long long)((2 * max_block + root) * 4));
    int64_t n = 0, moves = 0;
    const fb_rec_mem *ev = fb_recorder_mems(rr->rec, &n);
    for (int64_t i = 0; i < n; i++)
      if ((ev[i].cat == FB_MEM_PARAM_FULL || ev[i].cat == FB_MEM_GRAD_FULL) && ev[i].delta > 0)
        moves++;
    CHECK(moves == 5, "yafsdp: %lld gathered-buffer allocations, want exactly the 5 "
                      "preallocations", (long long)moves);
  }
}

static void check_fsdp_bound(const fb_run_result *r) {
  const fb_model *m = &r->model;
  const int W = r->world;
  int64_t maxu = 0;
  for (int u = 0; u < m->nunits; u++)
    if (fb_round_up(m->units[u].numel, W) > maxu) maxu = fb_round_up(m->units[u].numel, W);
  const int64_t root = fb_round_up(m->units[0].numel, W);
  const int inflight = r->cfg.max_inflight;
  for (int rk = 0; rk < r->nranks; rk++) {
    const fb_mem_stats *ms = &r->ranks[rk].mem;
    const int64_t sharded = r->ranks[rk].persistent_bytes;
    const int64_t gathered = (root + (1 + inflight) * maxu) * 4;
    /* FSDP1: a unit's per-parameter gradients and the flat gradient assembled from them
     * both exist until the copy (the root's across the whole backward) */
    const int64_t grads = 2 * (root + maxu) * 4;
    const int64_t bound = sharded + gathered + grads + ms->peak[FB_MEM_ACT] +
                          ms->peak[FB_MEM_TEMP] + ms->peak[FB_MEM_COMM] + (64 << 10);
    CHECK(ms->peak_total <= bound, "fsdp rank %d peak %lld > bound %lld", rk,
          (long long)ms->peak_total, (long long)bound);
    CHECK(ms->peak[FB_MEM_PARAM_FULL] <= gathered && ms->peak[FB_MEM_GRAD_FULL] <= grads,
          "fsdp rank %d gathered %lld (<= %lld) grads %lld (<= %lld)", rk,
          (long long)ms->peak[FB_MEM_PARAM_FULL], (long long)gathered,
          (long long)ms->peak[FB_MEM_GRAD_FULL], (long long)grads);
    printf("fsdp W=%d rank %d: peak %.2f MiB <= bound %.2f MiB\n", W, rk,
           ms->peak_total / 1048576.0, bound / 1048576.0);
  }
}

int main(void) {
  int64_t single_peak = 0;
  for (int W = 2; W <= 3; W++) {
    for (int i = 0; fb_strategy_at(i); i++) {
      const fb_strategy *strat = fb_strategy_at(i);
      const char *s = strat->name;
      fb_run_result r;
      /* the one-rank reference runs one rank's share of the batch: same activations per rank */
      const bool one = strat->one_rank;
      fb_status st = run(s, one ? 1 : W, one ? 6 / W : 6, &r);
      CHECK_OK(st);
      if (st != FB_OK) continue;
      check_ledger(s, &r);
      check_steps(s, &r);
      if (one) single_peak = r.ranks[0].mem.peak_total;
      if (!strcmp(s, "ddp"))
        CHECK(r.ranks[0].mem.peak_total >= single_peak, "ddp peak %lld < single peak %lld",
              (long long)r.ranks[0].mem.peak_total, (long long)single_peak);
      if (!strcmp(s, "fsdp")) check_fsdp_bound(&r);
      if (!strcmp(s, "yafsdp")) check_yafsdp_constant(&r);
      fb_run_result_free(&r);
    }
  }
  return fb_test_done("test_memory_ledger");
}
