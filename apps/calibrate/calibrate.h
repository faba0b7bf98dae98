/* `fsdpbench calibrate`: measures this machine with the executor's own code paths (the cpu
 * device's kernels, the local communicator) and writes a hardware profile the simulator uses
 * to predict the cpu executor. It does not simulate anything itself. */
#ifndef FB_CALIBRATE_H
#define FB_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "../engine/core/status.h"
#include "../engine/sim/hardware.h"

/* argv[0] is the subcommand name ("calibrate"); flags follow:
 *   --out FILE       profile to write (default models/hardware/cpu.yaml in the data root);
 *                    an existing FILE is refused (exit 2) unless --force
 *   --force          overwrite an existing FILE
 *   --threads N      threads the cpu device uses (default: all cores)
 *   --repeat N       N runs, the median of each figure (their spread is checked)
 *   --retries N      measure again up to N times when the machine is loaded (default 2)
 *   --ignore-load    measure and write even on a loaded machine (the header says so)
 *   --quick          shorter measurements (tests)
 * Prints a table of what it measured. Returns the process exit code: 0; 1 when the machine
 * was too loaded or a fitted figure is implausible (nothing written); else the fb_status. */
int fb_calibrate_main(int argc, char **argv);

typedef struct fb_calib_opts {
  int threads;   /* >= 1 */
  bool quick;
} fb_calib_opts;

/* What a calibration run saw besides the profile's figures: the raw measurements before any
 * clamp and the quality of each fit, for fb_calibrate_check_fit. NAN = not measured by this
 * run (the check that needs it is skipped; e.g. --comm mpi measures no compute). */
typedef struct fb_calib_diag {
  double fma_peak;        /* FLOP/s of the register-only FMA loop */
  double nominal_peak;    /* FLOP/s ceiling: online CPUs x clock x SIMD FLOP/cycle (a datasheet
                             figure with headroom for turbo; NAN when the clock is unknown) */
  double best_gemm;       /* FLOP/s of the fastest micro-benchmark GEMM */
  double micro_gemm_rms;  /* relative RMS residual of the GEMM curve fitted to the micro-
                             benchmarks (before the in-step refit replaces it) */
  double gemm_rms;        /* relative RMS residual of the profile's (in-step) GEMM curve */
  double attn_raw;        /* attention efficiency before its cap at 1 */
  double triad;           /* B/s, STREAM triad (the profile's mem_bw) */
  double add_bw;          /* B/s, the device's add kernel (mem_efficiency = add_bw / triad) */
  double add_bytes;       /* bytes the add kernel's two arrays take */
  double llc_bytes;       /* the last-level cache (sysconf; NAN when unknown) */
  double overlap_raw;     /* GEMM slowdown beside a memory stream before its clamp to [1, 100] */
  double comm_rms;        /* relative RMS residual of the communicator's bandwidth fit (the
                             collective whose bandwidth the profile took) */
  double kernel_rms;      /* relative RMS residual of the in-step kernel_gbs rates against each
                             traced step's time of the same kernel (time-weighted) */
  double split_gemm_rms;  /* the same three for the split figures (1-thread ranks at once) */
  double split_attn_raw;
  double split_kernel_rms;
} fb_calib_diag;

/* Every field NAN. */
void fb_calib_diag_init(fb_calib_diag *d);

/* Plausibility limits (calibrate_check.c says why each). */
#define FB_CALIB_MAX_RMS 0.25        /* relative RMS residual of any compute fit */
#define FB_CALIB_MAX_COMM_RMS 1.00   /* ... of the communicator's fit (see calibrate_check.c) */
#define FB_CALIB_MIN_FRACTION 0.01   /* of a ceiling: slower than this is a stalled run */
#define FB_CALIB_CEILING_TOL 1.05    /* a rate may exceed its measured ceiling by timing noise */
#define FB_CALIB_MAX_ADD_OVER_TRIAD 2.0  /* add kernel vs STREAM triad */
#define FB_CALIB_GEMM_MIN_S 192.0    /* micro-benchmark GEMMs fitted: cbrt(m n k) at least */
#define FB_CALIB_MAX_CACHE_OVER_TRIAD 16.0 /* cache-resident kernels / copies vs triad */
#define FB_CALIB_MAX_LAUNCH_S 100e-6 /* a 16-element kernel */
#define FB_CALIB_MAX_LAT_S 0.1       /* a collective's latency */

/* One rejected figure: prints as "calibrate: rejected <figure>: <value> (<reason>; allowed
 * <allowed>)". */
