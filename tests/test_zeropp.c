/* zeropp's properties at W = 4 on the cpu backend (debug model, 4 steps):
 *  - switches off: bitwise equal to zero3 (final parameter sum and every loss); hpZ alone too
 *    (its secondary copy holds the very values the primary gather gave);
 *  - switches on: the same bits when run twice; different bits from zero3 (they do something);
 *    every rank computes with the same gathered weights (a probe strategy, zeropp's table under
 *    another name, hashes the gathered parameters at every pre_forward/pre_backward: the hashes
 *    of the four ranks must agree, and with qwZ differ from the unquantised gathers);
 *  - the last loss stays within the bound below, for qwZ, qgZ and all three together.
 *
 * The bound (first order; a stated estimate, not a theorem). Quantisation is symmetric per
 * block, so an element moves by at most half a step: qwZ int8 eps_w = 1/254 of its block's
 * absmax, qgZ int4 twice (inside the node, then across) eps_g = 2 x 1/14. (a) The forward
 * sees weights off by at most eps_w relative, so the loss moves by at most eps_w |L_K|. (b) Each
 * update's direction is off by at most eps_w + eps_g relative (gradients at perturbed weights,
 * perturbed gradients), so the progress the reference made, L_1 - L_K, changes by at most that
 * fraction. Together: |L_K(zeropp) - L_K(zero3)| <= eps_w |L_K| + (eps_w + eps_g)(L_1 - L_K),
 * with L_1, L_K zero3's first and last losses. The acceptance's 5 % of L_K is checked too. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/core/crc32.h"
#include "engine/exec/runner.h"
#include "strategies/strategy.h"

extern const fb_strategy fb_strategy_zeropp;

enum { MAXR = 4 };
static fb_strategy probe;
static uint32_t hash[MAXR];  /* per rank: the crc of every gathered unit, in order */
static int nhashed[MAXR];

static fb_status hash_view(fb_rank *r, int u) {
  if (r->dev->simulated) return FB_OK; /* the runner's memory precheck: no values */
  const size_t bytes = (size_t)r->model->units[u].numel * fb_psz(r);
  unsigned char *h = malloc(bytes);
  if (!h) return FB_ERR(FB_ENOMEM, "probe: out of host memory");
  fb_status st = fb_copy_d2h(r->dev, r->compute, h, r->view[u].params, bytes);
  if (st == FB_OK) hash[r->rank] = fb_crc32(hash[r->rank], h, bytes), nhashed[r->rank]++;
  free(h);
  return st;
}
static fb_status probe_pre_forward(fb_rank *r, int u) {
  FB_TRY(fb_strategy_zeropp.pre_forward(r, u));
  return hash_view(r, u);
}
static fb_status probe_pre_backward(fb_rank *r, int u) {
  FB_TRY(fb_strategy_zeropp.pre_backward(r, u));
  return hash_view(r, u);
}

typedef struct sw {
  bool qw, qg;
  int hpz;
} sw;

static fb_status run(const char *strategy, sw s, fb_run_result *res) {
  fb_run_config c;
  fb_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "debug");
  snprintf(c.strategy, sizeof c.strategy, "%s", strategy);
  snprintf(c.backend, sizeof c.backend, "cpu");
  snprintf(c.comm, sizeof c.comm, "local");
  c.world = MAXR, c.batch = 4, c.seq = 16, c.steps = 3, c.seed = 5;
  c.quiet = true, c.threads = 1;
  c.zeropp_quant_weights = s.qw, c.zeropp_quant_grads = s.qg, c.zeropp_hpz = s.hpz;
  memset(hash, 0, sizeof hash), memset(nhashed, 0, sizeof nhashed);
  fb_status st = fb_run_config_finalize(&c);
  return st != FB_OK ? st : fb_run(&c, res);
}

static bool same_bits(double a, double b) { return !memcmp(&a, &b, sizeof a); }

static bool ranks_agree(void) {
  for (int k = 1; k < MAXR; k++)
    if (hash[k] != hash[0] || nhashed[k] != nhashed[0] || !nhashed[0]) return false;
  return true;
}

/* The bound of the header for the switches in s, against zero3's losses. */
static double bound(const fb_run_result *z3, int K, sw s) {
  const double ew = s.qw ? 1.0 / 254 : 0, eg = s.qg ? 2.0 / 14 : 0;
  return ew * fabs(z3->loss[K - 1]) + (ew + eg) * fabs(z3->loss[0] - z3->loss[K - 1]);
}

