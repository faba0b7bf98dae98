/* `fsdpbench calibrate`: measures this machine through the executor's own code paths and
 * fits the hardware profile's parameters to them:
 *  - fp32 FMA peak (a register-only FMA loop on every thread);
 *  - the GEMM efficiency curve: the cpu device's matmul (forward and backward) at square and
 *    transformer shapes,
 *    fitted to rate = peak * E * s / (s + h) (least squares on log rate);
 *  - attention efficiency: the cpu device's attention fwd+bwd against that curve;
 *  - memory bandwidth (STREAM triad) and the fraction the device's elementwise kernels reach;
 *  - per-kernel overhead (a 16-element kernel);
 *  - each memory-bound kernel of the cpu table at the debug and gpt2-124m shapes: its achieved
 *    rate of the bytes its wrapper counts (the profile's kernel_gbs table);
 *  - then, in situ (calibrate_steps.c), short single-rank training runs whose recorded ops
 *    refit the GEMM curve, the attention efficiency and the kernel table: what the
 *    simulator costs is kernels as a step runs them, not repeated on warm buffers; with 2 or
 *    more threads, the same again on ddp runs of that many 1-thread rank threads (the split
 *    figures a world of that many ranks on this machine runs at);
 *  - the slowdown of a GEMM while another thread streams memory (a comm worker's copies);
 *  - the local communicator (calibrate_comm.c): 2 rank threads idle and beside GEMMs.
 * Under mpirun (--comm mpi) it measures only the MPI communicator (calibrate_mpi.c) and
 * writes it over the compute figures of a base profile. --repeat N keeps the median of each
 * figure over N runs. Micro-benchmark timings are the lower quartile of repeated calls.
 * Writes the profile (default models/hardware/cpu.yaml, cpu-mpi.yaml under MPI) and prints
 * what it measured, unless it refuses (calibrate_check.c): an existing file without --force,
 * a machine too loaded to measure (after --retries), an implausible fitted figure. It does
 * not simulate anything. */
#define _GNU_SOURCE
#include "calibrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../engine/config/config.h"
#include "../engine/core/progress.h"
#include "../engine/backends/cpu/device_cpu.h"
#include "../engine/device/device.h"
#include "../engine/device/kernels.h"
#include "../engine/ops/blas.h"
#include "../engine/sim/cost_model.h"
#include "../engine/backends/registry.h"
#include "calibrate_comm.h"
#include "median.h"


/* Large-GEMM rate a profile predicts (s = 1024): how undisturbed its run was. */
static double gemm_score(const fb_hardware *hw) {
  return hw->peak_fp32 * fb_cost_gemm_efficiency(hw, 1024.0);
}

/* Index of the run with the median of key(run) (the lower middle for an even count). */
static int median_run(const fb_hardware *runs, int n, double (*key)(const fb_hardware *)) {
  int best = 0;
  for (int i = 0; i < n; i++) {
    int below = 0, equal_before = 0;
    for (int j = 0; j < n; j++) {
      if (key(&runs[j]) < key(&runs[i])) below++;
      else if (key(&runs[j]) == key(&runs[i]) && j < i) equal_before++;
    }
    if (below + equal_before == (n - 1) / 2) best = i;
  }
  return best;
}

static double key_mem(const fb_hardware *h) { return h->mem_bw; }
static double key_launch(const fb_hardware *h) { return h->launch_s; }
static double key_comm(const fb_hardware *h) { return h->intra_bw; }

/* Each kernel of table k[0..nk) set to the median of the runs that measured it (bw_of reads
 * a run's rate for a name, 0 = not measured). */
static void median_kernels(const fb_hardware *runs, int n, fb_hw_kernel *k, int nk,
                           double (*bw_of)(const fb_hardware *, const char *)) {
  for (int i = 0; i < nk; i++) {
    double v[100];
    int nv = 0;
    for (int r = 0; r < n && nv < 100; r++) {
      double bw = bw_of(&runs[r], k[i].name);
      if (bw > 0) v[nv++] = bw;
    }
    if (nv > 0) k[i].bw = fb_median(v, nv);
  }
}