typedef struct fb_calib_reject {
  char figure[64];   /* the profile key ("gemm_max_efficiency", "kernel_gbs.adamw") */
  char value[32];    /* in the key's units */
  char reason[200];
  char allowed[96];
} fb_calib_reject;

/* Checks every fitted figure of `hw` (and the raw measurements and fit residuals in `d`)
 * against physical and fit-quality limits: residuals above FB_CALIB_MAX_RMS, rates above
 * their measured ceiling or below FB_CALIB_MIN_FRACTION of it, non-positive latencies,
 * efficiencies outside (0, 1], fitted parameters at a clamp bound. Pure: reads only its
 * arguments. Fills up to `max` rejections and returns how many figures failed (0: plausible;
 * the count may exceed max). `compute` false checks only the communicator figures (--comm
 * mpi takes its compute figures from a base profile). */
int fb_calibrate_check_fit(const fb_hardware *hw, const fb_calib_diag *d, bool compute,
                           fb_calib_reject *rej, int max);
/* The one-line message of a rejection (no newline). */
void fb_calib_reject_line(const fb_calib_reject *r, char *buf, size_t n);

/* ---- the machine's load (calibrate_check.c) ---- */

#define FB_CALIB_MAX_LOAD_SHARE 0.25 /* of the cores calibrate uses, others may keep busy */
#define FB_CALIB_LOAD_WINDOW_S 1.0   /* how long the other processes' CPU use is sampled */
#define FB_CALIB_MAX_SPREAD 1.5      /* max / min of a key figure across --repeat runs */
/* ... of the communicator's bandwidth: its collectives between two threads scatter 1.5-1.8x
 * across repeats on an idle 2-vCPU VM (the profile takes the median of the repeats) */
#define FB_CALIB_MAX_COMM_SPREAD 2.5
#define FB_CALIB_RETRY_PAUSE_S 10    /* between attempts on a loaded machine */

typedef struct fb_calib_load {
  double loadavg;  /* 1-minute load average as read (or as FSDPBENCH_FAKE_LOADAVG says) */
  double own;      /* this job's own runnable threads in the same 1-minute average */
  double others;   /* loadavg - own */
  double allowed;  /* the most `others` may be */
  int ncpu;        /* online CPUs */
  bool fake;       /* loadavg came from FSDPBENCH_FAKE_LOADAVG */
} fb_calib_load;

/* Measures what other processes run now: the machine's busy CPU time (/proc/stat) less this
 * process's (/proc/self/stat) over FB_CALIB_LOAD_WINDOW_S, in cores (`others`; the 1-minute
 * load average, which lags a minute behind, is kept in `loadavg` for the record), and fills
 * `out` for a calibration on `threads` threads (`own` is used with the test hook only):
 * allowed = idle cores (ncpu - threads, when fewer threads than cores) + FB_CALIB_MAX_LOAD_SHARE
 * x the cores it uses. Test hook: the environment variable FSDPBENCH_FAKE_LOADAVG (a number
 * >= 0), when set, replaces the value read from /proc/loadavg; it is read only here. A
 * malformed value is FB_EUSAGE. */
fb_status fb_calib_load_read(int threads, double own, fb_calib_load *out);
/* "1-minute load average 3.52 (2.91 from other processes, allowed 0.50) on 2 online CPUs" */
void fb_calib_load_describe(const fb_calib_load *l, char *buf, size_t n);

/* This process's runnable threads, averaged the way the kernel averages the load (an
 * exponential 1-minute window), sampled by a background thread between start and stop. */
fb_status fb_calib_own_start(void);
double fb_calib_own_load(void);
void fb_calib_own_stop(void);

/* max / min of n > 0 positive values (1 for n == 1; INFINITY when one is not positive). */
double fb_calib_spread(const double *v, int n);

/* Writes the profile atomically: to a temporary file in FILE's directory, renamed over FILE
 * only when complete (an interrupted calibration leaves no half-written profile). Without
 * `force`, an existing FILE is FB_EUSAGE ("FILE exists ..."), also when it appears while
 * measuring. */
fb_status fb_calib_write_profile(const char *path, const fb_hardware *hw, const char *comment,
                                 bool force);
/* The same for any file: write(f, arg) fills the temporary; a failure leaves nothing. */
typedef fb_status (*fb_calib_writer)(FILE *f, void *arg);
fb_status fb_calib_write_file(const char *path, fb_calib_writer write, void *arg, bool force);
/* FB_EUSAGE with the "exists" message when `path` exists and !force (checked before measuring). */
fb_status fb_calib_check_out(const char *path, bool force);

