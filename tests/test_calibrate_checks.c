/* calibrate's refusals as pure functions, on synthetic fit results (no measuring, fast):
 *  - fb_calibrate_check_fit accepts a healthy profile (this machine's figures) and rejects each
 *    implausible figure alone, naming it, with a one-line message in the documented format:
 *    fit residuals above 25 %, rates above their measured ceiling or below 1 % of it, zero or
 *    negative latencies and overheads, efficiencies outside (0, 1], fits at a clamp bound, a
 *    split (1-thread) rank faster than its core's share of the peak;
 *    --comm mpi (compute = false) checks only the communicator;
 *  - fb_calibrate_fit_gemm recovers an exact curve with ~0 residual and reports scatter;
 *  - the load check: FSDPBENCH_FAKE_LOADAVG, the own-share subtraction and the allowed load;
 *  - fb_calib_spread;
 *  - fb_calib_write_profile: refuses an existing file (unchanged), overwrites with force,
 *    leaves no temporary file beside it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "apps/calibrate/calibrate.h"
#include "engine/sim/hardware.h"

/* This machine's figures, as a calibration on an idle machine fits them. */
static void healthy(fb_hardware *hw, fb_calib_diag *d) {
  memset(hw, 0, sizeof *hw);
  snprintf(hw->name, sizeof hw->name, "cpu");
  hw->peak_fp32 = hw->peak_bf16 = 226.3e9;
  hw->gemm_max_eff = 0.7448;
  hw->gemm_half_size = 9.906;
  hw->attn_eff = 0.358;
  hw->mem_bw = 33.67e9;
  hw->mem_eff = 1;
  hw->launch_s = 0.57e-6;
  hw->mem_capacity = (int64_t)23 << 30;
  hw->devices_per_node = 1;
  hw->intra_bw = hw->inter_bw = 14.83e9;
  hw->intra_lat = hw->inter_lat = 18.38e-6;
  hw->coll_eff = 1;
  hw->overlap_slowdown = 1.743;
  hw->shared_host = true;
  hw->collectives = FB_COLLS_SHARED_MEMORY;
  const char *names[] = {"adamw", "residual_add", "gelu_fwd", "grad_norm"};
  const double bws[] = {26.7e9, 66.35e9, 11.03e9, 6.95e9};
  for (int i = 0; i < 4; i++) {
    snprintf(hw->kernels[i].name, sizeof hw->kernels[i].name, "%s", names[i]);
    hw->kernels[i].bw = bws[i];
  }
  hw->nkernels = 4;
  /* two 1-thread ranks at once (the split figures an Intel Xeon VM fitted) */
  hw->split_ranks = 2;
  hw->split_gemm_max_eff = 0.2577;
  hw->split_gemm_half_size = 1;
  hw->split_attn_eff = 0.2946;
  snprintf(hw->split_kernels[0].name, sizeof hw->split_kernels[0].name, "adamw");
  hw->split_kernels[0].bw = 24.87e9;
  snprintf(hw->split_kernels[1].name, sizeof hw->split_kernels[1].name, "residual_add");
  hw->split_kernels[1].bw = 45.97e9;
  hw->nsplit_kernels = 2;
  fb_calib_diag_init(d);
  d->split_gemm_rms = 0.091;
  d->split_attn_raw = 0.2946;
  d->split_kernel_rms = 0.069;
  d->fma_peak = 226.3e9;
  d->nominal_peak = 2 * 2.6e9 * 64 * 2;
  d->best_gemm = 207.7e9;
  d->micro_gemm_rms = 0.12;
  d->gemm_rms = 0.06;
  d->attn_raw = 0.358;
  d->triad = 33.67e9;
  d->add_bw = 1.66 * 33.67e9;
  d->overlap_raw = 1.743;
  d->comm_rms = 0.08;
  d->kernel_rms = 0.07;
}

