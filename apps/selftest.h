/* `fsdpbench selftest --backend cuda`: every CUDA kernel against the cpu kernels on random
 * inputs (fp32 and bf16), then a 3-step equivalence of every strategy against `single`.
 * It does not define what the kernels compute (kernels.h) nor how a run works (runner.h). */
#ifndef FB_SELFTEST_H
#define FB_SELFTEST_H

/* argv may start with the program name and "selftest". Returns the process exit code:
 * 0 everything passed, 1 a check failed or an error occurred, 2 bad flags,
 * 77 skipped (this build has no CUDA or no GPU is visible; one line says why). */
int fb_selftest_main(int argc, char **argv);

#endif
