/* calibrate (quick): every measured figure is positive and within physical bounds (the GEMM
 * curve never beats the FMA peak, the fitted profile validates), the run reports the raw
 * measurements and fit residuals its plausibility check needs, the in-step phase fed the
 * kernel table with the ops a training step issues, the written profile loads back to the
 * same values and the simulator accepts it; bad flags are usage errors. (Whether the fits
 * pass the plausibility check depends on how busy this machine is: test_calibrate_checks.c
 * tests the check on synthetic fits.) */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "apps/calibrate/calibrate.h"
#include "engine/sim/cost_model.h"
#include "engine/sim/hardware.h"

/* fb_calib_line_fit: a kernel's calls as a line in their bytes (the GPU calibration's kernel_us):
 * an exact line comes back; a flat one takes the ceiling rate and the rest as fixed time; calls
 * of one size, too few calls, or a line below zero at no bytes give the plain rate. */
static void line_of(fb_calib_line *l, const double *b, const double *t, int n) {
  memset(l, 0, sizeof *l);
  for (int i = 0; i < n; i++) fb_calib_line_add(l, b[i], t[i]);
}

static void test_line_fit(void) {
  fb_calib_line l;
  double bw, fx;
  const double b[6] = {1e7, 1e7, 1e7, 4e7, 4e7, 4e7};
  double t[6];
  for (int i = 0; i < 6; i++) t[i] = 20e-6 + b[i] / 2e12; /* 20 us + 2 TB/s */
  line_of(&l, b, t, 6);
  fb_calib_line_fit(&l, 4e12, &bw, &fx);
  CHECK_CLOSE(bw, 2e12, 1e-9, 0);
  CHECK_CLOSE(fx, 20e-6, 1e-9, 0);
  for (int i = 0; i < 6; i++) t[i] = 50e-6; /* flat: faster than any copy */
  line_of(&l, b, t, 6);
  fb_calib_line_fit(&l, 4e12, &bw, &fx);
  CHECK_CLOSE(bw, 4e12, 1e-12, 0);
  CHECK_CLOSE(fx, 50e-6 - 2.5e7 / 4e12, 1e-9, 0);
  for (int i = 0; i < 6; i++) t[i] = b[i] / 1e12 - 5e-6; /* below zero at no bytes */
  line_of(&l, b, t, 6);
  fb_calib_line_fit(&l, 4e12, &bw, &fx);
  CHECK_CLOSE(bw, 15e7 / 0.00012, 1e-9, 0);
  CHECK(fx == 0, "fixed %g for a line below zero", fx);
  const double one[4] = {1e7, 1.2e7, 1e7, 1.2e7}, t1[4] = {30e-6, 31e-6, 30e-6, 31e-6};
  line_of(&l, one, t1, 4); /* bytes within 1.5x: no line */
  fb_calib_line_fit(&l, 4e12, &bw, &fx);
  CHECK_CLOSE(bw, 4.4e7 / 122e-6, 1e-9, 0);
  CHECK(fx == 0, "fixed %g without a span", fx);
  line_of(&l, b + 2, t + 2, 3); /* three calls: no line */
  fb_calib_line_fit(&l, 4e12, &bw, &fx);
  CHECK(fx == 0, "fixed %g from three calls", fx);
}