/* The median of n runs, figure by figure: a step on this machine meets its typical speed, not
 * its best minute (the fastest of three runs predicted steps ~2x too fast here). Figures that
 * belong together come from one run: the compute figures (peak, GEMM curve, attention,
 * overlap slowdown) from the run with the median large-GEMM rate, the memory bandwidth with its
 * efficiency, the communicator's bandwidth with its latency. Each kernel rate is the median
 * of the runs that measured that kernel. */
static void median_of_runs(const fb_hardware *runs, int n, fb_hardware *out) {
  fb_hardware m = runs[median_run(runs, n, gemm_score)];
  const fb_hardware *mb = &runs[median_run(runs, n, key_mem)];
  m.mem_bw = mb->mem_bw;
  m.mem_eff = mb->mem_eff;
  m.launch_s = runs[median_run(runs, n, key_launch)].launch_s;
  const fb_hardware *cm = &runs[median_run(runs, n, key_comm)];
  m.intra_bw = m.inter_bw = cm->intra_bw;
  m.intra_lat = m.inter_lat = cm->intra_lat;
  median_kernels(runs, n, m.kernels, m.nkernels, fb_hardware_kernel_bw);
  median_kernels(runs, n, m.split_kernels, m.nsplit_kernels, fb_hardware_split_kernel_bw);
  *out = m;
}

/* "model name" of /proc/cpuinfo, or "unknown CPU". */
static void cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10)) continue;
    const char *v = strchr(line, ':');
    if (!v) break;
    v += strspn(v + 1, " \t") + 1;
    snprintf(buf, n, "%.*s", (int)strcspn(v, "\n"), v);
    break;
  }
  fclose(f);
}

#define USAGE_LINE                                                                             \
  "usage: fsdpbench calibrate [--out FILE] [--force] [--threads N] [--repeat N] [--retries N] "  \
  "[--ignore-load] [--comm local|mpi] [--base PROFILE] [--quick]\n"                            \
  "       fsdpbench calibrate --backend cuda|cpu-opaque --out FILE [--force] [--base PROFILE] " \
  "[--attention-rows FILE] [--quick]\n"

/* A refusal is one line on stderr (exit 2); `calibrate --help` prints the usage. */
static int usage(const char *msg) {
  fprintf(stderr, "fsdpbench calibrate: error: %s (see fsdpbench calibrate --help)\n", msg);
  return FB_EUSAGE;
}

/* One `calibrate` invocation. */
typedef struct calib_cli {
  fb_calib_opts o;
  int repeat, retries;
  bool mpi, force, ignore_load;
  char path[1024], base[1024], backend[32], rows[1024];
} calib_cli;

/* The figures whose spread across --repeat runs is checked and recorded: the compute ceiling,
 * the GEMM rate the curve gives a large product, the memory bandwidth, the communicator. */
enum { NKEYS = 4 };
static const char *const key_names[NKEYS] = {"peak_tflops_fp32", "GEMM rate at s = 1024",
                                             "mem_bw_gbs", "intra_bw_gbs"};
static double key_value(const fb_hardware *h, int k) {
  switch (k) {
  case 0: return h->peak_fp32;
  case 1: return gemm_score(h);
  case 2: return h->mem_bw;
  default: return h->intra_bw;
  }
}

/* What the load gate saw, for the refusal line and the profile's header. */
typedef struct load_log {
  fb_calib_load before, worst; /* the check before measuring; the one with the most load from
                                  others (before or during) */
  bool have;
  double spread[NKEYS];        /* max / min of each key figure over the repeats (0: one run) */
  bool forced;                 /* --ignore-load let a refusal pass: */
  char forced_load[400];       /* the first load it overrode ("" if none) */
  char forced_spread[200];     /* the first spread it overrode ("" if none) */
} load_log;

/* --ignore-load overrides a refusal: keep the first of each kind for the header. */
static void force(load_log *L, bool spread, const char *why) {
  char *dst = spread ? L->forced_spread : L->forced_load;
  size_t n = spread ? sizeof L->forced_spread : sizeof L->forced_load;
  L->forced = true;
  if (!dst[0]) snprintf(dst, n, "%s", why);
}

