/* The communication-bound step's mechanisms (engine/sim/contention.c, nccl_model.c) as
 * properties: a GEMM beside a resident collective loses SMs (a large one ~ sm / (sm - CTAs), a
 * one-wave one far more), a memory-bound kernel loses HBM bandwidth, fewer CTAs across nodes
 * cost less, the profile key off gives the flat factor back; the slowest of N ranks grows with
 * N (E[max of N normals] exact at 2 and 1000); NCCL's bus bandwidth across nodes falls with
 * the node count as NVIDIA/nccl#1229 measured (flat at 2 nodes), and is bounded by the node's
 * NICs (nics_per_node x nic_gbps). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine/sim/contention.h"
#include "engine/sim/cost_model.h"
#include "engine/sim/hardware.h"
#include "engine/sim/nccl_model.h"

static fb_op_cost gemm_op(int64_t m, int64_t n, int64_t k) {
  fb_op_cost c = {.name = "matmul_fwd", .kind = FB_OP_GEMM, .dtype = FB_BF16, .m = m, .n = n,
                  .k = k, .batch = 1};
  c.flops = 2.0 * m * n * k;
  c.bytes = (double)(m * k + k * n + m * n) * 2;
  return c;
}

static void test_contention(void) {
  fb_hardware h, a;
  CHECK_OK(fb_hardware_load("h100", &h));
  CHECK_OK(fb_hardware_load("a100", &a));
  CHECK(h.nccl_contention && a.nccl_contention, "GPU profiles turn the contention model on");
  CHECK(fb_contention_ctas(&h, 8) == 24, "8 H100s in a node: 24 CTAs, got %d",
        fb_contention_ctas(&h, 8));
  CHECK(fb_contention_ctas(&h, 64) == 16, "across nodes: 16 CTAs, got %d",
        fb_contention_ctas(&h, 64));
  /* a large GEMM: about the SMs' ratio */
  fb_op_cost big = gemm_op(16384, 16384, 8192);
  double s8 = fb_contention_slowdown(&h, &big, 8), s64 = fb_contention_slowdown(&h, &big, 64);
  CHECK(s8 > 1.1 && s8 < 1.35, "large GEMM beside 24 CTAs: %g (132/108 = 1.22)", s8);
  CHECK(s64 > 1.0 && s64 < s8, "16 CTAs cost less than 24: %g vs %g", s64, s8);
  /* a one-wave GEMM on the split-K library (A100: 108 SMs): its tiles spill into a second wave */
  fb_op_cost one = gemm_op(128 * 9, 256 * 12, 4096);
  double s1 = fb_contention_slowdown(&a, &one, 8), sb = fb_contention_slowdown(&a, &big, 8);
  CHECK(s1 > sb && s1 > 1.3, "one-wave GEMM %g not worse than a large one %g", s1, sb);
  CHECK(s1 <= 2.05, "one-wave GEMM at most ~2x: %g", s1);
  /* a memory-bound kernel: the HBM bandwidth the ring leaves */
  fb_op_cost mem = {.name = "add_fwd", .kind = FB_OP_MEM, .dtype = FB_BF16, .bytes = 1e9};
  double sm = fb_contention_slowdown(&h, &mem, 8);
  double want = 1.0 / (1.0 - fb_contention_hbm_bw(&h, 8) / (h.mem_bw * h.mem_eff));
  CHECK(sm > 1.1, "memory-bound kernel beside a collective: %g", sm);
  CHECK_CLOSE(sm, want, 0.02, 0);
  fb_hardware fast = h;
  fast.nccl_bw_node *= 2; /* a faster ring moves more HBM bytes per second */
  CHECK(fb_contention_slowdown(&fast, &mem, 8) > sm, "more NCCL traffic, more slowdown");
  /* attention: many waves, the SMs' ratio */
  fb_op_cost at = {.name = "attn_fwd", .kind = FB_OP_ATTN, .dtype = FB_BF16, .m = 4096, .k = 128,
                   .flops = 1e12, .bytes = 1e8};
  CHECK_CLOSE(fb_contention_slowdown(&h, &at, 8), 132.0 / 108.0, 1e-9, 0);
  /* off: the flat factor */
  fb_hardware off = h;
  off.nccl_contention = false;
  off.overlap_slowdown = 1.1;
  CHECK_CLOSE(fb_contention_slowdown(&off, &big, 8), 1.1, 1e-12, 0);
  CHECK_CLOSE(fb_contention_slowdown(&off, &mem, 8), 1.1, 1e-12, 0);
}

