/* One GPU out of the box, without a GPU: the automatic world (fb_auto_world) is one rank per
 * device an executing backend has here (1 on a one-GPU machine, the visible GPUs on more), 2
 * on a backend that counts none (the CPU), the profile's devices per node on sim, 1 for a
 * one-rank strategy; and ranks as threads on a communicator that needs a device each (nccl)
 * are refused before any rank starts, in one line with FB_EUSAGE (exit 2) that names --world,
 * --comm and what to run instead (fb_check_own_devices). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine/exec/runner.h"

int main(void) {
  CHECK(fb_auto_world(false, true, 1, 0) == 1, "one GPU: world %d",
        fb_auto_world(false, true, 1, 0));
  CHECK(fb_auto_world(false, true, 8, 0) == 8, "8 GPUs: world %d",
        fb_auto_world(false, true, 8, 0));
  CHECK(fb_auto_world(false, true, 0, 0) == 2, "cpu: world %d", fb_auto_world(false, true, 0, 0));
  CHECK(fb_auto_world(true, true, 4, 0) == 1, "one-rank strategy: world %d",
        fb_auto_world(true, true, 4, 0));
  CHECK(fb_auto_world(false, false, 0, 4) == 4, "sim, 4 per node: world %d",
        fb_auto_world(false, false, 0, 4));
  CHECK(fb_auto_world(false, false, 0, 0) == 8, "sim without a profile: world %d",
        fb_auto_world(false, false, 0, 0));

  /* accepted: a GPU each, one rank, a communicator that shares GPUs, no GPU counted */
  CHECK_OK(fb_check_own_devices(1, "nccl", 1));
  CHECK_OK(fb_check_own_devices(2, "nccl", 2));
  CHECK_OK(fb_check_own_devices(2, "local", 1));
  CHECK_OK(fb_check_own_devices(4, "mpi", 1));
  CHECK_OK(fb_check_own_devices(2, "nccl", 0));
  /* refused: two nccl ranks on one GPU, in one line */
  fb_status st = fb_check_own_devices(2, "nccl", 1);
  CHECK(st == FB_EUSAGE, "2 nccl ranks on 1 GPU: status %d, want FB_EUSAGE", (int)st);
  const char *msg = fb_error_msg();
  CHECK(strstr(msg, "--world 2") && strstr(msg, "--comm nccl") && strstr(msg, "--world 1") &&
            strstr(msg, "--comm local") && !strchr(msg, '\n'),
        "refusal does not name the flags and the way out in one line: %s", msg);
  printf("refusal: %s\n", msg);
  st = fb_check_own_devices(5, "nccl", 4);
  CHECK(st == FB_EUSAGE && strstr(fb_error_msg(), "4 are visible"), "5 ranks on 4 GPUs: %s",
        fb_error_msg());
  return fb_test_done("test_auto_world");
}
