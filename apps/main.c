/* fsdpbench: the command line. Subcommands: (default) train/run, prepare, plan, calibrate,
 * selftest, export, trace-merge. It parses, runs, prints and exits: 0 success, 2 bad input
 * (one line on stderr), 3 does not fit (a simulated peak above the device, or an executed run
 * refused up front), 4 timeout or peer failure, 1 any other failure (one line with file:line
 * context), 77 skipped (selftest without GPU).
 * Before anything else it makes sure the libraries load with the environment they need (the
 * BLAS kernel for this CPU where the library misdetects it; idle OpenMP threads that sleep):
 * it sets the variables and re-executes itself once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../traces/chrome_trace.h"
#include "../traces/kineto_trace.h"
#include "../strategies/strategy.h"
#include "../traces/memory_snapshot.h"
#include "../engine/comm/comm.h"
#include "../engine/config/config.h"
#include "../engine/core/launcher.h"
#include "../engine/core/json_out.h"
#include "../engine/core/out_dir.h"
#include "../engine/core/startup.h"
#include "compare.h"
#include "export.h"
#include "trace_merge.h"
#include "../engine/exec/data.h"
#include "../engine/exec/runner.h"
#include "common/report.h"
#include "../engine/ops/blas.h"
#include "selftest.h"
#include "calibrate/calibrate.h"
#include "plan.h"
#include "validate/validate.h"
#include "../engine/backends/registry.h"

static int fail(fb_status st) {
  if (st == FB_EUSAGE)
    fprintf(stderr, "fsdpbench: error: %s\n", fb_error_msg());
  else if (st == FB_ENOMEM || st == FB_EUNSUPPORTED)
    fprintf(stderr, "fsdpbench: error: %s [%s]\n", fb_error_msg(), fb_status_name(st));
  else
    fprintf(stderr, "fsdpbench: error: %s [%s, %s]\n", fb_error_msg(), fb_status_name(st),
            fb_error_where());
  return fb_exit_code(st);
}

/* glibc's memcpy/memset switch to non-temporal stores above a threshold it derives from the L3
 * size the CPU reports. A VM slice of a few vCPUs reports the whole socket's L3 (a 2-vCPU Xeon
 * slice: 480 MiB, threshold 190 MB), so the engine's 7-28 MB copies (all-gather shards, the
 * flat-gradient concatenation, reduce-scatter staging) are written through a cache that does
 * not hold them and evict the working set. When the reported L3 exceeds 16 MiB per CPU this
 * process may run on, the threshold is set to 4 MiB (measured there, bench/bench_all.sh: fsdp
 * W=2 0.84 -> 0.88 of single, W=4 0.64 -> 0.68, yafsdp 0.88 -> 0.90 and 0.68 -> 0.72; single
 * unchanged). Returns the GLIBC_TUNABLES setting, or NULL to leave glibc's choice. */
#define FB_NT_THRESHOLD "glibc.cpu.x86_non_temporal_threshold=4194304"
static const char *nt_tunable(void) {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (getenv("GLIBC_TUNABLES") || l3 <= 0 || cpus <= 0) return NULL;
  return l3 / cpus > (16L << 20) ? FB_NT_THRESHOLD : NULL;
}

/* Re-executes itself once with the environment the libraries must see when they load: the BLAS
 * kernel override this CPU needs, OpenMP threads that sleep instead of spinning when idle
 * (libgomp spins ~300000 rounds by default; on cores shared with other ranks or processes the
 * spinning threads took half of the CPU time of a gpt2-124m step), and glibc's non-temporal
 * store threshold where the reported L3 is a socket's (nt_tunable). A user's own
 * OMP_WAIT_POLICY, GOMP_SPINCOUNT or GLIBC_TUNABLES is left alone. */
static void maybe_reexec(char **argv) {
  if (getenv("FSDPBENCH_NO_REEXEC")) return;
  const char *hint = fb_blas_kernel_hint(), *nt = nt_tunable();
  int spin = !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT");
  if (!hint && !spin && !nt) return;
  if (spin) setenv("GOMP_SPINCOUNT", FB_GOMP_SPINCOUNT, 1);
  if (nt) setenv("GLIBC_TUNABLES", nt, 1);
  char *copy = hint ? strdup(hint) : NULL;
  if (hint && (!copy || putenv(copy))) return;
  setenv("FSDPBENCH_NO_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  /* exec failed: keep running with the library's own choice */
}

static int cmd_prepare(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "fsdpbench: error: prepare: want `fsdpbench prepare TEXT_FILE OUT.tok`\n");
    return 2;
  }
  uint64_t n = 0;
  fb_status st = fb_data_prepare(argv[2], argv[3], &n);
  if (st != FB_OK) return fail(st);
  printf("prepare: %s -> %s: %llu byte-level tokens (vocab 256)\n", argv[2], argv[3],
         (unsigned long long)n);
  return 0;
}

