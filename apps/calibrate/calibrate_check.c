/* What makes `fsdpbench calibrate` refuse garbage (see calibrate.h): the plausibility check of
 * a run's fitted figures, the machine's load (the 1-minute load average less this process's
 * own runnable threads), the spread of a figure across --repeat runs, and the profile's atomic
 * no-clobber write. It measures nothing itself (calibrate.c, calibrate_comm.c and
 * calibrate_steps.c do); the main flow that uses these is fb_calibrate_main in calibrate.c.
 *
 * Why the limits are what they are (calibrate.h names them):
 *  - FB_CALIB_MAX_COMM_RMS 100 %: the communicator's points are single collectives of a few
 *    hundred microseconds to a few milliseconds between two threads on a shared machine, timed
 *    while GEMM threads compete for the same cores. On the AMD EPYC VM, idle (load average
 *    0.1), one quick calibration in three fitted them with a 35-46 % residual while the fitted
 *    bandwidth stayed within 10 % of the others. On the Intel Xeon VM of 2026-11-26, idle, the
 *    busy points are systematically not linear in the bytes (a 32 MiB collective outlasts the
 *    scheduler's time slice beside the GEMM threads and ran 4-16x an 8 MiB one): 9 of 15 runs
 *    fitted with 68-93 % while their bandwidths stayed within 24.3-29.7 GB/s, and the former
 *    60 % limit refused two calibrations in three there. The limit rejects only a fit that
 *    describes nothing (a loaded machine scatters the points by 2-3x); a bandwidth that moves
 *    between runs is the repeat-spread check's (intra_bw_gbs is one of its key figures), and a
 *    loaded machine the load check's.
 *  - FB_CALIB_MAX_RMS 25 %: a fit whose points scatter by more than a quarter around its curve
 *    does not describe the machine: on an idle machine the in-step GEMM curve fits within
 *    about 5-10 % and each collective's bandwidth within about 10 %; a run that shared its cores
 *    with another job measured some ops at full speed and others at a third of it (residuals
 *    of 50 % and more). The simulator's step time errs by as much as the curve does.
 *  - FB_CALIB_MIN_FRACTION 1 %: no kernel runs at under 1 % of the ceiling measured on the
 *    same machine seconds before unless it was descheduled; a fit that far down is a stall.
 *  - FB_CALIB_CEILING_TOL 5 %: the FMA loop is the machine's compute ceiling; a GEMM may match
 *    it within timing noise but not beat it (then the FMA loop was descheduled and every
 *    efficiency would be measured against a wrong peak).
 *  - FB_CALIB_MAX_ADD_OVER_TRIAD 2: the device's add kernel streams three arrays as STREAM
 *    triad does; in place it skips the write-allocate read triad's store pays (4/3 in theory,
 *    about 1.7 measured on an EPYC). Twice triad means one of the two ran in cache or was
 *    disturbed. When the add kernel's arrays fit the last-level cache (a 2-vCPU slice of a
 *    Xeon reports the socket's 480 MiB L3: 128 MiB of arrays stream at 66 GB/s against a
 *    DRAM triad of 29), the bound is FB_CALIB_MAX_CACHE_OVER_TRIAD instead.
 *  - FB_CALIB_GEMM_MIN_S 192: the micro-benchmark GEMM curve is fitted to the shapes with
 *    cbrt(m n k) >= 192. Below (64^3, 128^3) a product costs the BLAS's threading overhead,
 *    not its rate (7.6 GFLOP/s at 64^3 against 300 at 1024^3 on that Xeon), which
 *    E s / (s + h) cannot follow; the steps' products are larger (the smallest in-step
 *    size is about 200).
 *  - FB_CALIB_MAX_CACHE_OVER_TRIAD 16: kernels whose operands a step keeps in L1/L2 (and the
 *    local communicator's copies of a few MB, in L3) reach above the DRAM triad (about 2x
 *    here), but not above the cache-to-DRAM bandwidth ratio of current CPUs (about 10-20x).
 *  - FB_CALIB_MAX_LAUNCH_S 100 us: a 16-element kernel costs about 0.5 us on the cpu device
 *    (a few us on a GPU); a hundred microseconds is a context switch, not an overhead.
 *  - FB_CALIB_MAX_LAT_S 0.1 s: the slowest collective latency measured here is the MPI
 *    communicator beside compute (about 8 ms, docs/simulator.md); 0.1 s is a stall.
 *  - FB_CALIB_MAX_LOAD_SHARE 0.25: calibration keeps all its cores busy; another job that
 *    holds a quarter of them slows what is measured by up to a quarter, the residual limit.
 *  - FB_CALIB_MAX_SPREAD 1.5: a key figure that changes by half between back-to-back runs of
 *    the same measurement says the machine changed under it (the median would be a coin
 *    toss between an idle and a loaded machine). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../engine/core/files.h"
#include "../engine/core/out_dir.h"
#include "calibrate.h"
#include "calibrate_comm.h"
#include "../engine/sim/cost_model.h"

void fb_calib_diag_init(fb_calib_diag *d) {
  d->fma_peak = d->nominal_peak = d->best_gemm = d->micro_gemm_rms = d->gemm_rms = NAN;
  d->attn_raw = d->triad = d->add_bw = d->overlap_raw = d->comm_rms = d->kernel_rms = NAN;
  d->split_gemm_rms = d->split_attn_raw = d->split_kernel_rms = NAN;
  d->add_bytes = d->llc_bytes = NAN;
}

/* ---- plausibility ------------------------------------------------------------------------- */