typedef void (*mutate_fn)(fb_hardware *hw, fb_calib_diag *d);
static void m_peak_zero(fb_hardware *h, fb_calib_diag *d) { (void)d; h->peak_fp32 = 0; }
static void m_peak_nominal(fb_hardware *h, fb_calib_diag *d) { h->peak_fp32 = 2 * d->nominal_peak; }
static void m_gemm_above_fma(fb_hardware *h, fb_calib_diag *d) { (void)h; d->best_gemm = 1.3 * d->fma_peak; }
static void m_gemm_stalled(fb_hardware *h, fb_calib_diag *d) { d->best_gemm = 0.005 * h->peak_fp32; }
static void m_eff_cap(fb_hardware *h, fb_calib_diag *d) { (void)d; h->gemm_max_eff = 1.0; }
static void m_eff_neg(fb_hardware *h, fb_calib_diag *d) { (void)d; h->gemm_max_eff = -0.2; }
static void m_eff_tiny(fb_hardware *h, fb_calib_diag *d) { (void)d; h->gemm_max_eff = 0.005; }
static void m_half_max(fb_hardware *h, fb_calib_diag *d) { (void)d; h->gemm_half_size = FB_CALIB_GEMM_H_MAX; }
static void m_gemm_rms(fb_hardware *h, fb_calib_diag *d) { (void)h; d->gemm_rms = 0.54; }
static void m_micro_rms(fb_hardware *h, fb_calib_diag *d) { (void)h; d->micro_gemm_rms = 0.30; }
static void m_attn_cap(fb_hardware *h, fb_calib_diag *d) { h->attn_eff = 1; d->attn_raw = 1.4; }
static void m_attn_zero(fb_hardware *h, fb_calib_diag *d) { h->attn_eff = 0; d->attn_raw = 0; }
static void m_triad(fb_hardware *h, fb_calib_diag *d) { (void)h; d->triad = 1e5; }
static void m_add_cache(fb_hardware *h, fb_calib_diag *d) { (void)h; d->add_bw = 3.6 * d->triad; }
/* arrays larger than the last-level cache: still the 2 x triad bound */
static void m_add_cache_big(fb_hardware *h, fb_calib_diag *d) {
  m_add_cache(h, d);
  d->add_bytes = 128.0 * (1 << 20);
  d->llc_bytes = 32.0 * (1 << 20);
}
/* arrays inside the last-level cache: the cache bound (16 x triad) */
static void m_add_llc_fast(fb_hardware *h, fb_calib_diag *d) {
  (void)h;
  d->add_bw = 20 * d->triad;
  d->add_bytes = 128.0 * (1 << 20);
  d->llc_bytes = 480.0 * (1 << 20);
}
static void m_launch_zero(fb_hardware *h, fb_calib_diag *d) { (void)d; h->launch_s = 0; }
static void m_launch_slow(fb_hardware *h, fb_calib_diag *d) { (void)d; h->launch_s = 2e-3; }
static void m_overlap_clamp(fb_hardware *h, fb_calib_diag *d) { h->overlap_slowdown = 100; d->overlap_raw = 250; }
static void m_overlap_fast(fb_hardware *h, fb_calib_diag *d) { h->overlap_slowdown = 1; d->overlap_raw = 0.6; }
static void m_kernel_rms(fb_hardware *h, fb_calib_diag *d) { (void)h; d->kernel_rms = 0.41; }
static void m_kernel_stall(fb_hardware *h, fb_calib_diag *d) { h->kernels[0].bw = 0.001 * d->triad; }
static void m_kernel_fast(fb_hardware *h, fb_calib_diag *d) { h->kernels[2].bw = 40 * d->triad; }
static void m_lat_zero(fb_hardware *h, fb_calib_diag *d) { (void)d; h->intra_lat = 0; }
static void m_lat_neg(fb_hardware *h, fb_calib_diag *d) { (void)d; h->intra_lat = -1e-6; }
static void m_lat_stall(fb_hardware *h, fb_calib_diag *d) { (void)d; h->intra_lat = 0.5; }
static void m_bw_grid(fb_hardware *h, fb_calib_diag *d) { (void)d; h->intra_bw = 1e6; }
static void m_bw_cache(fb_hardware *h, fb_calib_diag *d) { h->intra_bw = 20 * d->triad; }
static void m_comm_rms(fb_hardware *h, fb_calib_diag *d) { (void)h; d->comm_rms = 1.35; }
/* a 1-thread rank of two at 0.6 of the whole machine's peak: more than its core */
static void m_split_fast(fb_hardware *h, fb_calib_diag *d) { (void)d; h->split_gemm_max_eff = 0.6; }
static void m_split_half(fb_hardware *h, fb_calib_diag *d) {
  (void)d;
  h->split_gemm_half_size = 0.97 * FB_CALIB_GEMM_H_MAX; /* (its large GEMM still above 1 %) */
  h->split_gemm_max_eff = 0.9;
}
static void m_split_rms(fb_hardware *h, fb_calib_diag *d) { (void)h; d->split_gemm_rms = 0.4; }
static void m_split_attn(fb_hardware *h, fb_calib_diag *d) { h->split_attn_eff = 1; d->split_attn_raw = 1.3; }
static void m_split_kstall(fb_hardware *h, fb_calib_diag *d) { h->split_kernels[0].bw = 0.001 * d->triad; }
static void m_split_krms(fb_hardware *h, fb_calib_diag *d) { (void)h; d->split_kernel_rms = 1.45; }