/* Reads the load with this job's own share (summed over the processes under MPI: a
 * collective there, every process calls it). */
static fb_status read_load(const calib_cli *c, fb_calib_load *l) {
  double own_share = fb_calib_own_load();
#ifdef FB_HAVE_MPI
  if (c->mpi) FB_TRY(fb_calib_mpi_sum(&own_share));
#endif
  return fb_calib_load_read(c->o.threads, own_share, l);
}

/* Rank 0's verdict (0 go on, 1 refuse or retry) for every process. */
static fb_status share_verdict(const calib_cli *c, int rank, int *verdict) {
#ifdef FB_HAVE_MPI
  if (c->mpi) {
    double v = rank == 0 ? *verdict : 0;
    FB_TRY(fb_calib_mpi_sum(&v));
    *verdict = v > 0.5;
  }
#else
  (void)c;
  (void)rank;
#endif
  return FB_OK;
}

/* Load check at `when`: records it and says whether others' load is above the allowed. */
static fb_status check_load(const calib_cli *c, load_log *L, const char *when, bool first,
                            char *why, size_t nwhy, bool *over) {
  fb_calib_load l;
  FB_TRY(read_load(c, &l));
  if (first) L->before = l;
  if (!L->have || l.others > L->worst.others) L->worst = l;
  L->have = true;
  *over = l.others > l.allowed;
  if (*over) {
    char d[256];
    fb_calib_load_describe(&l, d, sizeof d);
    snprintf(why, nwhy, "%s %s", d, when);
  }
  return FB_OK;
}

/* The compute figures and the local communicator: `repeat` runs; after each, the load. Sets
 * *refused (with why) when the load or the spread of the runs says the machine was busy. */
static fb_status measure_local(const calib_cli *c, load_log *L, fb_hardware *runs,
                               fb_calib_diag *diags, char *why, size_t nwhy, bool *refused) {
  *refused = false;
  for (int run = 0; run < c->repeat; run++) {
    if (c->repeat > 1) printf("\ncalibrate: run %d of %d\n", run + 1, c->repeat);
    FB_TRY(fb_calibrate(&c->o, false, &runs[run], &diags[run]));
    char when[64];
    snprintf(when, sizeof when, "during run %d of %d", run + 1, c->repeat);
    bool over;
    FB_TRY(check_load(c, L, when, false, why, nwhy, &over));
    if (over && !c->ignore_load) {
      *refused = true;
      return FB_OK;
    }
    if (over) force(L, false, why);
  }
  for (int k = 0; k < NKEYS; k++) L->spread[k] = 0;
  if (c->repeat < 2) return FB_OK;
  for (int k = 0; k < NKEYS; k++) {
    double v[100];
    for (int r = 0; r < c->repeat; r++) v[r] = key_value(&runs[r], k);
    L->spread[k] = fb_calib_spread(v, c->repeat);
    const double max = k == NKEYS - 1 ? FB_CALIB_MAX_COMM_SPREAD : FB_CALIB_MAX_SPREAD;
    if (L->spread[k] > max && !*refused) {
      snprintf(why, nwhy, "%s varied %.2fx (max/min over %d repeats), above the allowed %.2fx",
               key_names[k], L->spread[k], c->repeat, max);
      if (c->ignore_load)
        force(L, true, why);
      else
        *refused = true;
    }
  }
  return FB_OK;
}

/* Prints each rejected figure; returns how many. With several runs the profile keeps the
 * median of each figure, so a figure is rejected when it fails in more than half the runs
 * (one disturbed run of three is what the median is for); the first failing run's reason is
 * printed, with how many runs failed it. */