int main(void) {
  test_line_fit();
  fb_calib_opts o = {.threads = 2, .quick = true};
  fb_hardware hw;
  fb_calib_diag diag;
  fb_status st = fb_calibrate(&o, true, &hw, &diag);
  CHECK(st == FB_OK, "calibrate: %s", fb_error_msg());
  if (st != FB_OK) return fb_test_done("test_sim_calibrate");
  CHECK(!strcmp(hw.name, "cpu"), "name %s", hw.name);
  CHECK(hw.peak_fp32 > 1e9 && hw.peak_fp32 < 1e14, "fp32 peak %g", hw.peak_fp32);
  CHECK(hw.gemm_max_eff > 0 && hw.gemm_max_eff <= 1, "gemm efficiency %g", hw.gemm_max_eff);
  CHECK(hw.gemm_half_size >= 1, "half size %g", hw.gemm_half_size);
  CHECK(hw.mem_bw > 1e8 && hw.mem_bw < 1e13, "memory bandwidth %g", hw.mem_bw);
  CHECK(hw.intra_bw > 1e6 && hw.intra_lat >= 0 && hw.intra_lat < 0.1, "local comm %g B/s, %g s",
        hw.intra_bw, hw.intra_lat);
  CHECK(hw.overlap_slowdown >= 1, "slowdown %g", hw.overlap_slowdown);
  CHECK(!hw.host_runs_ahead && hw.shared_host && hw.devices_per_node == 1, "cpu modes");
  CHECK(hw.mem_capacity > ((int64_t)1 << 28), "memory %lld", (long long)hw.mem_capacity);
  CHECK_OK(fb_hardware_validate(&hw, "calibrated"));
  /* the diagnostics: every one measured by a local calibration */
  CHECK(diag.fma_peak > 1e9 && diag.best_gemm > 1e9 && diag.triad > 1e8 && diag.add_bw > 1e8,
        "raw rates: FMA %g, GEMM %g, triad %g, add %g", diag.fma_peak, diag.best_gemm, diag.triad,
        diag.add_bw);
  CHECK(diag.triad == hw.mem_bw, "triad %g, profile %g", diag.triad, hw.mem_bw);
  CHECK(diag.gemm_rms >= 0 && diag.micro_gemm_rms >= 0 && diag.comm_rms >= 0 &&
            diag.kernel_rms >= 0,
        "residuals: in-step %g, micro %g, comm %g, kernels %g", diag.gemm_rms,
        diag.micro_gemm_rms, diag.comm_rms, diag.kernel_rms);
  CHECK(diag.attn_raw > 0 && diag.overlap_raw > 0, "attention %g, overlap %g", diag.attn_raw,
        diag.overlap_raw);
  /* ops only a training step issues (no micro-benchmark has these names): the in-step runs
   * measured them */
  const char *step_ops[] = {"zero_grad", "layernorm_fwd", "gelu_bwd", "adamw", "grad_norm"};
  for (size_t i = 0; i < sizeof step_ops / sizeof *step_ops; i++)
    CHECK(fb_hardware_kernel_bw(&hw, step_ops[i]) > 1e6, "no in-step rate for %s", step_ops[i]);
  const char *path = "/tmp/fb_test_calibrate.yaml";
  CHECK_OK(fb_hardware_write(path, &hw, "test"));
  fb_hardware back;
  CHECK_OK(fb_hardware_load(path, &back));
  CHECK_CLOSE(back.peak_fp32, hw.peak_fp32, 1e-12, 0);
  CHECK_CLOSE(back.gemm_half_size, hw.gemm_half_size, 1e-12, 0);
  CHECK_CLOSE(back.intra_bw, hw.intra_bw, 1e-12, 0);
  /* the model on the calibrated profile: a 1024^3 sgemm between 1 GFLOP/s and the peak */
  fb_op_cost g = {.kind = FB_OP_GEMM, .dtype = FB_F32, .m = 1024, .n = 1024, .k = 1024,
                  .batch = 1, .flops = 2.0 * 1024 * 1024 * 1024, .bytes = 12.0 * 1024 * 1024};
  double t = fb_cost_seconds(&back, &g, 1);
  CHECK(g.flops / t > 1e9 && g.flops / t <= back.peak_fp32, "modelled sgemm rate %g", g.flops / t);
  remove(path);
  /* flags */
  char *bad1[] = {"calibrate", "--threads", "0"};
  CHECK(fb_calibrate_main(3, bad1) == FB_EUSAGE, "--threads 0 accepted");
  char *bad2[] = {"calibrate", "--frobnicate"};
  CHECK(fb_calibrate_main(2, bad2) == FB_EUSAGE, "unknown flag accepted");
  char *bad3[] = {"calibrate", "--retries", "x"};
  CHECK(fb_calibrate_main(3, bad3) == FB_EUSAGE, "--retries x accepted");
  return fb_test_done("test_sim_calibrate");
}