/* The subcommands: one entry each, the table --help, the dispatch and the unknown-subcommand
 * line read. main takes the whole argv (argv[1] is the subcommand's name). `own_help`: the
 * subcommand prints its own usage for --help; otherwise `fsdpbench NAME --help` prints the
 * synopsis and summary below (stdout, exit 0). `train` (the default) is cmd_run. */
typedef struct {
  const char *name, *synopsis, *summary;
  int (*main)(int argc, char **argv);
  bool own_help;
} fb_subcommand;

static int sub_export(int argc, char **argv) { return fb_export_main(argc - 1, argv + 1); }
static int sub_merge(int argc, char **argv) { return fb_trace_merge_main(argc - 1, argv + 1); }
static int sub_compare(int argc, char **argv) { return fb_compare_main(argc - 1, argv + 1); }
static int sub_plan(int argc, char **argv) { return fb_plan_main(argc - 1, argv + 1); }
static int sub_validate(int argc, char **argv) { return fb_validate_main(argc - 1, argv + 1); }
static int sub_calibrate(int argc, char **argv) { return fb_calibrate_main(argc - 1, argv + 1); }

static const fb_subcommand SUBCOMMANDS[] = {
    {.name = "plan", .synopsis = "plan [flags]", .main = sub_plan, .own_help = true,
     .summary = "rank every strategy in simulation"},
    {.name = "compare", .synopsis = "compare [flags]", .main = sub_compare, .own_help = true,
     .summary = "run several strategies side by side"},
    {.name = "calibrate", .synopsis = "calibrate [--out F] [--force] [--repeat N]",
     .main = sub_calibrate, .own_help = true,
     .summary = "measure this machine into a profile"},
    {.name = "validate", .synopsis = "validate [flags] | validate --dataset F",
     .main = sub_validate, .own_help = true,
     .summary = "executed vs simulated, op by op, side-by-side trace; or the simulator against "
                "public GPU measurements"},
    {.name = "selftest",
     .synopsis = "selftest --backend cuda|cpu-opaque [--only kernels|strategies|all]",
     .main = fb_selftest_main,
     .summary = "device kernels and strategies vs the CPU (exit 0 all pass, 1 a mismatch)"},
    {.name = "prepare", .synopsis = "prepare TEXT OUT.tok", .main = cmd_prepare,
     .summary = "byte-level tokens (vocab 256) from any file, for --data"},
    {.name = "export", .synopsis = "export CKPT OUT.safetensors", .main = sub_export,
     .own_help = true, .summary = "a checkpoint's model for other tools"},
    {.name = "trace-merge", .synopsis = "trace-merge OUT.json rank0_trace.json ...",
     .main = sub_merge, .own_help = true, .summary = "MPI traces on one clock"},
};

static const fb_subcommand *subcommand(const char *name) {
  for (int i = 0; i < (int)(sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0]); i++)
    if (!strcmp(SUBCOMMANDS[i].name, name)) return &SUBCOMMANDS[i];
  return NULL;
}

static void print_subcommands(FILE *f) {
  for (int i = 0; i < (int)(sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0]); i++) {
    char syn[96];
    snprintf(syn, sizeof syn, "fsdpbench %s", SUBCOMMANDS[i].synopsis);
    if (strlen(syn) > 33) fprintf(f, "       %s\n       %-33s", syn, ""); /* long: 2 lines */
    else fprintf(f, "       %-33s", syn);
    fprintf(f, " %s\n", SUBCOMMANDS[i].summary);
  }
}

/* A simulated run reports what it predicts even when the peak exceeds the device: then one
 * line says so and the exit code is 3 (does not fit). */
static int predicted_fit(const fb_run_result *res) {
  if (!res->predicted) return 0;
  int64_t peak = 0;
  for (int i = 0; i < res->nranks; i++)
    if (res->ranks[i].mem.peak_total > peak) peak = res->ranks[i].mem.peak_total;
  int64_t reserved = 0;
  const int64_t ooms = fb_report_ooms(res, &reserved);
  if (res->mem_capacity <= 0 || (peak <= res->mem_capacity && ooms == 0)) return 0;
  if (peak > res->mem_capacity)
    fprintf(stderr, "fsdpbench: does not fit: predicted peak %.1f GiB allocated per rank > %.1f "
            "GiB of one %s device (recompute, more ranks, a smaller micro-batch or a sharding "
            "strategy lower it; exit 3)\n", (double)peak / 1073741824.0,
            (double)res->mem_capacity / 1073741824.0, res->hardware);
  else
    fprintf(stderr, "fsdpbench: does not fit: predicted peak %.1f GiB allocated per rank fits "
            "%.1f GiB of one %s device, but the caching allocator's reserved memory reaches "
            "%.1f GiB: %lld predicted out-of-memory error(s) (fragmentation; recompute, more "
            "ranks or a smaller micro-batch lower it; exit 3)\n", (double)peak / 1073741824.0,
            (double)res->mem_capacity / 1073741824.0, res->hardware,
            (double)reserved / 1073741824.0, (long long)ooms);
  return 3;
}