typedef struct tcase {
  const char *what;
  mutate_fn m;
  const char *figure; /* the one figure rejected */
  const char *reason; /* a piece of its reason */
  bool comm;          /* also rejected with compute = false (an MPI calibration) */
} tcase;

static const tcase cases[] = {
    {"zero peak", m_peak_zero, "peak_tflops_fp32", "not a positive rate", false},
    {"peak above the nominal ceiling", m_peak_nominal, "peak_tflops_fp32", "SIMD FLOP/cycle", false},
    {"GEMM above the FMA ceiling", m_gemm_above_fma, "peak_tflops_fp32", "FMA loop was descheduled", false},
    {"GEMM below 1 % of the peak", m_gemm_stalled, "gemm_max_efficiency", "fastest GEMM", false},
    {"GEMM efficiency at the cap", m_eff_cap, "gemm_max_efficiency", "clamp bound", false},
    {"negative GEMM efficiency", m_eff_neg, "gemm_max_efficiency", "outside (0, 1]", false},
    {"GEMM curve below 1 %", m_eff_tiny, "gemm_max_efficiency", "1024^3 GEMM", false},
    {"half size at the grid's end", m_half_max, "gemm_half_size", "clamp bound", false},
    {"in-step GEMM residual", m_gemm_rms, "gemm_max_efficiency", "residual of 54 %", false},
    {"micro GEMM residual", m_micro_rms, "GEMM curve of the micro-benchmarks", "residual of 30 %", false},
    {"attention above a GEMM", m_attn_cap, "attention_efficiency", "faster than a GEMM", false},
    {"zero attention efficiency", m_attn_zero, "attention_efficiency", "outside (0, 1]", false},
    {"triad outside any memory", m_triad, "mem_bw_gbs", "outside any memory system", false},
    {"add kernel in cache", m_add_cache, "mem_efficiency", "ran in cache or was disturbed", false},
    {"add kernel in cache, arrays above the LLC", m_add_cache_big, "mem_efficiency", "ran in cache", false},
    {"add kernel above the cache bound", m_add_llc_fast, "mem_efficiency", "ran in cache", false},
    {"zero launch overhead", m_launch_zero, "launch_us", "zero or negative", false},
    {"millisecond launch overhead", m_launch_slow, "launch_us", "context switch", false},
    {"overlap slowdown at the clamp", m_overlap_clamp, "overlap_slowdown", "clamp bound", false},
    {"GEMM faster beside a stream", m_overlap_fast, "overlap_slowdown", "faster beside", false},
    {"kernel table residual", m_kernel_rms, "kernel_gbs", "residual of 41 %", false},
    {"stalled kernel", m_kernel_stall, "kernel_gbs.adamw", "stalled kernel", false},
    {"kernel above any cache", m_kernel_fast, "kernel_gbs.gelu_fwd", "above any cache", false},
    {"zero latency", m_lat_zero, "intra_lat_us", "zero or negative latency", true},
    {"negative latency", m_lat_neg, "intra_lat_us", "zero or negative latency", true},
    {"stalled latency", m_lat_stall, "intra_lat_us", "longer than a stall", true},
    {"bandwidth at the fit's grid end", m_bw_grid, "intra_bw_gbs", "clamp bound", true},
    {"bandwidth above the caches", m_bw_cache, "intra_bw_gbs", "outrun the caches", true},
    {"communicator residual", m_comm_rms, "intra_bw_gbs", "residual of 135 %", true},
    {"split rank above its core", m_split_fast, "split_gemm_max_efficiency", "1-thread ranks ran", false},
    {"split half size at the grid's end", m_split_half, "split_gemm_half_size", "clamp bound", false},
    {"split GEMM residual", m_split_rms, "split_gemm_max_efficiency", "residual of 40 %", false},
    {"split attention above a GEMM", m_split_attn, "split_attention_efficiency", "faster than a GEMM", false},
    {"stalled split kernel", m_split_kstall, "split_kernel_gbs.adamw", "stalled kernel", false},
    {"split kernel residual", m_split_krms, "split_kernel_gbs", "residual of 145 %", false},
};

