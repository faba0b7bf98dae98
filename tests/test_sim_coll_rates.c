/* The local communicator's per-kind in-step rates (coll_gbs): a profile with them round-trips
 * through fb_hardware_write; a listed kind costs launch + barriers x latency + the
 * shared-memory algorithm's bytes over its own rate, an unlisted kind keeps intra_bw (x
 * collective_efficiency); a table on a profile whose collectives are not shared_memory, a name
 * that is no collective and a rate <= 0 are refused with FB_EUSAGE naming the key. */
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
    "name: t\npeak_tflops_fp32: 1\npeak_tflops_bf16: 1\n" FB_TEST_HW_SHARED_HOST;

static const char *rates_yaml = "coll_gbs:\n  reduce_scatter: 8\n  all_gather: 2\n";

/* launch 1 us + barriers x 10 us + bytes the W ranks move (cost_model.c) over bw */
static double expect(fb_coll c, double payload, int world, double bw) {
  return 1e-6 + fb_cost_shared_memory_barriers(c) * 10e-6 +
         fb_cost_shared_memory_bytes(c, payload, world) / bw;
}

static void check_costs(const fb_hardware *hw, const char *what) {
  const double S = 4 << 20;
  CHECK_CLOSE(fb_cost_collective(hw, FB_COLL_REDUCE_SCATTER, S, 2),
              expect(FB_COLL_REDUCE_SCATTER, S, 2, 8e9), 1e-12, 0);
  CHECK_CLOSE(fb_cost_collective(hw, FB_COLL_ALL_GATHER, S, 4),
              expect(FB_COLL_ALL_GATHER, S, 4, 2e9), 1e-12, 0);
  /* not listed: intra_bw 4 GB/s x collective_efficiency 1 */
  CHECK_CLOSE(fb_cost_collective(hw, FB_COLL_ALL_REDUCE, S, 2),
              expect(FB_COLL_ALL_REDUCE, S, 2, 4e9), 1e-12, 0);
  printf("%s: reduce_scatter %.3f ms, all_gather %.3f ms, all_reduce %.3f ms\n", what,
         1e3 * fb_cost_collective(hw, FB_COLL_REDUCE_SCATTER, S, 2),
         1e3 * fb_cost_collective(hw, FB_COLL_ALL_GATHER, S, 4),
         1e3 * fb_cost_collective(hw, FB_COLL_ALL_REDUCE, S, 2));
}

int main(void) {
  fb_hardware plain, hw;
  CHECK_OK(fb_test_hw_text(base_yaml, "", &plain));
  CHECK(plain.ncoll_rates == 0, "coll_gbs without the key: %d entries", plain.ncoll_rates);
  CHECK_OK(fb_test_hw_text(base_yaml, rates_yaml, &hw));
  CHECK(hw.ncoll_rates == 2, "coll_gbs: %d entries", hw.ncoll_rates);
  CHECK_CLOSE(fb_hardware_coll_bw(&hw, "reduce_scatter"), 8e9, 1e-12, 0);
  CHECK_CLOSE(fb_hardware_coll_bw(&hw, "all_reduce"), 0, 0, 0);
  check_costs(&hw, "loaded");
  /* without the table every kind is at intra_bw */
  CHECK_CLOSE(fb_cost_collective(&plain, FB_COLL_REDUCE_SCATTER, 1 << 20, 2),
              expect(FB_COLL_REDUCE_SCATTER, 1 << 20, 2, 4e9), 1e-12, 0);

  fb_hardware back;
  CHECK_OK(fb_test_hw_roundtrip(&hw, &back));
  CHECK(back.ncoll_rates == 2, "read back: %d entries", back.ncoll_rates);
  check_costs(&back, "read back");

  /* refusals, each naming the key */
  fb_test_hw_bad(base_yaml, "coll_gbs:\n  reduce_scatter: 0\n", "coll_gbs.reduce_scatter");
  fb_test_hw_bad(base_yaml, "coll_gbs:\n  matmul_fwd: 3\n", "coll_gbs.matmul_fwd");
  fb_test_hw_bad(base_yaml, "coll_gbs:\n  all_gather: 1\n  all_gather: 2\n", "all_gather");
  fb_test_hw_bad(base_yaml, "coll_gbs: 3\n", "coll_gbs");
  {
    /* the same table on a ring_tree profile: it prices nothing there */
    char *ring = strdup(base_yaml);
    char *at = ring ? strstr(ring, "collectives: shared_memory") : NULL;
    CHECK(at != NULL, "base profile names its collectives");
    if (at) {
      memcpy(at, "collectives: ring_tree    ", strlen("collectives: shared_memory"));
      fb_test_hw_bad(ring, rates_yaml, "coll_gbs");
    }
    free(ring);
  }
  return fb_test_done("test_sim_coll_rates");
}