/* The last loss of `a` (switches s) against zero3's: within the bound and the acceptance's 5 %. */
static void check_bound(const fb_run_result *z3, const fb_run_result *a, sw s, const char *what) {
  const int K = a->nsteps;
  CHECK(!same_bits(a->param_sum, z3->param_sum), "%s: bitwise equal to zero3", what);
  const double d = fabs(a->loss[K - 1] - z3->loss[K - 1]), B = bound(z3, K, s);
  CHECK(d <= B, "%s: last loss %.6f vs zero3 %.6f: off by %.4g > bound %.4g", what,
        a->loss[K - 1], z3->loss[K - 1], d, B);
  CHECK(d <= 0.05 * fabs(z3->loss[K - 1]), "%s: off by %.4g, more than 5%%", what, d);
  printf("%-24s last loss %.6f (zero3 %.6f): |diff| %.4g <= bound %.4g\n", what, a->loss[K - 1],
         z3->loss[K - 1], d, B);
}

static void check_one(const fb_run_result *z3, sw s, const char *what) {
  fb_run_result a;
  fb_status st = run("zeropp", s, &a);
  CHECK_OK(st);
  if (st != FB_OK) return;
  check_bound(z3, &a, s, what);
  fb_run_result_free(&a);
}

int main(void) {
  probe = fb_strategy_zeropp;
  probe.name = "zeropp_probe";
  probe.pre_forward = probe_pre_forward;
  probe.pre_backward = probe_pre_backward;
  CHECK(fb_strategy_register(&probe), "register the probe");

  fb_run_result z3, off, hpz, pr;
  CHECK_OK(run("zero3", (sw){0}, &z3));
  CHECK_OK(run("zeropp", (sw){0}, &off));
  CHECK_OK(run("zeropp", (sw){.hpz = 2}, &hpz));
  const int K = z3.nsteps;
  bool eq_off = same_bits(off.param_sum, z3.param_sum), eq_hpz = same_bits(hpz.param_sum, z3.param_sum);
  for (int k = 0; k < K; k++) {
    eq_off = eq_off && same_bits(off.loss[k], z3.loss[k]);
    eq_hpz = eq_hpz && same_bits(hpz.loss[k], z3.loss[k]);
  }
  CHECK(eq_off, "switches off: %.17g, zero3 %.17g (want bitwise)", off.param_sum, z3.param_sum);
  CHECK(eq_hpz, "hpZ 2 alone: %.17g, zero3 %.17g (want bitwise)", hpz.param_sum, z3.param_sum);

  /* every rank gathers the same weights: unquantised, then with all three switches, twice */
  CHECK_OK(run("zeropp_probe", (sw){0}, &pr));
  const uint32_t plain = hash[0];
  CHECK(ranks_agree(), "switches off: the ranks' gathered weights differ");
  fb_run_result_free(&pr);
  const sw all = {.qw = true, .qg = true, .hpz = 2};
  fb_run_result a1, a2;
  CHECK_OK(run("zeropp_probe", all, &a1));
  const uint32_t h1 = hash[0];
  CHECK(ranks_agree(), "qwZ+hpZ+qgZ: the ranks' gathered (dequantised) weights differ: %08x %08x "
        "%08x %08x", hash[0], hash[1], hash[2], hash[3]);
  CHECK(h1 != plain, "qwZ: the gathered weights equal the unquantised ones");
  CHECK_OK(run("zeropp_probe", all, &a2));
  CHECK(hash[0] == h1 && same_bits(a1.param_sum, a2.param_sum),
        "qwZ+hpZ+qgZ run twice: gathered weights %08x vs %08x, final sums %.17g vs %.17g", h1,
        hash[0], a1.param_sum, a2.param_sum);
  check_bound(&z3, &a1, all, "qwZ + hpZ 2 + qgZ");
  fb_run_result_free(&a1);
  fb_run_result_free(&a2);
  check_one(&z3, (sw){.qw = true}, "qwZ");
  check_one(&z3, (sw){.qg = true}, "qgZ");
  fb_run_result_free(&z3);
  fb_run_result_free(&off);
  fb_run_result_free(&hpz);
  return fb_test_done("test_zeropp");
}