/* --list-strategies: one registered name per line and nothing else, for scripts (--help
 * says what each is). --list-backends: one per line, then what it is and whether it can run. */
static int list_registry(const char *what) {
  if (!strcmp(what, "--list-strategies")) {
    for (int i = 0; fb_strategy_at(i); i++) printf("%s\n", fb_strategy_at(i)->name);
  } else {
    for (int i = 0; fb_device_entry_at(i); i++) {
      char why[256] = "";
      bool ok = fb_device_available(fb_device_entry_at(i)->name, why, sizeof why);
      printf("%-10s %s%s%s\n", fb_device_entry_at(i)->name, fb_device_entry_at(i)->help,
             ok ? "" : "; not usable here: ", ok ? "" : why);
    }
  }
  return 0;
}

static fb_status stopped(void) {
  return FB_ERR(FB_EINTERRUPTED, "--out: stopped by signal %d while writing the outputs",
                fb_out_dir_stopped());
}

static fb_status write_set(const char *dir, const fb_run_config *cfg, const fb_run_result *res) {
  FB_TRY(fb_report_write(dir, res));
  if (fb_out_dir_stopped()) return stopped();
  if (cfg->trace) FB_TRY(fb_trace_write(dir, res));
  if (fb_out_dir_stopped()) return stopped();
  if (cfg->trace) FB_TRY(fb_kineto_write(dir, res));
  if (fb_out_dir_stopped()) return stopped();
  if (cfg->mem_snapshot) FB_TRY(fb_memsnap_write(dir, res));
  return FB_OK;
}

/* The run's --out set, whole or absent (engine/core/out_dir.h): written beside --out and
 * renamed into place when every file is complete. Under mpi / nccl each process writes its own
 * ranks' files into --out itself (each file whole; several processes share the folder). */
static fb_status write_outputs(const fb_run_config *cfg, const fb_run_result *res) {
  if (res->nranks != res->world) return write_set(cfg->out, cfg, res);
  static const char *const ours[] = {"summary.csv", "steps.csv", "memory.csv", "ledger.csv",
                                      "report.json", "trace.json", FB_KINETO_DIR,
                                      "memory_snapshot.pickle", NULL};
  fb_out_dir od;
  FB_TRY(fb_out_dir_begin(&od, cfg->out, ours, "--out"));
  fb_status st = write_set(fb_out_dir_path(&od), cfg, res);
  return st == FB_OK ? fb_out_dir_commit(&od) : fb_out_dir_fail(&od, st);
}

/* A run that failed: the one line, then, in an MPI job, MPI_Abort with the exit code (every
 * process of the job ends; MPI_Finalize could wait forever for a peer stuck in a collective).
 * A stop by signal is the exception: every rank stopped after the same step, together. */
static int failed_run(fb_status st, bool mpi) {
  int rc = fail(st);
#ifdef FB_HAVE_MPI
  if (mpi && st == FB_EINTERRUPTED) fb_mpi_finalize();
  else if (mpi) rc = fb_mpi_fail(rc);
#else
  (void)mpi;
#endif
  return rc;
}