typedef struct rejects {
  fb_calib_reject *r;
  int max, n;
} rejects;

__attribute__((format(printf, 5, 6))) static void reject(rejects *R, const char *figure,
                                                         const char *value, const char *allowed,
                                                         const char *fmt, ...) {
  if (R->n < R->max) {
    fb_calib_reject *r = &R->r[R->n];
    snprintf(r->figure, sizeof r->figure, "%s", figure);
    snprintf(r->value, sizeof r->value, "%s", value);
    snprintf(r->allowed, sizeof r->allowed, "%s", allowed);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
  }
  R->n++;
}

static const char *num(char *buf, double v) { /* 4 significant digits, as the profile writes */
  snprintf(buf, 32, "%.4g", v);
  return buf;
}

static bool known(double v) { return !isnan(v); }
static bool pos(double v) { return isfinite(v) && v > 0; }

/* A fit's residual against FB_CALIB_MAX_RMS; figure and value name what was fitted (value
 * NAN: the residual itself is the value). */
static void check_rms_max(rejects *R, const char *figure, double value, double rms,
                          const char *fit, double max) {
  if (!known(rms) || rms <= max) return;
  char v[32], allowed[96];
  snprintf(allowed, sizeof allowed, "a residual <= %.0f %%", 100 * max);
  if (isnan(value)) snprintf(v, sizeof v, "%.0f %%", 100 * rms);
  else num(v, value);
  reject(R, figure, v, allowed, "%s fits its points with a relative RMS residual of %.0f %%", fit,
         100 * rms);
}

static void check_rms(rejects *R, const char *figure, double value, double rms, const char *fit) {
  check_rms_max(R, figure, value, rms, fit, FB_CALIB_MAX_RMS);
}