static void test_check_fit(void) {
  fb_hardware hw;
  fb_calib_diag d;
  fb_calib_reject rej[16];
  healthy(&hw, &d);
  int n = fb_calibrate_check_fit(&hw, &d, true, rej, 16);
  CHECK(n == 0, "healthy profile rejected %d figure(s), first: %s (%s)", n, n ? rej[0].figure : "",
        n ? rej[0].reason : "");
  CHECK_OK(fb_hardware_validate(&hw, "healthy"));
  /* a diag with nothing measured (all NAN) checks the profile's own figures only */
  fb_calib_diag none;
  fb_calib_diag_init(&none);
  n = fb_calibrate_check_fit(&hw, &none, true, rej, 16);
  CHECK(n == 0, "healthy profile without diagnostics rejected %d: %s", n, n ? rej[0].reason : "");

  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const tcase *t = &cases[i];
    healthy(&hw, &d);
    t->m(&hw, &d);
    n = fb_calibrate_check_fit(&hw, &d, true, rej, 16);
    CHECK(n == 1, "%s: %d rejection(s), want 1 (first: %s)", t->what, n, n ? rej[0].figure : "-");
    if (n < 1) continue;
    CHECK(!strcmp(rej[0].figure, t->figure), "%s: rejected %s, want %s", t->what, rej[0].figure,
          t->figure);
    CHECK(strstr(rej[0].reason, t->reason) != NULL, "%s: reason '%s' lacks '%s'", t->what,
          rej[0].reason, t->reason);
    CHECK(rej[0].value[0] && rej[0].allowed[0], "%s: empty value or allowed range", t->what);
    char line[512], head[128];
    fb_calib_reject_line(&rej[0], line, sizeof line);
    snprintf(head, sizeof head, "calibrate: rejected %s: %s (", t->figure, rej[0].value);
    CHECK(!strncmp(line, head, strlen(head)) && strstr(line, "; allowed ") &&
              line[strlen(line) - 1] == ')' && !strchr(line, '\n'),
          "%s: line '%s'", t->what, line);
    /* an MPI calibration checks only the communicator */
    int nc = fb_calibrate_check_fit(&hw, &d, false, rej, 16);
    CHECK(nc == (t->comm ? 1 : 0), "%s with compute = false: %d rejection(s), want %d", t->what,
          nc, t->comm ? 1 : 0);
  }
  /* the add kernel's bound: 2 x triad unless its arrays fit the last-level cache, then the
   * cache bound (a Xeon slice: 128 MiB of arrays at 2.3 x a DRAM triad, 480 MiB of L3) */
  healthy(&hw, &d);
  m_add_cache_big(&hw, &d);
  n = fb_calibrate_check_fit(&hw, &d, true, rej, 16);
  CHECK(n == 1 && strstr(rej[0].allowed, "2.0] x triad") && !strstr(rej[0].allowed, "cache"),
        "arrays above the LLC: allowed '%s'", n ? rej[0].allowed : "-");
  healthy(&hw, &d);
  m_add_llc_fast(&hw, &d);
  n = fb_calibrate_check_fit(&hw, &d, true, rej, 16);
  CHECK(n == 1 && strstr(rej[0].allowed, "16.0] x triad (its arrays fit the last-level cache)"),
        "arrays in the LLC: allowed '%s'", n ? rej[0].allowed : "-");
  healthy(&hw, &d);
  d.add_bw = 2.3 * d.triad;
  d.add_bytes = 128.0 * (1 << 20);
  d.llc_bytes = 480.0 * (1 << 20);
  n = fb_calibrate_check_fit(&hw, &d, true, rej, 16);
  CHECK(n == 0, "add kernel at 2.3 x triad from the LLC rejected: %s", n ? rej[0].reason : "");

  /* several at once: each counted, the array never overrun */
  healthy(&hw, &d);
  m_lat_zero(&hw, &d);
  m_gemm_rms(&hw, &d);
  m_eff_cap(&hw, &d);
  n = fb_calibrate_check_fit(&hw, &d, true, rej, 1);
  CHECK(n == 3, "three bad figures: %d counted", n);
}