static int check_runs(const fb_hardware *runs, const fb_calib_diag *diags, int n, bool compute) {
  enum { MAXREJ = 32 };
  fb_calib_reject first[MAXREJ];
  int count[MAXREJ] = {0}, nf = 0, more = 0;
  for (int r = 0; r < n; r++) {
    fb_calib_reject rej[MAXREJ];
    int k = fb_calibrate_check_fit(&runs[r], &diags[r], compute, rej, MAXREJ);
    if (k > MAXREJ) more += k - MAXREJ;
    for (int i = 0; i < k && i < MAXREJ; i++) {
      int j = 0;
      while (j < nf && strcmp(first[j].figure, rej[i].figure)) j++;
      if (j == nf && nf < MAXREJ) {
        first[nf] = rej[i];
        if (n > 1) {
          char why[sizeof rej[i].reason + 32];
          snprintf(why, sizeof why, "run %d of %d: %s", r + 1, n, rej[i].reason);
          snprintf(first[nf].reason, sizeof first[nf].reason, "%.*s",
                   (int)sizeof first[nf].reason - 1, why);
        }
        nf++;
      }
      if (j < MAXREJ) count[j]++;
    }
  }
  int bad = 0;
  for (int j = 0; j < nf; j++) {
    if (2 * count[j] <= n) {
      printf("calibrate: warning: %s failed its check in %d of %d runs; the median keeps the "
             "others\n", first[j].figure, count[j], n);
      continue;
    }
    char line[512]; /* the details on stdout; the refusal itself is one line on stderr */
    fb_calib_reject_line(&first[j], line, sizeof line);
    printf("%s\n", line);
    bad++;
  }
  if (more) printf("calibrate: ... and %d more rejected figure(s)\n", more);
  return bad + (more > 0);
}

static void append(char *buf, size_t n, const char *s) {
  size_t len = strlen(buf);
  if (len + 1 < n) snprintf(buf + len, n - len, "%s", s);
}

static fb_status write_profile(const calib_cli *c, fb_hardware *hw, int world,
                               const load_log *L) {
  char comment[4096], cpu[160], when[64], cmd[1200], load[1200];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime(&now));
  cpu_model(cpu, sizeof cpu);
  if (c->mpi)
    snprintf(cmd, sizeof cmd, "mpirun -np %d fsdpbench calibrate --comm mpi` over the compute "
             "figures of `%s", world, c->base);
  else
    snprintf(cmd, sizeof cmd, "fsdpbench calibrate --threads %d --repeat %d", c->o.threads,
             c->repeat);
  char blas[256];
  snprintf(blas, sizeof blas, "%s", c->mpi ? "compute figures as in the base profile" : fb_blas_describe());
  /* the load it was measured under, the repeats and their spread, and whether it was forced */
  char d1[256], d2[256], part[400];
  fb_calib_load_describe(&L->before, d1, sizeof d1);
  fb_calib_load_describe(&L->worst, d2, sizeof d2);
  snprintf(load, sizeof load, "Load: %s before measuring; the most from others: %s.\n", d1, d2);
  if (c->mpi || c->repeat < 2) {
    append(load, sizeof load, "Repeats: 1 (no spread).\n");
  } else {
    snprintf(part, sizeof part, "Repeats: %d; spread (max/min):", c->repeat);
    append(load, sizeof load, part);
    for (int k = 0; k < NKEYS; k++) {
      snprintf(part, sizeof part, "%s %s %.3fx", k ? "," : "", key_names[k], L->spread[k]);
      append(load, sizeof load, part);
    }
    snprintf(part, sizeof part, " (allowed %.2fx, the communicator %.2fx).\n", FB_CALIB_MAX_SPREAD,
             FB_CALIB_MAX_COMM_SPREAD);
    append(load, sizeof load, part);
  }
  if (L->forced) {
    append(load, sizeof load, "FORCED with --ignore-load: ");
    append(load, sizeof load, L->forced_load);
    append(load, sizeof load, L->forced_load[0] && L->forced_spread[0] ? "; " : "");
    append(load, sizeof load, L->forced_spread);
    append(load, sizeof load, ".\n");
  }
  snprintf(comment, sizeof comment,
           "This machine, measured by `%s` on %s.\n"
           "CPU: %s, %ld core(s). BLAS: %s.\n%s"
           "Regenerate with the same command on the machine you want to predict; see "
           "docs/simulator.md.\n%s", cmd, when, cpu, sysconf(_SC_NPROCESSORS_ONLN), blas, load,
           c->mpi ? "intra/inter links = the MPI communicator (processes on this machine; run "
                    "jobs with --threads = cores / processes)."
                  : "intra/inter links = the local communicator (ranks are threads sharing "
                    "memory).");
  if (c->mpi) snprintf(hw->name, sizeof hw->name, "cpu-mpi");
  /* measurements carry ~4 significant digits: write them so */
  double *fields[] = {&hw->peak_fp32, &hw->peak_bf16, &hw->gemm_max_eff, &hw->gemm_half_size,
                      &hw->attn_eff, &hw->mem_bw, &hw->mem_eff, &hw->launch_s, &hw->intra_bw,
                      &hw->intra_lat, &hw->inter_bw, &hw->inter_lat, &hw->overlap_slowdown,
                      &hw->split_gemm_max_eff, &hw->split_gemm_half_size, &hw->split_attn_eff};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) *fields[i] = fb_calib_sig4(*fields[i]);
  for (int i = 0; i < hw->nkernels; i++) hw->kernels[i].bw = fb_calib_sig4(hw->kernels[i].bw);
  for (int i = 0; i < hw->nsplit_kernels; i++)
    hw->split_kernels[i].bw = fb_calib_sig4(hw->split_kernels[i].bw);
  return fb_calib_write_profile(c->path, hw, comment, c->force);
}