/* A kernel table's rates: positive, within [1 %, 16 x] of the triad bandwidth. */
static void check_kernels(rejects *R, const char *key, const fb_hw_kernel *k, int n,
                          double triad) {
  char v[32], a[96];
  for (int i = 0; i < n; i++) {
    const double bw = k[i].bw;
    char fig[64];
    snprintf(fig, sizeof fig, "%s.%s", key, k[i].name);
    if (!pos(bw)) {
      reject(R, fig, num(v, bw * 1e-9), "> 0", "not a positive rate");
      continue;
    }
    if (!pos(triad)) continue;
    snprintf(a, sizeof a, "[%.4g, %.4g] GB/s (%.2f to %.0f x triad)",
             FB_CALIB_MIN_FRACTION * triad * 1e-9, FB_CALIB_MAX_CACHE_OVER_TRIAD * triad * 1e-9,
             FB_CALIB_MIN_FRACTION, FB_CALIB_MAX_CACHE_OVER_TRIAD);
    if (bw < FB_CALIB_MIN_FRACTION * triad)
      reject(R, fig, num(v, bw * 1e-9), a, "%.3g %% of the triad bandwidth: a stalled kernel",
             100 * bw / triad);
    else if (bw > FB_CALIB_MAX_CACHE_OVER_TRIAD * triad)
      reject(R, fig, num(v, bw * 1e-9), a,
             "%.3g x the triad bandwidth, above any cache: its timing is broken", bw / triad);
  }
}

/* Shared by the whole machine's curves and the split ones: the half size inside the fit's grid,
 * and attention (its raw efficiency before the cap where known) within (0, 1] of a GEMM of its
 * size. */
static void check_half_attention(rejects *R, const char *half_key, double h, const char *attn_key,
                                 double att) {
  char v[32], a[96];
  if (!(h >= 1) || h >= FB_CALIB_GEMM_H_MAX / 1.05) {
    snprintf(a, sizeof a, "[1, %.0f) (the fit's grid)", FB_CALIB_GEMM_H_MAX / 1.05);
    reject(R, half_key, num(v, h), a,
           "at the fit's clamp bound: the curve never reaches its plateau");
  }
  snprintf(a, sizeof a, "[%.2f, 1] of a GEMM of its size", FB_CALIB_MIN_FRACTION);
  if (!(att >= FB_CALIB_MIN_FRACTION && att <= 1))
    reject(R, attn_key, num(v, att), a,
           att > 1 ? "attention ran faster than a GEMM of its size: the GEMM curve is wrong"
                   : "an efficiency outside (0, 1] or a stalled kernel");
}

/* The split figures: one of split_ranks 1-thread ranks. Its large GEMM runs at most at one
 * core's share of the machine's peak (all cores busy: no single-core turbo) and above 1 % of
 * it; attention within (0, 1] of its own curve; the GEMM curve's residual as the whole
 * machine's, the kernel table's as the communicator's (below). */
static void check_split(rejects *R, const fb_hardware *hw, const fb_calib_diag *d, double triad) {
  char v[32], a[96];
  const double E = hw->split_gemm_max_eff, h = hw->split_gemm_half_size;
  const double core = 1.0 / hw->split_ranks, at1024 = E * 1024 / (1024 + h);
  snprintf(a, sizeof a, "a 1024^3 GEMM at (%.2f, %.2f] of the peak (one core's share)",
           FB_CALIB_MIN_FRACTION * core, FB_CALIB_CEILING_TOL * core);
  if (!(E > 0 && E < 1 && at1024 > FB_CALIB_MIN_FRACTION * core &&
        at1024 <= FB_CALIB_CEILING_TOL * core))
    reject(R, "split_gemm_max_efficiency", num(v, E), a,
           "one of %d 1-thread ranks ran a 1024^3 GEMM at %.3g of the %d-thread peak",
           hw->split_ranks, at1024, hw->split_ranks);
  check_half_attention(R, "split_gemm_half_size", h, "split_attention_efficiency",
                       known(d->split_attn_raw) ? d->split_attn_raw : hw->split_attn_eff);
  check_rms(R, "split_gemm_max_efficiency", E, d->split_gemm_rms, "the split GEMM curve");
  /* the split runs time each rank's kernels beside the other rank's communicator thread on
   * shared cores: like the communicator's collectives, their step-to-step scatter is the
   * scheduler's (5-41 % on the idle Xeon VM), so the communicator's limit */
  check_rms_max(R, "split_kernel_gbs", NAN, d->split_kernel_rms,
                "the split kernel table (each kernel's time step by step)", FB_CALIB_MAX_COMM_RMS);
  check_kernels(R, "split_kernel_gbs", hw->split_kernels, hw->nsplit_kernels, triad);
}