static void test_stragglers(void) {
  CHECK(fb_expected_max_normal(1) == 0, "one draw: 0");
  CHECK_CLOSE(fb_expected_max_normal(2), 1.0 / sqrt(M_PI), 1e-4, 0);
  CHECK_CLOSE(fb_expected_max_normal(1000), 3.2414, 2e-3, 0);
  fb_hardware h;
  CHECK_OK(fb_hardware_load("h100", &h));
  CHECK(h.rank_speed_sigma > 0, "profile carries rank_speed_sigma");
  CHECK(fb_straggler_factor(&h, 1) == 1.0, "one rank waits for nobody");
  double prev = 1.0;
  const int ns[] = {2, 8, 64, 512, 4096};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    double f = fb_straggler_factor(&h, ns[i]);
    CHECK(f > prev, "slowest of %d ranks %g not above %g", ns[i], f, prev);
    prev = f;
  }
  CHECK(prev < 1.1, "4096 ranks: %g (sigma %g)", prev, h.rank_speed_sigma);
  h.rank_speed_sigma = 0;
  CHECK(fb_straggler_factor(&h, 4096) == 1.0, "sigma 0: lock-step");
}

/* Reduce-scatter bus bandwidth of a 4 GiB buffer over `nodes` 8-GPU nodes. */
static double rs_busbw(const fb_hardware *h, int nodes) {
  const int n = 8 * nodes;
  const double bytes = 4.0 * 1073741824.0;
  fb_nccl_choice c = fb_nccl_predict(h, FB_COLL_REDUCE_SCATTER, bytes, n);
  return bytes / (c.seconds - c.latency_s) * (n - 1) / n;
}

static void test_nccl_scale(void) {
  fb_hardware h, flat;
  CHECK_OK(fb_hardware_load("h100", &h));
  flat = h;
  flat.nccl_net_doubling = 0;
  CHECK_CLOSE(rs_busbw(&h, 2), rs_busbw(&flat, 2), 1e-9, 0);
  double b4 = rs_busbw(&h, 4), b64 = rs_busbw(&h, 64);
  CHECK(b64 < b4, "bus bandwidth falls with nodes: %g -> %g", b4, b64);
  CHECK_CLOSE(b64 / b4, 280.0 / 360.0, 0.03, 0); /* NVIDIA/nccl#1229 (both ring Simple) */
  /* the node's NICs bound the ring: the shipped profiles' graphs sit under their NICs, 4 x 100
   * Gb/s (InternLM's RoCE) carries 50 GB/s a node, and a slower network is never faster */
  fb_hardware none = h;
  none.nics_per_node = 0;
  CHECK_CLOSE(fb_nccl_net_busbw(&h), fb_nccl_net_busbw(&none), 1e-12, 0);
  fb_hardware slow = h;
  slow.nics_per_node = 4;
  slow.nic_bw = 100e9 / 8;
  CHECK_CLOSE(fb_nccl_net_busbw(&slow), 50e9, 1e-9, 0);
  const double GiB = 1073741824.0;
  CHECK(fb_nccl_predict(&slow, FB_COLL_ALL_GATHER, GiB, 32).seconds >
            3 * fb_nccl_predict(&h, FB_COLL_ALL_GATHER, GiB, 32).seconds,
        "4 x 100 Gb/s against 8 x 400 Gb/s");
  CHECK(fb_nccl_predict(&slow, FB_COLL_ALL_GATHER, GiB, 8).seconds ==
            fb_nccl_predict(&h, FB_COLL_ALL_GATHER, GiB, 8).seconds,
        "one node does not use the NICs");
  /* and the ring latency grows with the ranks: a small all-gather costs more on more nodes */
  fb_nccl_choice s16 = fb_nccl_predict(&h, FB_COLL_ALL_GATHER, 1 << 20, 16);
  fb_nccl_choice s256 = fb_nccl_predict(&h, FB_COLL_ALL_GATHER, 1 << 20, 256);
  CHECK(s256.latency_s > 5 * s16.latency_s, "ring latency linear in ranks: %g vs %g",
        s256.latency_s, s16.latency_s);
}

int main(void) {
  test_contention();
  test_stragglers();
  test_nccl_scale();
  return fb_test_done("test_sim_mechanisms");
}