/* Reads a non-negative integer flag value in [lo, hi]; prints the usage error otherwise. */
static bool int_flag(const char *flag, const char *val, long lo, long hi, int *out) {
  char *end = NULL;
  long n = val ? strtol(val, &end, 10) : 0;
  if (!val || !*val || *end || n < lo || n > hi) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: '%s' is not allowed (want an integer in [%ld, %ld])", flag,
             val ? val : "", lo, hi);
    usage(msg);
    return false;
  }
  *out = (int)n;
  return true;
}

static const char help_text[] =
    USAGE_LINE
    "Measures this machine (GEMM curve, memory bandwidth, kernel overhead, per-kernel\n"
    "rates in training steps, the communicator) and writes a hardware profile.\n"
    "--comm local (default): the local communicator, profile models/hardware/cpu.yaml.\n"
    "--comm mpi (the default under mpirun): run as `mpirun -np 2 fsdpbench calibrate\n"
    "  --comm mpi`; measures the MPI communicator and writes it over the compute\n"
    "  figures of --base PROFILE (default cpu) into models/hardware/cpu-mpi.yaml.\n"
    "--repeat N: N runs, keeping the median of each figure (a step meets this\n"
    "  machine's typical speed, not its best minute).\n"
    "--out FILE: where to write. An existing FILE (such as the committed profile) is\n"
    "  refused (exit 2) before anything is measured; --force overwrites it. The file is\n"
    "  written to a temporary beside it and renamed, never left half-written.\n"
    "Refusals (exit 1, nothing written):\n"
    "  - machine too loaded: before and after each run it reads the 1-minute load\n"
    "    average less its own threads; above (idle cores + 0.25 x the cores it uses), or a\n"
    "    key figure varying more than 1.5x (max/min) across --repeat runs, it waits 10 s\n"
    "    and measures again, --retries N times (default 2), then refuses naming the load\n"
    "    or spread. --ignore-load measures and writes anyway; the profile's header then\n"
    "    says it was forced and the load it saw. The header always records the load,\n"
    "    the repeats and the spread of the key figures.\n"
    "  - rejected figure: every fitted figure is checked, one line each: a fit residual\n"
    "    above 25 % (relative RMS), a rate above its measured ceiling or below 1 % of it,\n"
    "    a non-positive latency, an efficiency outside (0, 1], a fit at a clamp bound.\n"
    "Test hook: FSDPBENCH_FAKE_LOADAVG=X replaces the load average read from /proc/loadavg.\n"
    "Exit codes: 0 written; 1 refused (load, spread, a rejected figure) or a runtime failure;\n"
    "  2 bad usage or an existing --out without --force. Progress goes to stderr.\n";