/* peak: positive, under the nominal ceiling, and a ceiling no GEMM beats */
static void check_peak(rejects *R, const fb_hardware *hw, const fb_calib_diag *d) {
  char v[32], a[96];
  const double peak = hw->peak_fp32;
  if (!pos(peak))
    reject(R, "peak_tflops_fp32", num(v, peak * 1e-12), "> 0", "not a positive rate");
  else if (pos(d->nominal_peak) && peak > d->nominal_peak) {
    snprintf(a, sizeof a, "<= %.4g (nominal ceiling)", d->nominal_peak * 1e-12);
    reject(R, "peak_tflops_fp32", num(v, peak * 1e-12), a,
           "above online CPUs x clock x SIMD FLOP/cycle: the timer or the loop is broken");
  }
  if (pos(d->fma_peak) && pos(d->best_gemm) && d->best_gemm > d->fma_peak * FB_CALIB_CEILING_TOL) {
    snprintf(a, sizeof a, "GEMM <= %.2f x FMA peak", FB_CALIB_CEILING_TOL);
    reject(R, "peak_tflops_fp32", num(v, d->fma_peak * 1e-12), a,
           "a GEMM reached %.4g TFLOP/s, %.2f x the FMA loop's ceiling: the FMA loop was "
           "descheduled", d->best_gemm * 1e-12, d->best_gemm / d->fma_peak);
  }
  if (pos(peak) && known(d->best_gemm) && d->best_gemm < FB_CALIB_MIN_FRACTION * peak) {
    snprintf(a, sizeof a, ">= %.0f %% of the peak", 100 * FB_CALIB_MIN_FRACTION);
    reject(R, "gemm_max_efficiency", num(v, d->best_gemm / peak), a,
           "the fastest GEMM ran at %.4g %% of the FMA peak", 100 * d->best_gemm / peak);
  }
}

/* the GEMM curve: efficiency in (0, 1), not at the fit's cap, a large GEMM above 1 % of the
 * peak, the half size inside its grid, residuals; attention: an efficiency of a GEMM of its
 * size, (0, 1] before the cap */
static void check_gemm_attention(rejects *R, const fb_hardware *hw, const fb_calib_diag *d) {
  char v[32], a[96];
  const double E = hw->gemm_max_eff, h = hw->gemm_half_size;
  snprintf(a, sizeof a, "(%.2f, 1) (1 is the fit's cap)", FB_CALIB_MIN_FRACTION);
  if (!(E > 0 && E <= 1))
    reject(R, "gemm_max_efficiency", num(v, E), a, "an efficiency outside (0, 1]");
  else if (E >= 1)
    reject(R, "gemm_max_efficiency", num(v, E), a,
           "at the fit's clamp bound: the GEMMs beat peak x s / (s + h), so the peak was "
           "measured low");
  else if (E * 1024 / (1024 + h) < FB_CALIB_MIN_FRACTION)
    reject(R, "gemm_max_efficiency", num(v, E), a,
           "a 1024^3 GEMM on this curve runs at %.3g %% of the peak", 100 * E * 1024 / (1024 + h));
  check_half_attention(R, "gemm_half_size", h, "attention_efficiency",
                       known(d->attn_raw) ? d->attn_raw : hw->attn_eff);
  check_rms(R, "gemm_max_efficiency", E, d->gemm_rms, "the in-step GEMM curve");
  check_rms(R, "GEMM curve of the micro-benchmarks", NAN, d->micro_gemm_rms,
            "the GEMM curve over the micro-benchmark shapes");
}