static int cmd_run(int argc, char **argv, int first) {
  for (int i = first; i < argc; i++)
    if (!strcmp(argv[i], "--list-strategies") || !strcmp(argv[i], "--list-backends"))
      return list_registry(argv[i]);
  fb_run_config cfg;
  fb_cli_action action = FB_CLI_RUN;
  fb_config_defaults(&cfg);
  fb_status st = fb_config_parse_cli(&cfg, argc, argv, first, &action);
  if (st != FB_OK) return fail(st);
  if (action == FB_CLI_HELP) {
    printf("usage: fsdpbench [train] [flags]      train / simulate one configuration\n");
    print_subcommands(stdout);
    printf("       fsdpbench --list-strategies | --list-backends   the registries, one name per "
           "line\n"
           "       fsdpbench SUBCOMMAND --help    a subcommand's own usage\n\n"
           "exit codes: 0 ok; 1 runtime failure; 2 bad usage, configuration or input (one line "
           "naming it); 3 does not fit in memory; 4 timeout or peer failure\n"
           "launchers: torchrun, mpirun (Open MPI), mpiexec (MPICH/Hydra) and srun (Slurm) set "
           "each process's rank, world and local rank (--dry-run prints them)\n\n"
           "strategies (the registry; --list-strategies prints the names alone):\n");
    for (int i = 0; fb_strategy_at(i); i++)
      printf("  %-8s %s\n", fb_strategy_at(i)->name, fb_strategy_at(i)->summary);
    printf("\n");
    fb_config_print_help(stdout, fb_strategy_names());
    return 0;
  }
  if (action == FB_CLI_VERSION) {
    printf("fsdpbench %s (BLAS %s)\n", FB_VERSION, fb_blas_describe());
    return 0;
  }
  st = fb_run_config_finalize(&cfg);
  if (st != FB_OK) return fail(st);
  fb_startup_mark("configuration parsed");
  /* MPI joins mpirun's, mpiexec's and srun's processes (not torchrun's: the runner refuses a
   * CPU run there); a dry run opens no communicator */
  fb_launch launch;
  st = fb_launch_detect(&launch);
  if (st != FB_OK) return fail(st);
  const bool mpi = !cfg.dry_run && (!strcmp(cfg.comm, "mpi") ||
                                    (!strcmp(cfg.comm, "auto") && launch.launched &&
                                     launch.mpi_joins));
  int rank = 0, world = 1;
  (void)world;
  if (mpi) {
#ifdef FB_HAVE_MPI
    st = fb_mpi_init(&argc, &argv, &rank, &world);
    if (st != FB_OK) return fb_mpi_fail(fail(st));
#else
    fb_error_set(FB_EUSAGE, __FILE__, __LINE__, "--comm: 'mpi' is not built into this binary "
                 "(install libopenmpi-dev and rebuild)");
    return fail(FB_EUSAGE);
#endif
  }
  if (cfg.out[0] && !cfg.dry_run) { /* found now, not after the run; created only at the end */
    st = mpi ? fb_mkdir_p(cfg.out) : fb_out_dir_check(cfg.out, "--out");
    if (st == FB_OK && mpi && access(cfg.out, W_OK))
      st = FB_ERR(FB_EUSAGE, "--out: '%s' is not writable: %s", cfg.out, strerror(errno));
    if (st == FB_OK) st = fb_report_check_out(cfg.out);
    if (st != FB_OK) return failed_run(st == FB_EIO ? FB_EUSAGE : st, mpi);
  }
  fb_run_result res;
  st = fb_run(&cfg, &res);
  fb_startup_mark("run done");
  if (cfg.dry_run) { /* printed by the run; nothing ran */
    int rc = st == FB_OK ? 0 : fail(st);
#ifdef FB_HAVE_MPI
    if (mpi) fb_mpi_finalize();
#endif
    return rc;
  }
  const bool ran = st == FB_OK; /* res holds a result to free */
  /* --quiet drops the step lines, never the closing report */
  if (st == FB_OK && rank == 0) fb_report_print(stdout, &res);
  if (st == FB_OK && cfg.out[0]) {
    st = write_outputs(&cfg, &res);
    if (st == FB_OK && rank == 0) printf("outputs written under %s/\n", cfg.out);
  }
  fb_startup_mark("report printed, outputs written");
  if (st != FB_OK) {
    if (ran) fb_run_result_free(&res); /* the outputs failed, not the run */
    return failed_run(st, mpi);
  }
  int rc = predicted_fit(&res);
  fb_run_result_free(&res);
  fb_startup_mark("run freed");
#ifdef FB_HAVE_MPI
  if (mpi) fb_mpi_finalize();
#endif
  return rc;
}

int main(int argc, char **argv) {
  fb_startup_mark("main");
  maybe_reexec(argv);
  if (getenv("FB_STARTUP_TRACE")) {
    char what[320];
    const char *spin = getenv("GOMP_SPINCOUNT"), *tun = getenv("GLIBC_TUNABLES");
    snprintf(what, sizeof what, "library environment set (GOMP_SPINCOUNT=%s, GLIBC_TUNABLES=%s)",
             spin ? spin : "unset", tun ? tun : "unset");
    fb_startup_mark(what);
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *sub = argc > 1 ? argv[1] : "";
  if (!strcmp(sub, "train") || !strcmp(sub, "run")) return cmd_run(argc, argv, 2);
  const fb_subcommand *c = subcommand(sub);
  if (c) {
    const bool help = argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"));
    if (help && !c->own_help) {
      printf("usage: fsdpbench %s\n  %s\n", c->synopsis, c->summary);
      return 0;
    }
    return c->main(argc, argv);
  }
  if (sub[0] && sub[0] != '-') {
    fprintf(stderr, "fsdpbench: error: unknown subcommand '%s' (allowed: train", sub);
    for (int i = 0; i < (int)(sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0]); i++)
      fprintf(stderr, ", %s", SUBCOMMANDS[i].name);
    fprintf(stderr, ", or flags; see --help)\n");
    return 2;
  }
  return cmd_run(argc, argv, 1);
}