/* Reads the flags into c. Returns -1 to go on, else the exit code (help printed: 0; a bad
 * flag: its usage line printed, FB_EUSAGE). */
static int parse_cli(int argc, char **argv, calib_cli *c) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = NULL;
    size_t nlen = strcspn(a, "=");
    bool *sw = !strcmp(a, "--quick") ? &c->o.quick : !strcmp(a, "--force") ? &c->force
               : !strcmp(a, "--ignore-load") ? &c->ignore_load : NULL;
    if (sw) {
      *sw = true;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(help_text, stdout), 0;
    if (a[nlen] == '=') val = a + nlen + 1;
    else if (i + 1 < argc) val = argv[++i];
    char flag[64], msg[256];
    snprintf(flag, sizeof flag, "%.*s", (int)nlen, a);
    if (!strcmp(flag, "--out") || !strcmp(flag, "--base") || !strcmp(flag, "--backend") ||
        !strcmp(flag, "--attention-rows")) {
      if (!val || !*val) return snprintf(msg, sizeof msg, "%s needs a value", flag), usage(msg);
      bool be = !strcmp(flag, "--backend");
      char *dst = !strcmp(flag, "--out") ? c->path : !strcmp(flag, "--base") ? c->base
                  : be ? c->backend : c->rows;
      if (strlen(val) >= (be ? sizeof c->backend : sizeof c->path))
        return snprintf(msg, sizeof msg, "%s: '%.40s...' is too long", flag, val), usage(msg);
      snprintf(dst, be ? sizeof c->backend : sizeof c->path, "%s", val);
    } else if (!strcmp(flag, "--repeat")) {
      if (!int_flag("--repeat", val, 1, 100, &c->repeat)) return FB_EUSAGE;
    } else if (!strcmp(flag, "--retries")) {
      if (!int_flag("--retries", val, 0, 100, &c->retries)) return FB_EUSAGE;
    } else if (!strcmp(flag, "--threads")) {
      if (!int_flag("--threads", val, 1, 1024, &c->o.threads)) return FB_EUSAGE;
    } else if (!strcmp(flag, "--comm") && val && (!strcmp(val, "local") || !strcmp(val, "mpi"))) {
      c->mpi = !strcmp(val, "mpi");
    } else if (!strcmp(flag, "--comm")) {
      snprintf(msg, sizeof msg, "--comm: '%s' is not allowed (allowed: local, mpi)", val ? val : "");
      return usage(msg);
    } else {
      snprintf(msg, sizeof msg, "unknown flag '%s' (allowed: --out, --force, --threads, --repeat, "
               "--retries, --ignore-load, --comm, --base, --backend, --attention-rows, --quick)", a);
      return usage(msg);
    }
  }
  return -1;
}

/* What must hold before anything is measured: a writable --out, a well-formed test hook. */
static int preflight(calib_cli *c) {
  if (!c->path[0])
    snprintf(c->path, sizeof c->path, "%s/models/hardware/%s.yaml", fb_data_root(),
             c->mpi ? "cpu-mpi" : "cpu");
#ifndef FB_HAVE_MPI
  if (c->mpi) return usage("--comm mpi: MPI is not built into this binary (install libopenmpi-dev "
                           "and rebuild)");
#endif
  if (fb_calib_check_out(c->path, c->force) != FB_OK) {
    fprintf(stderr, "calibrate: %s\n", fb_error_msg());
    return FB_EUSAGE;
  }
  fb_calib_load probe;
  if (fb_calib_load_read(c->o.threads, 0, &probe) != FB_OK) return usage(fb_error_msg());
  return -1;
}

/* --comm mpi: the compute figures come from --base (a plain calibrate measures them); this
 * run measures the MPI communicator and writes it over them. */
static fb_status mpi_begin(const calib_cli *c, fb_hardware *hw, int *rank, int *world) {
  fb_status st = fb_hardware_load(c->base, hw);
  if (st != FB_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", fb_error_msg());
    return FB_ERR(st, "--base: %s (run `fsdpbench calibrate` first: the MPI profile takes its "
                  "compute figures from it)", why);
  }
#ifdef FB_HAVE_MPI
  return fb_calib_mpi_begin(rank, world);
#else
  (void)rank, (void)world;
  return FB_OK;
#endif
}