/* memory: triad positive; the add kernel against it */
static void check_memory(rejects *R, const fb_hardware *hw, const fb_calib_diag *d,
                         bool triad_ok, double triad) {
  char v[32], a[96];
  if (known(d->triad) && !triad_ok)
    reject(R, "mem_bw_gbs", num(v, d->triad * 1e-9), "[0.1, 10000] GB/s",
           "STREAM triad outside any memory system");
  if (pos(triad) && known(d->add_bw)) {
    double ratio = d->add_bw / triad;
    /* arrays the last-level cache holds stream at its bandwidth: a cache bound then */
    const bool cached =
        known(d->llc_bytes) && known(d->add_bytes) && d->add_bytes <= d->llc_bytes;
    const double hi = cached ? FB_CALIB_MAX_CACHE_OVER_TRIAD : FB_CALIB_MAX_ADD_OVER_TRIAD;
    snprintf(a, sizeof a, "[%.2f, %.1f] x triad%s", FB_CALIB_MIN_FRACTION, hi,
             cached ? " (its arrays fit the last-level cache)" : "");
    if (!(ratio >= FB_CALIB_MIN_FRACTION && ratio <= hi))
      reject(R, "mem_efficiency", num(v, ratio), a,
             "the add kernel streamed %.4g GB/s against a triad of %.4g GB/s: one of them "
             "ran in cache or was disturbed", d->add_bw * 1e-9, triad * 1e-9);
  } else if (!known(d->add_bw) && !(hw->mem_eff > 0 && hw->mem_eff <= 1))
    reject(R, "mem_efficiency", num(v, hw->mem_eff), "(0, 1]", "an efficiency outside (0, 1]");
}

/* launch overhead; overlap slowdown before its clamp to [1, 100]; the per-kernel rates:
 * steady step to step, within [1 %, 16 x] of the triad bandwidth */
static void check_overheads(rejects *R, const fb_hardware *hw, const fb_calib_diag *d,
                            double triad) {
  char v[32], a[96];
  if (!(hw->launch_s > 0 && hw->launch_s <= FB_CALIB_MAX_LAUNCH_S)) {
    snprintf(a, sizeof a, "(0, %.0f] us", FB_CALIB_MAX_LAUNCH_S * 1e6);
    reject(R, "launch_us", num(v, hw->launch_s * 1e6), a,
           hw->launch_s > 0 ? "a 16-element kernel took longer than a context switch"
                            : "a zero or negative overhead");
  }
  const double ov = known(d->overlap_raw) ? d->overlap_raw : hw->overlap_slowdown;
  if (!(ov >= 1 / FB_CALIB_CEILING_TOL && ov < 100))
    reject(R, "overlap_slowdown", num(v, ov), "[0.95, 100) (100 is the clamp)",
           ov < 1 ? "a GEMM ran faster beside a memory-streaming thread than alone"
                  : "at the clamp bound: the GEMM beside the memory stream stalled");
  check_rms(R, "kernel_gbs", NAN, d->kernel_rms,
            "the in-step kernel table (each kernel's time step by step)");
  check_kernels(R, "kernel_gbs", hw->kernels, hw->nkernels, triad);
  if (hw->split_ranks > 1) check_split(R, hw, d, triad);
}

/* the communicator: positive latency, bandwidth inside the fit's grid and under the cache
 * limit, the fit's residual */