static void test_fit_gemm(void) {
  const double peak = 200e9, E0 = 0.8, h0 = 150;
  double s[12], r[12], E, h;
  for (int i = 0; i < 12; i++) {
    s[i] = 32.0 * pow(1.4, i);
    r[i] = peak * E0 * s[i] / (s[i] + h0);
  }
  double rms = fb_calibrate_fit_gemm(s, r, NULL, 12, peak, &E, &h);
  CHECK(rms < 0.03, "exact curve: residual %g", rms);
  CHECK_CLOSE(E, E0, 0.05, 0);
  CHECK_CLOSE(h, h0, 0.06, 0);
  /* weighted by time: the two smallest products 3x slow (short ops a time slice hit) move
   * an equal-weight fit of the curve, not one that weighs each point by its time */
  double w[12];
  for (int i = 0; i < 12; i++) w[i] = i < 2 ? 0.01 : 1;
  r[0] /= 3, r[1] /= 3;
  rms = fb_calibrate_fit_gemm(s, r, w, 12, peak, &E, &h);
  CHECK_CLOSE(E, E0, 0.05, 0);
  CHECK_CLOSE(h, h0, 0.06, 0);
  CHECK(rms < 0.1, "weighted: residual %g with the slow points at 1 %% weight", rms);
  fb_calibrate_fit_gemm(s, r, NULL, 12, peak, &E, &h);
  CHECK(fabs(h / h0 - 1) > 0.2, "equal weights: h = %g, want the slow points to move it", h);
  r[0] *= 3, r[1] *= 3;
  /* every other point 3x slower (a machine shared with another job): way above 25 % */
  for (int i = 0; i < 12; i += 2) r[i] /= 3;
  rms = fb_calibrate_fit_gemm(s, r, NULL, 12, peak, &E, &h);
  CHECK(rms > FB_CALIB_MAX_RMS, "scattered points: residual %g", rms);
  /* GEMMs at the peak: the fit's E sits at its cap, which the check rejects */
  for (int i = 0; i < 12; i++) r[i] = 1.02 * peak;
  fb_calibrate_fit_gemm(s, r, NULL, 12, peak, &E, &h);
  CHECK(E == 1, "rates above the peak: E = %g, want the cap 1", E);
  fb_hardware hw;
  fb_calib_diag d;
  fb_calib_reject rej[8];
  healthy(&hw, &d);
  hw.gemm_max_eff = E;
  hw.gemm_half_size = h;
  int n = fb_calibrate_check_fit(&hw, &d, true, rej, 8);
  CHECK(n >= 1 && !strcmp(rej[0].figure, "gemm_max_efficiency"), "capped fit not rejected");
}

static void test_load(void) {
  fb_calib_load l;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  setenv("FSDPBENCH_FAKE_LOADAVG", "50", 1);
  CHECK_OK(fb_calib_load_read((int)ncpu, 0.0, &l));
  CHECK(l.fake && l.loadavg == 50 && l.others == 50, "fake load %g, others %g", l.loadavg, l.others);
  CHECK(l.ncpu == ncpu, "online CPUs %d, want %ld", l.ncpu, ncpu);
  CHECK_CLOSE(l.allowed, FB_CALIB_MAX_LOAD_SHARE * ncpu, 1e-12, 0);
  CHECK(l.others > l.allowed, "load 50 allowed (%g)", l.allowed);
  /* this job's own threads do not count against it */
  setenv("FSDPBENCH_FAKE_LOADAVG", "2.2", 1);
  CHECK_OK(fb_calib_load_read((int)ncpu, 2.0, &l));
  CHECK_CLOSE(l.others, 0.2, 1e-9, 0);
  CHECK_OK(fb_calib_load_read((int)ncpu, 5.0, &l));
  CHECK(l.others == 0, "own share above the load average: others %g", l.others);
  /* a calibration on fewer threads than cores leaves the other cores to others */
  CHECK_OK(fb_calib_load_read(1, 0, &l));
  CHECK_CLOSE(l.allowed, (ncpu - 1) + FB_CALIB_MAX_LOAD_SHARE, 1e-12, 0);
  char buf[256];
  setenv("FSDPBENCH_FAKE_LOADAVG", "3.5", 1);
  CHECK_OK(fb_calib_load_read((int)ncpu, 0, &l));
  fb_calib_load_describe(&l, buf, sizeof buf);
  CHECK(strstr(buf, "load 3.50") && strstr(buf, "allowed") &&
            strstr(buf, "FSDPBENCH_FAKE_LOADAVG"), "describe: %s", buf);
  setenv("FSDPBENCH_FAKE_LOADAVG", "lots", 1);
  CHECK(fb_calib_load_read(2, 0, &l) == FB_EUSAGE, "malformed fake load accepted");
  setenv("FSDPBENCH_FAKE_LOADAVG", "-1", 1);
  CHECK(fb_calib_load_read(2, 0, &l) == FB_EUSAGE, "negative fake load accepted");
  unsetenv("FSDPBENCH_FAKE_LOADAVG");
  CHECK_OK(fb_calib_load_read(2, 0, &l));
  CHECK(!l.fake && l.loadavg >= 0, "real load %g", l.loadavg);
  /* the own-share sampler runs and reports a finite, non-negative share */
  CHECK_OK(fb_calib_own_start());
  usleep(300 * 1000);
  double own = fb_calib_own_load();
  fb_calib_own_stop();
  CHECK(own >= 0 && own < 64, "own share %g", own);
}