/* One attempt's measurement (the load before it passed): the compute runs, or under MPI the
 * communicator over the base profile `hw`. Sets *refused when the load during it says so. */
static fb_status measure_once(calib_cli *c, load_log *L, const fb_hardware *hw, int rank,
                              fb_hardware *runs, fb_calib_diag *diags, char *why, size_t nwhy,
                              bool *refused) {
  if (!c->mpi) return measure_local(c, L, runs, diags, why, nwhy, refused);
  fb_status st = FB_OK;
#ifdef FB_HAVE_MPI
  bool over = false;
  fb_calib_diag_init(&diags[0]);
  runs[0] = *hw;
  st = fb_calibrate_mpi_comm(&runs[0], c->o.quick, rank != 0, &diags[0].comm_rms);
  if (st == FB_OK) st = check_load(c, L, "during measuring", false, why, nwhy, &over);
  if (st == FB_OK && over && c->ignore_load) force(L, false, why);
  *refused = over && !c->ignore_load;
#else
  (void)L, (void)hw, (void)rank, (void)runs, (void)diags, (void)why, (void)nwhy, (void)refused;
#endif
  return st;
}

/* Measures, refusing (after --retries) a loaded machine: *refused says it gave up. */
static fb_status measure_with_retries(calib_cli *c, load_log *L, const fb_hardware *hw, int rank,
                                      fb_hardware *runs, fb_calib_diag *diags, char *why,
                                      size_t nwhy, bool *refused) {
  fb_status st = FB_OK;
  for (int attempt = 0; st == FB_OK && attempt <= c->retries; attempt++) {
    bool over = false;
    *refused = false;
    L->have = false; /* the header describes the attempt that measured */
    st = check_load(c, L, "before measuring", true, why, nwhy, &over);
    int verdict = over && !c->ignore_load;
    if (st == FB_OK) st = share_verdict(c, rank, &verdict); /* rank 0's decides */
    if (st != FB_OK) break;
    if (over && !verdict) force(L, false, why);
    if (!verdict) {
      st = measure_once(c, L, hw, rank, runs, diags, why, nwhy, refused);
      verdict = *refused;
      if (st == FB_OK) st = share_verdict(c, rank, &verdict);
      *refused = verdict;
      if (st != FB_OK || !verdict) break;
    }
    *refused = true;
    if (attempt < c->retries) {
      if (rank == 0)
        printf("calibrate: warning: machine too loaded: %s; measuring again in %d s (retry %d of "
               "%d)\n", why, FB_CALIB_RETRY_PAUSE_S, attempt + 1, c->retries);
      fflush(stdout);
      sleep(FB_CALIB_RETRY_PAUSE_S);
    }
  }
  return st;
}

/* Plausibility of every fitted figure, then the profile. Returns the exit code's part (0 / 1). */
static int check_and_write(calib_cli *c, fb_hardware *hw, fb_hardware *runs,
                           fb_calib_diag *diags, int world, const load_log *L, double t0,
                           fb_status *st) {
  int bad;
  if (!c->mpi) {
    bad = check_runs(runs, diags, c->repeat, true);
    if (!bad) median_of_runs(runs, c->repeat, hw);
  } else {
    diags[0].triad = runs[0].mem_bw; /* the base profile's: copies cannot outrun caches */
    bad = check_runs(runs, diags, 1, false);
    *hw = runs[0];
  }
  if (bad) {
    fprintf(stderr, "calibrate: %d figure(s) rejected (the 'calibrate: rejected' lines on "
            "stdout): nothing written (a loaded or unstable machine gives fits like these; "
            "calibrate on an idle machine)\n", bad);
    return 1;
  }
  if (!c->mpi && c->repeat > 1)
    printf("\ncalibrate: the median of %d runs: peak %.1f GFLOP/s, GEMM curve %.3f, %.0f, "
           "communicator %.2f GB/s, %.1f us\n", c->repeat, hw->peak_fp32 * 1e-9,
           hw->gemm_max_eff, hw->gemm_half_size, hw->intra_bw * 1e-9, hw->intra_lat * 1e6);
  *st = write_profile(c, hw, world, L);
  if (*st == FB_OK && L->forced)
    printf("calibrate: warning: forced with --ignore-load: %s%s%s\n", L->forced_load,
           L->forced_load[0] && L->forced_spread[0] ? "; " : "", L->forced_spread);
  if (*st == FB_OK) printf("\ncalibrate: wrote %s in %.1f s\n", c->path, fb_cpu_clock() - t0);
  return 0;
}