static void check_comm(rejects *R, const fb_hardware *hw, const fb_calib_diag *d, double triad) {
  char v[32], a[96];
  if (!(hw->intra_lat > 0 && hw->intra_lat <= FB_CALIB_MAX_LAT_S)) {
    snprintf(a, sizeof a, "(0, %.0f] us", FB_CALIB_MAX_LAT_S * 1e6);
    reject(R, "intra_lat_us", num(v, hw->intra_lat * 1e6), a,
           hw->intra_lat > 0 ? "a collective's latency longer than a stall"
                             : "a zero or negative latency (the smallest collectives took no "
                               "longer than a kernel launch)");
  }
  const double bw = hw->intra_bw;
  snprintf(a, sizeof a, "(%.4g, %.4g) GB/s (the fit's grid)", FB_CALIB_BW_MIN * 1e-9,
           FB_CALIB_BW_MAX * 1e-9);
  if (!(bw > FB_CALIB_BW_MIN * 1.02 && bw < FB_CALIB_BW_MAX / 1.02))
    reject(R, "intra_bw_gbs", num(v, bw * 1e-9), a, "at the fit's clamp bound (or not positive)");
  else if (pos(triad) && bw > FB_CALIB_MAX_CACHE_OVER_TRIAD * triad) {
    snprintf(a, sizeof a, "<= %.4g GB/s (%.0f x triad)",
             FB_CALIB_MAX_CACHE_OVER_TRIAD * triad * 1e-9, FB_CALIB_MAX_CACHE_OVER_TRIAD);
    reject(R, "intra_bw_gbs", num(v, bw * 1e-9), a,
           "%.3g x the triad bandwidth: copies cannot outrun the caches", bw / triad);
  }
  check_rms_max(R, "intra_bw_gbs", bw * 1e-9, d->comm_rms, "the communicator's bandwidth fit",
                FB_CALIB_MAX_COMM_RMS);
}

int fb_calibrate_check_fit(const fb_hardware *hw, const fb_calib_diag *d, bool compute,
                           fb_calib_reject *rej, int max) {
  rejects R = {rej, max, 0};
  /* the triad bandwidth is the reference of the memory checks, once it is plausible itself
   * (an implausible one is one rejection, not one per kernel) */
  const bool triad_ok = known(d->triad) && d->triad >= 1e8 && d->triad <= 1e13;
  const double triad = triad_ok ? d->triad : NAN;
  if (compute) {
    check_peak(&R, hw, d);
    check_gemm_attention(&R, hw, d);
    check_memory(&R, hw, d, triad_ok, triad);
    check_overheads(&R, hw, d, triad);
  }
  check_comm(&R, hw, d, triad);
  return R.n;
}

void fb_calib_reject_line(const fb_calib_reject *r, char *buf, size_t n) {
  snprintf(buf, n, "calibrate: rejected %s: %s (%s; allowed %s)", r->figure, r->value, r->reason,
           r->allowed);
}

/* ---- load ------------------------------------------------------------------------------------ */

/* The machine's busy CPU time (jiffies) from /proc/stat's first line, and this process's
 * (utime + stime) from /proc/self/stat; false without /proc. */
static bool cpu_jiffies(double *machine, double *self) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return false;
  unsigned long long v[8] = {0};
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                 &v[4], &v[5], &v[6], &v[7]);
  fclose(f);
  if (n < 4) return false;
  /* busy = user + nice + system + irq + softirq + steal (idle and iowait are not) */
  *machine = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
  char buf[1024];
  int fd = open("/proc/self/stat", O_RDONLY);
  if (fd < 0) return false;
  ssize_t len = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (len <= 0) return false;
  buf[len] = 0;
  const char *p = strrchr(buf, ')');
  unsigned long long ut = 0, st = 0;
  /* fields after the command: state(3) ... utime(14) stime(15) */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return false;
  *self = (double)(ut + st);
  return true;
}

