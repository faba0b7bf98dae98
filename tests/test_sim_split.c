/* A shared host's split figures (split_ranks, split_gemm_*, split_attention_efficiency,
 * split_kernel_gbs): a profile with them round-trips through fb_hardware_write; a world of at
 * least split_ranks ranks costs GEMMs, attention and listed kernels at the split figures (times
 * split_ranks / world when the ranks outnumber them), a smaller world and a profile without
 * them keep the whole machine's figures over the world, and a kernel missing from the split
 * table falls back to the whole machine's rate over the world. split_ranks 1, split figures
 * without their curve and bad split_kernel_gbs entries are refused with FB_EUSAGE naming the
 * key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "hw_text.h"
#include "engine/sim/cost_model.h"
#include "engine/sim/hardware.h"

static const char *base_yaml =
    "name: t\npeak_tflops_fp32: 1\npeak_tflops_bf16: 1\n" FB_TEST_HW_SHARED_HOST
    "kernel_gbs:\n  gelu_fwd: 10\n  adamw: 8\n";

static const char *split_yaml =
    "split_ranks: 2\nsplit_gemm_max_efficiency: 0.3\nsplit_gemm_half_size: 50\n"
    "split_attention_efficiency: 0.4\nsplit_kernel_gbs:\n  gelu_fwd: 6\n";

static fb_status load_text(const char *extra, fb_hardware *hw) {
  return fb_test_hw_text(base_yaml, extra, hw);
}

static void expect_bad(const char *extra, const char *must_name) {
  fb_test_hw_bad(base_yaml, extra, must_name);
}

static fb_op_cost gemm(double m, double n, double k) {
  return (fb_op_cost){.name = "matmul_fwd", .kind = FB_OP_GEMM, .dtype = FB_F32,
                      .flops = 2 * m * n * k, .bytes = 4 * (m * k + k * n + m * n),
                      .m = (int64_t)m, .n = (int64_t)n, .k = (int64_t)k, .batch = 1};
}

static fb_op_cost mem(const char *name, double bytes) {
  return (fb_op_cost){.name = name, .kind = FB_OP_MEM, .dtype = FB_F32, .bytes = bytes};
}

/* launch + max(compute at peak x share x E s/(s+h), memory at the bandwidth over the world) */
static double gemm_time(const fb_op_cost *c, double E, double h, double share, int world) {
  const double s = cbrt((double)c->m * c->n * c->k);
  const double tc = c->flops / (1e12 * share * E * s / (s + h));
  const double tm = c->bytes / (20e9 / world);
  return 1e-6 + fmax(tc, tm);
}

int main(void) {
  fb_hardware whole, split;
  CHECK_OK(load_text("", &whole));
  CHECK(whole.split_ranks == 0 && whole.nsplit_kernels == 0, "split figures without keys");
  CHECK_OK(load_text(split_yaml, &split));
  CHECK(split.split_ranks == 2 && split.nsplit_kernels == 1, "split: %d ranks, %d kernels",
        split.split_ranks, split.nsplit_kernels);
  CHECK_CLOSE(fb_hardware_split_kernel_bw(&split, "gelu_fwd"), 6e9, 1e-12, 0);
  CHECK(fb_hardware_split_kernel_bw(&split, "adamw") == 0, "adamw is not in the split table");

  /* GEMMs: whole figures over the world below split_ranks; split figures from it on */
  const fb_op_cost g = gemm(512, 512, 512);
  for (int w = 1; w <= 8; w *= 2) {
    const double want_whole = gemm_time(&g, 0.8, 100, 1.0 / w, w);
    CHECK_CLOSE(fb_cost_seconds(&whole, &g, w), want_whole, 1e-12, 0);
    const double want = w < 2 ? want_whole : gemm_time(&g, 0.3, 50, 2.0 / w, w);
    CHECK_CLOSE(fb_cost_seconds(&split, &g, w), want, 1e-12, 0);
  }
  /* the split rate halves when 4 ranks share what 2 were measured on */
  CHECK_CLOSE(fb_cost_seconds(&split, &g, 4) - 1e-6, 2 * (fb_cost_seconds(&split, &g, 2) - 1e-6),
              1e-12, 0);

  /* attention: its efficiency against the rank's own curve */
  fb_op_cost at = g;
  at.kind = FB_OP_ATTN;
  at.name = "attention_fwd";
  CHECK_CLOSE(fb_cost_seconds(&split, &at, 2), gemm_time(&g, 0.3 * 0.4, 50, 1.0, 2), 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&split, &at, 1), gemm_time(&g, 0.8 * 0.5, 100, 1.0, 1), 1e-12, 0);

  /* memory-bound kernels: the split rate where listed, else the whole rate over the world,
   * else the roofline over the world */
  const double B = 6e6;
  fb_op_cost gelu = mem("gelu_fwd", B), adamw = mem("adamw", B), add = mem("residual_add", B);
  CHECK_CLOSE(fb_cost_seconds(&split, &gelu, 1), 1e-6 + B / 10e9, 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&split, &gelu, 2), 1e-6 + B / 6e9, 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&split, &gelu, 4), 1e-6 + B / 3e9, 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&split, &adamw, 2), 1e-6 + B / 4e9, 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&split, &add, 4), 1e-6 + B / 5e9, 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&whole, &gelu, 2), 1e-6 + B / 5e9, 1e-12, 0);

  /* a host whose ranks do not share it ignores the split figures */
  fb_hardware own = split;
  own.shared_host = false;
  CHECK_CLOSE(fb_cost_seconds(&own, &g, 4), gemm_time(&g, 0.8, 100, 1.0, 1), 1e-12, 0);

  /* a profile with split figures writes and reads back the same */
  fb_hardware back;
  CHECK_OK(fb_test_hw_roundtrip(&split, &back));
  CHECK(back.split_ranks == 2 && back.nsplit_kernels == 1 && back.nkernels == 2,
        "read back: %d ranks, %d split kernels, %d kernels", back.split_ranks,
        back.nsplit_kernels, back.nkernels);
  CHECK_CLOSE(back.split_gemm_max_eff, 0.3, 1e-12, 0);
  CHECK_CLOSE(back.split_gemm_half_size, 50, 1e-12, 0);
  CHECK_CLOSE(back.split_attn_eff, 0.4, 1e-12, 0);
  CHECK_CLOSE(fb_hardware_split_kernel_bw(&back, "gelu_fwd"), 6e9, 1e-12, 0);
  CHECK_OK(fb_test_hw_roundtrip(&whole, &back));
  CHECK(back.split_ranks == 0 && back.nsplit_kernels == 0, "whole profile gained a split");

  /* refusals */
  expect_bad("split_ranks: 1\nsplit_gemm_max_efficiency: 0.3\nsplit_gemm_half_size: 50\n"
             "split_attention_efficiency: 0.4\n", "split_ranks");
  expect_bad("split_ranks: 2\n", "split_gemm_max_efficiency");
  expect_bad("split_ranks: 2\nsplit_gemm_max_efficiency: 1.5\nsplit_gemm_half_size: 50\n"
             "split_attention_efficiency: 0.4\n", "split_gemm_max_efficiency");
  expect_bad("split_kernel_gbs:\n  gelu_fwd: -1\n", "split_kernel_gbs.gelu_fwd");
  expect_bad("split_kernel_gbs:\n  gelu_fwd: 1\n  gelu_fwd: 2\n", "gelu_fwd");
  expect_bad("split_kernel_gbs: 3\n", "split_kernel_gbs");
  return fb_test_done("test_sim_split");
}
