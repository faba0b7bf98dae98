/* The hardware profile's optional per-kernel tables (kernel_gbs, and kernel_us: a kernel's
 * fixed time a call, added to launch + bytes / rate): a profile without them loads
 * and costs memory-bound ops on the bandwidth roofline; with it the profile round-trips through
 * fb_hardware_write, a listed kernel costs launch + bytes / its rate (world-shared on a shared
 * host) while an unlisted one keeps the roofline (or its raw kernel's rate); a profile that
 * extends it keeps the table unless it gives its own; negative, zero, non-numeric, duplicate and
 * non-mapping entries fail with FB_EUSAGE naming the key. */
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
    "name: t\npeak_tflops_fp32: 1\npeak_tflops_bf16: 2\n" FB_TEST_HW_SHARED_HOST;

static fb_status load_text(const char *extra, fb_hardware *hw) {
  return fb_test_hw_text(base_yaml, extra, hw);
}

static void expect_bad(const char *extra, const char *must_name) {
  fb_test_hw_bad(base_yaml, extra, must_name);
}

static fb_op_cost mem_op(const char *name, double bytes) {
  return (fb_op_cost){.name = name, .kind = FB_OP_MEM, .dtype = FB_F32, .bytes = bytes};
}

int main(void) {
  fb_hardware plain, tab;
  /* optional: absent is fine and leaves the table empty */
  CHECK_OK(load_text("", &plain));
  CHECK(plain.nkernels == 0, "no table: %d kernels", plain.nkernels);
  CHECK(fb_hardware_kernel_bw(&plain, "gelu_fwd") == 0, "rate without a table");
  const double bytes = 8e6, launch = 1e-6;
  fb_op_cost gelu = mem_op("gelu_fwd", bytes), add = mem_op("residual_add", bytes);
  CHECK_CLOSE(fb_cost_seconds(&plain, &gelu, 1), launch + bytes / 20e9, 1e-12, 0);

  CHECK_OK(load_text("kernel_gbs:\n  gelu_fwd: 2\n  adamw: 4.5\n", &tab));
  CHECK(tab.nkernels == 2, "%d kernels", tab.nkernels);
  CHECK_CLOSE(fb_hardware_kernel_bw(&tab, "gelu_fwd"), 2e9, 1e-12, 0);
  CHECK_CLOSE(fb_hardware_kernel_bw(&tab, "adamw"), 4.5e9, 1e-12, 0);
  /* a listed kernel runs at its rate (shared host: 1/world of it), others on the roofline */
  CHECK_CLOSE(fb_cost_seconds(&tab, &gelu, 1), launch + bytes / 2e9, 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&tab, &gelu, 4), launch + 4 * bytes / 2e9, 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&tab, &add, 1), launch + bytes / 20e9, 1e-12, 0);
  fb_op_cost noname = mem_op(NULL, bytes);
  CHECK_CLOSE(fb_cost_seconds(&tab, &noname, 1), launch + bytes / 20e9, 1e-12, 0);

  /* round trip */
  char path[] = "/tmp/fb_test_ktab_w_XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  CHECK(fd >= 0, "mkstemps");
  if (fd >= 0) {
    close(fd);
    CHECK_OK(fb_hardware_write(path, &tab, "kernel table"));
    fb_hardware back;
    CHECK_OK(fb_hardware_load(path, &back));
    CHECK(back.nkernels == tab.nkernels, "%d vs %d kernels", back.nkernels, tab.nkernels);
    for (int i = 0; i < back.nkernels && i < tab.nkernels; i++) {
      CHECK(!strcmp(back.kernels[i].name, tab.kernels[i].name), "name %s vs %s",
            back.kernels[i].name, tab.kernels[i].name);
      CHECK_CLOSE(back.kernels[i].bw, tab.kernels[i].bw, 1e-12, 0);
    }
    /* a file extending it keeps its table unless it gives one, which replaces it whole */
    char kid[] = "/tmp/fb_test_ktab_x_XXXXXX.yaml";
    FILE *f = NULL;
    int kfd = mkstemps(kid, 5);
    CHECK(kfd >= 0 && (f = fdopen(kfd, "w")), "mkstemps");
    if (f) {
      fprintf(f, "extends: %s\nmem_bw_gbs: 40\n", path);
      fclose(f);
      CHECK_OK(fb_hardware_load(kid, &back));
      CHECK(back.nkernels == 2, "the base's table dropped: %d kernels", back.nkernels);
      CHECK_CLOSE(fb_hardware_kernel_bw(&back, "adamw"), 4.5e9, 1e-12, 0);
      f = fopen(kid, "w");
      CHECK(f != NULL, "reopen %s", kid);
      if (f) {
        fprintf(f, "extends: %s\nkernel_gbs:\n  scale: 3\n", path);
        fclose(f);
      }
      CHECK_OK(fb_hardware_load(kid, &back));
      CHECK(back.nkernels == 1 && fb_hardware_kernel_bw(&back, "gelu_fwd") == 0,
            "the file's table did not replace the base's: %d kernels", back.nkernels);
      /* an op under its own name that the table lacks is priced as its raw kernel's rate */
      fb_op_cost div = mem_op("grad_predivide", bytes);
      div.raw = "scale";
      CHECK_CLOSE(fb_cost_seconds(&back, &div, 1), launch + bytes / 3e9, 1e-12, 0);
      unlink(kid);
    }
    CHECK_OK(fb_hardware_write(path, &plain, NULL));
    CHECK_OK(fb_hardware_load(path, &back));
    CHECK(back.nkernels == 0, "plain profile gained a kernel table");
    unlink(path);
  }

  /* bad tables */
  expect_bad("kernel_gbs:\n  gelu_fwd: -3\n", "kernel_gbs.gelu_fwd");
  expect_bad("kernel_gbs:\n  gelu_fwd: 0\n", "kernel_gbs.gelu_fwd");
  expect_bad("kernel_gbs:\n  gelu_fwd: fast\n", "kernel_gbs.gelu_fwd");
  expect_bad("kernel_gbs:\n  gelu_fwd: 1\n  gelu_fwd: 2\n", "gelu_fwd");
  expect_bad("kernel_gbs: 3\n", "kernel_gbs");
  expect_bad("kernel_gbs:\n  gelu_fwd: [1, 2]\n", "kernel_gbs");
  /* kernel_us: a listed kernel also takes its fixed time a call (on the table rate or the
   * roofline), written and read back in microseconds; a bad entry names its key */
  fb_hardware fx;
  CHECK_OK(load_text("kernel_gbs:\n  gelu_fwd: 2\nkernel_us:\n  gelu_fwd: 12.5\n"
                     "  residual_add: 3\n", &fx));
  CHECK(fx.nkernel_fixed == 2, "%d fixed times", fx.nkernel_fixed);
  CHECK_CLOSE(fb_hardware_kernel_fixed_s(&fx, "gelu_fwd"), 12.5e-6, 1e-12, 0);
  CHECK(fb_hardware_kernel_fixed_s(&fx, "adamw") == 0, "fixed time of an unlisted kernel");
  CHECK_CLOSE(fb_cost_seconds(&fx, &gelu, 1), launch + 12.5e-6 + bytes / 2e9, 1e-12, 0);
  CHECK_CLOSE(fb_cost_seconds(&fx, &add, 1), launch + 3e-6 + bytes / 20e9, 1e-12, 0);
  fb_hardware fback;
  CHECK_OK(fb_test_hw_roundtrip(&fx, &fback));
  CHECK(fback.nkernel_fixed == 2, "read back %d fixed times", fback.nkernel_fixed);
  CHECK_CLOSE(fb_hardware_kernel_fixed_s(&fback, "residual_add"), 3e-6, 1e-12, 0);
  expect_bad("kernel_us:\n  gelu_fwd: -1\n", "kernel_us.gelu_fwd");
  expect_bad("kernel_us: 4\n", "kernel_us");
  /* validate rejects what load would */
  fb_hardware neg = tab;
  neg.kernels[0].bw = -1;
  fb_status st = fb_hardware_validate(&neg, "mem");
  CHECK(st == FB_EUSAGE && strstr(fb_error_msg(), "kernel_gbs.gelu_fwd"), "validate: %s",
        fb_error_msg());
  return fb_test_done("test_sim_kernel_table");
}