fb_status fb_calib_load_read(int threads, double own, fb_calib_load *out) {
  memset(out, 0, sizeof *out);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  out->ncpu = ncpu > 0 ? (int)ncpu : 1;
  /* Test hook (documented in calibrate.h and docs/simulator.md): a fake load. */
  const char *fake = getenv("FSDPBENCH_FAKE_LOADAVG");
  if (fake) {
    char *end = NULL;
    double v = strtod(fake, &end);
    if (end == fake || *end || !(v >= 0) || !isfinite(v))
      return FB_ERR(FB_EUSAGE, "FSDPBENCH_FAKE_LOADAVG: '%s' is not a load average (want a "
                    "number >= 0)", fake);
    out->loadavg = v;
    out->fake = true;
    out->own = own > 0 ? own : 0;
    out->others = fmax(0.0, out->loadavg - out->own);
  } else {
    /* What other processes run now: the machine's busy CPU time less this process's, over
     * FB_CALIB_LOAD_WINDOW_S seconds, in cores. The 1-minute load average lags by a minute
     * (a benchmark that just finished still counts) and is kept for the record only. */
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f || fscanf(f, "%lf", &out->loadavg) != 1) out->loadavg = 0;
    if (f) fclose(f);
    double m0, s0, m1, s1;
    long hz = sysconf(_SC_CLK_TCK);
    if (hz > 0 && cpu_jiffies(&m0, &s0)) {
      struct timespec w = {.tv_sec = (time_t)FB_CALIB_LOAD_WINDOW_S,
                           .tv_nsec = (long)((FB_CALIB_LOAD_WINDOW_S -
                                              (double)(time_t)FB_CALIB_LOAD_WINDOW_S) * 1e9)};
      struct timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      nanosleep(&w, NULL);
      clock_gettime(CLOCK_MONOTONIC, &b);
      double t0 = (double)a.tv_sec + a.tv_nsec * 1e-9, t1 = (double)b.tv_sec + b.tv_nsec * 1e-9;
      if (cpu_jiffies(&m1, &s1) && t1 > t0)
        out->others = fmax(0.0, ((m1 - m0) - (s1 - s0)) / (double)hz / (t1 - t0));
    }
    out->own = 0;
  }
  const int used = threads < out->ncpu ? threads : out->ncpu;
  out->allowed = (out->ncpu - used) + FB_CALIB_MAX_LOAD_SHARE * used;
  return FB_OK;
}

void fb_calib_load_describe(const fb_calib_load *l, char *buf, size_t n) {
  if (l->fake)
    snprintf(buf, n, "load %.2f [FSDPBENCH_FAKE_LOADAVG] (%.2f from other processes, allowed "
             "%.2f) on %d online CPU(s)", l->loadavg, l->others, l->allowed, l->ncpu);
  else
    snprintf(buf, n, "other processes keep %.2f cores busy (allowed %.2f; 1-minute load "
             "average %.2f) on %d online CPU(s)", l->others, l->allowed, l->loadavg, l->ncpu);
}

/* This process's threads that the kernel's load average counts now: running or runnable (R)
 * and uninterruptible (D). */
static int own_runnable(void) {
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = 0;
    const char *p = strrchr(buf, ')'); /* the state follows the command name */
    if (p && p[1] == ' ' && (p[2] == 'R' || p[2] == 'D')) n++;
  }
  closedir(dir);
  return n;
}

static struct {
  pthread_t th;
  pthread_mutex_t mu;
  volatile int stop;
  bool started;
  double ema, t_last;
} own = {.mu = PTHREAD_MUTEX_INITIALIZER};

static double mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Samples every 100 ms and folds each sample into an exponential average of 60 s, as the
 * kernel folds its 5-second samples of the run queue into the 1-minute load average. */