/* Measures and fills `out` (name "cpu"); prints the table to stdout unless quiet. `diag` (may
 * be NULL) receives the raw measurements and fit residuals. */
fb_status fb_calibrate(const fb_calib_opts *o, bool quiet, fb_hardware *out, fb_calib_diag *diag);

/* Refits hw's GEMM curve, attention efficiency and kernel_gbs on the ops of short single-rank
 * training runs on the `backend` executor (a CPU device: cpu, cpu-opaque) with `threads`
 * threads (calibrate_steps.c), and with 2 or more threads the split figures on runs of
 * `split` (ddp: the same compute ops as single; fsdp: its gathers' and flat copies' kernels
 * too) over as many 1-thread ranks; on a backend other than cpu with a shared-memory
 * communicator, also the communicator's latency from those runs' collectives. Keeps the peak,
 * bandwidths, launch overhead and overlap slowdown. Sets diag's gemm_rms, attn_raw and
 * kernel_rms (diag may be NULL). */
fb_status fb_calibrate_in_step(fb_hardware *hw, const char *backend, const char *split,
                               int threads, bool quick, bool quiet, fb_calib_diag *diag);

/* ---- a GPU (calibrate_device.c) ---- */

/* `calibrate --backend B`: a device that runs the executor's kernels (cuda; cpu-opaque, its
 * stand-in in tests) measured into a profile that extends a base one. */
typedef struct fb_calib_dev_opts {
  char backend[32];
  char out[1024];   /* --out FILE (required) */
  char base[1024];  /* --base PROFILE: the figures not measured ("": by the device's name) */
  char rows[1024];  /* --attention-rows FILE: this program's attention kernels, attention.csv
                       rows with impl "fsdpbench" ("": not written) */
  bool force, quick;
} fb_calib_dev_opts;
/* Returns the exit code: 0 written; 1 the device is not available here (one line) or a
 * measurement failed; 2 bad usage or an existing --out without --force. */
int fb_calibrate_device_main(const fb_calib_dev_opts *o);

/* A figure fitted by fb_calib_fit_figures: a field of the profile and its range. */
typedef struct fb_calib_param {
  const char *key;  /* the profile key, for the table */
  double *v;        /* the field (SI units) */
  double lo, hi;
} fb_calib_param;
/* Coordinate search in log space (multiplicative steps, halved when none helps) over params,
 * minimising the RMS of log(model(i) / measured[i]) over n points; model reads the profile
 * the params point into. Returns that RMS. */
typedef double (*fb_calib_model_fn)(void *ctx, int i);
double fb_calib_fit_figures(fb_calib_param *params, int np, const double *measured, int n,
                            fb_calib_model_fn model, void *ctx);

/* rate(s) = peak * E * s / (s + h) fitted to n points (least squares on log rate, point i
 * weighted by w[i], or equally where w is NULL); E <= 1, h on a grid [1, FB_CALIB_GEMM_H_MAX].
 * Returns the fit's relative RMS residual sqrt(mean((model / rate - 1)^2)), weighted alike. */
#define FB_CALIB_GEMM_H_MAX 65536.0
double fb_calibrate_fit_gemm(const double *s, const double *rate, const double *w, int n,
                             double peak, double *E, double *h);
/* x rounded to 4 significant digits (0 stays 0): what a measured figure is written with. */
double fb_calib_sig4(double x);

/* Sums of one kernel's in-step calls, time = fixed + bytes * per_byte (launch taken off). */
typedef struct fb_calib_line {
  double n, sb, st, sbb, sbt; /* calls, and the sums of bytes, seconds, bytes², bytes·seconds */
  double bmin, bmax;          /* the smallest and largest call's bytes */
} fb_calib_line;
void fb_calib_line_add(fb_calib_line *l, double bytes, double seconds);
/* The kernel's rate (bytes/s) and fixed seconds a call: the least-squares line through its
 * calls where their bytes span at least 1.5x (else, or where the line would run below zero
 * at no bytes, the plain rate: all bytes over all seconds, no fixed time), its rate at most
 * `ceiling` (the device's measured copy bandwidth: a steeper line is noise, and takes the
 * ceiling with the mean of what is left as the fixed time). */
void fb_calib_line_fit(const fb_calib_line *l, double ceiling, double *bw, double *fixed_s);

#endif