static void test_spread(void) {
  const double a[] = {2.0, 3.0, 2.5}, b[] = {1.0, 0.0}, c[] = {7.0};
  CHECK_CLOSE(fb_calib_spread(a, 3), 1.5, 1e-12, 0);
  CHECK(isinf(fb_calib_spread(b, 2)), "a zero figure's spread is not infinite");
  CHECK(fb_calib_spread(c, 1) == 1, "one run's spread is not 1");
}

static int count_dir(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  if (d) closedir(d);
  return n;
}

static void test_write(void) {
  char dir[] = "/tmp/fb_calib_checks.XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char path[128];
  snprintf(path, sizeof path, "%s/cpu.yaml", dir);
  fb_hardware hw, back;
  fb_calib_diag d;
  healthy(&hw, &d);
  CHECK_OK(fb_calib_check_out(path, false));
  CHECK_OK(fb_calib_write_profile(path, &hw, "first", false));
  CHECK_OK(fb_hardware_load(path, &back));
  CHECK_CLOSE(back.peak_fp32, hw.peak_fp32, 1e-12, 0);
  CHECK(count_dir(dir) == 1, "%d files beside the profile (a temporary left over?)", count_dir(dir));
  CHECK(access(path, R_OK) == 0, "profile not readable");
  /* an existing file: refused, unchanged */
  hw.peak_fp32 = hw.peak_bf16 = 100e9;
  CHECK(fb_calib_check_out(path, false) == FB_EUSAGE, "existing file passes the check");
  CHECK(fb_calib_write_profile(path, &hw, "second", false) == FB_EUSAGE, "existing file overwritten");
  CHECK(strstr(fb_error_msg(), "exists") && strstr(fb_error_msg(), "--force") &&
            strstr(fb_error_msg(), "--out NEW.yaml"), "message: %s", fb_error_msg());
  CHECK_OK(fb_hardware_load(path, &back));
  CHECK_CLOSE(back.peak_fp32, 226.3e9, 1e-12, 0);
  CHECK(count_dir(dir) == 1, "%d files after a refusal", count_dir(dir));
  /* force: replaced */
  CHECK_OK(fb_calib_check_out(path, true));
  CHECK_OK(fb_calib_write_profile(path, &hw, "second", true));
  CHECK_OK(fb_hardware_load(path, &back));
  CHECK_CLOSE(back.peak_fp32, 100e9, 1e-12, 0);
  CHECK(count_dir(dir) == 1, "%d files after --force", count_dir(dir));
  /* an invalid profile is not written, and leaves nothing */
  hw.mem_bw = -1;
  char path2[160];
  snprintf(path2, sizeof path2, "%s/bad.yaml", dir);
  CHECK(fb_calib_write_profile(path2, &hw, NULL, false) != FB_OK, "invalid profile written");
  CHECK(access(path2, F_OK) != 0 && count_dir(dir) == 1, "an invalid profile left a file");
  remove(path);
  rmdir(dir);
}

int main(void) {
  test_check_fit();
  test_fit_gemm();
  test_load();
  test_spread();
  test_write();
  return fb_test_done("test_calibrate_checks");
}