static void *own_main(void *p) {
  (void)p;
  while (!own.stop) {
    int n = own_runnable() - 1; /* not this sampler, which is running while it counts */
    double t = mono_now();
    pthread_mutex_lock(&own.mu);
    double a = exp(-(t - own.t_last) / 60.0);
    own.ema = own.ema * a + (n > 0 ? n : 0) * (1 - a);
    own.t_last = t;
    pthread_mutex_unlock(&own.mu);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

fb_status fb_calib_own_start(void) {
  if (own.started) return FB_OK;
  own.stop = 0;
  own.ema = 0;
  own.t_last = mono_now();
  if (pthread_create(&own.th, NULL, own_main, NULL) != 0)
    return FB_ERR(FB_EINTERNAL, "calibrate: cannot start the load sampler thread");
  own.started = true;
  return FB_OK;
}

double fb_calib_own_load(void) {
  pthread_mutex_lock(&own.mu);
  double v = own.ema;
  pthread_mutex_unlock(&own.mu);
  return v;
}

void fb_calib_own_stop(void) {
  if (!own.started) return;
  own.stop = 1;
  pthread_join(own.th, NULL);
  own.started = false;
}

double fb_calib_spread(const double *v, int n) {
  double lo = INFINITY, hi = 0;
  for (int i = 0; i < n; i++) {
    if (!(v[i] > 0)) return INFINITY;
    lo = fmin(lo, v[i]);
    hi = fmax(hi, v[i]);
  }
  return n > 0 ? hi / lo : 1;
}

/* ---- writing -------------------------------------------------------------------------------- */

static fb_status exists_error(const char *path) {
  return FB_ERR(FB_EUSAGE, "%s exists (it may be a committed profile); write elsewhere with --out "
                "NEW.yaml or overwrite with --force", path);
}

fb_status fb_calib_check_out(const char *path, bool force) {
  FB_TRY(fb_check_output(path, "--out")); /* only a regular file, even with --force */
  struct stat sb;
  if (!force && stat(path, &sb) == 0) return exists_error(path);
  return FB_OK;
}

fb_status fb_calib_write_file(const char *path, fb_calib_writer write, void *arg, bool force) {
  FB_TRY(fb_calib_check_out(path, force));
  /* whole or absent (engine/core/out_dir.h): EFBIG, not SIGXFSZ, past `ulimit -f`, and a
   * SIGINT / SIGTERM while writing drops the temporary instead of leaving it */
  fb_out_signals_hold();
  /* the temporary file sits in the target's directory: rename() is atomic only within one
   * file system */
  char tmp[1200];
  const char *slash = strrchr(path, '/');
  if (slash)
    snprintf(tmp, sizeof tmp, "%.*s/.%s.XXXXXX", (int)(slash - path), path, slash + 1);
  else
    snprintf(tmp, sizeof tmp, ".%s.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fb_out_signals_release();
    return FB_ERR(FB_EIO, "cannot write %s: cannot create a temporary file beside it: %s", path,
                  strerror(errno));
  }
  FILE *f = fdopen(fd, "w");
  fb_status st = f ? write(f, arg) : FB_ERR(FB_EIO, "cannot write %s: %s", path, strerror(errno));
  if (f && fclose(f) != 0 && st == FB_OK) st = FB_ERR(FB_EIO, "cannot write %s", path);
  if (!f) close(fd);
  if (st == FB_OK && fb_out_dir_stopped())
    st = FB_ERR(FB_EINTERRUPTED, "%s: stopped by signal %d while writing; nothing written there",
                path, fb_out_dir_stopped());
  if (st == FB_OK) {
    /* profiles are read by everyone (mkstemp creates the file 0600) */
    mode_t mask = umask(0);
    umask(mask);
    chmod(tmp, 0666 & ~mask);
    if (force) {
      st = fb_check_output(path, "--out"); /* it may have appeared meanwhile */
      if (st == FB_OK && rename(tmp, path) != 0)
        st = FB_ERR(FB_EIO, "cannot write hardware profile %s: %s", path, strerror(errno));
    } else if (link(tmp, path) != 0) { /* no clobber: fails when path appeared meanwhile */
      if (errno == EEXIST) st = exists_error(path);
      else if (access(path, F_OK) == 0) st = exists_error(path);
      else if (rename(tmp, path) != 0) /* a file system without hard links */
        st = FB_ERR(FB_EIO, "cannot write %s: %s", path, strerror(errno));
    }
  }
  unlink(tmp); /* after link() the file keeps the data; after rename() tmp is gone */
  fb_out_signals_release();
  return st;
}

typedef struct profile_arg {
  const char *path;
  const fb_hardware *hw;
  const char *comment;
} profile_arg;

static fb_status write_hw(FILE *f, void *arg) {
  const profile_arg *p = arg;
  return fb_hardware_write_to(f, p->path, p->hw, p->comment);
}

fb_status fb_calib_write_profile(const char *path, const fb_hardware *hw, const char *comment,
                                 bool force) {
  profile_arg p = {path, hw, comment};
  return fb_calib_write_file(path, write_hw, &p, force);
}