static int report_error(fb_status st) {
  if (st == FB_EUSAGE && strstr(fb_error_msg(), " exists (it may be a committed profile)"))
    fprintf(stderr, "calibrate: %s\n", fb_error_msg());
  else
    fprintf(stderr, "fsdpbench calibrate: error: %s\n", fb_error_msg());
  return fb_exit_code(st); /* the documented codes, not the status's number */
}

int fb_calibrate_main(int argc, char **argv) {
  calib_cli c = {.o = {.threads = (int)sysconf(_SC_NPROCESSORS_ONLN), .quick = false},
                 .repeat = 1, .retries = 2};
  snprintf(c.base, sizeof c.base, "cpu");
  const char *ompi_size = getenv("OMPI_COMM_WORLD_SIZE");
  c.mpi = ompi_size && atoi(ompi_size) > 1; /* under mpirun: the MPI communicator */
  int rc = parse_cli(argc, argv, &c);
  if (rc >= 0) return rc;
  if (c.backend[0] && strcmp(c.backend, "cpu")) { /* a GPU (or its cpu-opaque stand-in) */
    fb_calib_dev_opts d = {.force = c.force, .quick = c.o.quick};
    snprintf(d.backend, sizeof d.backend, "%s", c.backend);
    snprintf(d.out, sizeof d.out, "%s", c.path);
    snprintf(d.base, sizeof d.base, "%s", strcmp(c.base, "cpu") ? c.base : "");
    snprintf(d.rows, sizeof d.rows, "%s", c.rows);
    return fb_calibrate_device_main(&d);
  }
  if (c.rows[0]) return usage("--attention-rows needs --backend cuda (or cpu-opaque)");
  if ((rc = preflight(&c)) >= 0) return rc;
  fb_hardware hw;
  memset(&hw, 0, sizeof hw);
  fb_hardware *runs = calloc((size_t)c.repeat, sizeof *runs);
  fb_calib_diag *diags = calloc((size_t)c.repeat, sizeof *diags);
  load_log L;
  memset(&L, 0, sizeof L);
  int rank = 0, world = 1;
  rc = 0;
  double t0 = fb_cpu_clock();
  fb_status st = runs && diags ? FB_OK : FB_ERR(FB_ENOMEM, "calibrate: out of host memory");
  if (st == FB_OK && c.mpi) st = mpi_begin(&c, &hw, &rank, &world);
  if (st == FB_OK) st = fb_calib_own_start();
  char why[600] = "";
  bool refused = false;
  if (st == FB_OK)
    st = measure_with_retries(&c, &L, &hw, rank, runs, diags, why, sizeof why, &refused);
  fb_calib_own_stop();
  if (st == FB_OK && refused) {
    if (rank == 0)
      fprintf(stderr, "calibrate: machine too loaded: %s; refused after %d attempt(s) "
              "(--retries %d): calibrate on an idle machine, or force with --ignore-load\n", why,
              c.retries + 1, c.retries);
    rc = 1;
  }
  if (st == FB_OK && !rc && rank == 0)
    rc = check_and_write(&c, &hw, runs, diags, world, &L, t0, &st);
  if (st != FB_OK) rc = report_error(st);
#ifdef FB_HAVE_MPI
  if (c.mpi) fb_calib_mpi_end();
#endif
  free(runs);
  free(diags);
  return rc;
}
