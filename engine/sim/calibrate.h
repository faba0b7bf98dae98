/* `fsdpbench calibrate`: measures this machine with the executor's own code paths (the cpu
 * device's kernels, the local communicator) and writes a hardware profile the simulator uses
 * to predict the cpu executor. It does not simulate anything itself. */
#ifndef FB_CALIBRATE_H
#define FB_CALIBRATE_H

#include "../core/status.h"
#include "hardware.h"

/* argv[0] is the subcommand name ("calibrate"); flags follow:
 *   --out FILE     profile to write (default models/hardware/cpu.yaml in the data root)
 *   --threads N    threads the cpu device uses (default: all cores)
 *   --quick        shorter measurements (tests)
 * Prints a table of what it measured. Returns the process exit code (0, or the fb_status). */
int fb_calibrate_main(int argc, char **argv);

typedef struct fb_calib_opts {
  int threads;   /* >= 1 */
  bool quick;
} fb_calib_opts;

/* Measures and fills `out` (name "cpu"); prints the table to stdout unless quiet. */
fb_status fb_calibrate(const fb_calib_opts *o, bool quiet, fb_hardware *out);

/* Refits hw's GEMM curve, attention efficiency and kernel_gbs on the ops of short single-rank
 * training runs on the cpu executor with `threads` threads (calibrate_steps.c). Keeps the
 * peak, bandwidths, launch overhead, overlap slowdown and communicator figures. */
fb_status fb_calibrate_in_step(fb_hardware *hw, int threads, bool quick, bool quiet);

/* rate(s) = peak * E * s / (s + h) fitted to n points (least squares on log rate); E <= 1. */
void fb_calibrate_fit_gemm(const double *s, const double *rate, int n, double peak, double *E,
                           double *h);

#endif
