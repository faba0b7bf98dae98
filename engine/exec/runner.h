/* One run of the product: build the model, open one device + communicator per rank (threads
 * for local/sim, this process for mpi/nccl), set up the strategy, run the steps through the
 * executor, gather the results. The result is what the report, the CSV/JSON records, the
 * trace writer, `compare` and `plan` consume. It prints nothing unless cfg->quiet is false
 * (then: the per-step log lines). */
#ifndef FB_RUNNER_H
#define FB_RUNNER_H
#include <stdbool.h>
#include <stdint.h>

#include "../config/config.h"
#include "../model/model.h"
#include "../device/recorder.h"

typedef struct fb_rank_result {
  int rank;
  fb_step_stats *steps;       /* [nsteps] */
  fb_mem_stats mem;           /* after the last step, peaks over the whole run */
  fb_mem_stats mem_setup;     /* after setup and the executor's buffers, before step 0 */
  int64_t persistent_bytes;   /* params + grads + optimizer state owned after setup */
  double zero3_imbalance;     /* max / mean owned elements (zero3), else 1 */
  struct fb_recorder *rec;    /* kept for the trace writer; owned by the result */
} fb_rank_result;

typedef struct fb_run_result {
  fb_run_config cfg;          /* copy, finalized */
  fb_model model;             /* owned */
  char backend[16], comm[16], hardware[64];
  bool predicted;             /* sim: every time figure is a prediction, no loss values */
  int world;                  /* ranks in the run (all processes) */
  int nsteps;                 /* steps this run executed (and the arrays below hold) */
  int first_step;             /* the step they start at: > 0 when resumed from a checkpoint */
  double *loss;               /* [nsteps] global mean token loss (NaN when predicted) */
  double *grad_norm;          /* [nsteps] before clipping (NaN when predicted) */
  double *lr;                 /* [nsteps] */
  double param_sum;           /* final, full params, model order, fp64 (NaN when predicted) */
  fb_rank_result *ranks;      /* ranks held by this process */
  int nranks;
  double peak_flops;          /* per rank: the hardware profile's dense peak for the params'
                               * dtype (shared-host profiles: over the ranks on this node); 0 =
                               * no profile. Never measured: the same figure every run */
  char peak_src[1024];        /* where peak_flops comes from, for the header */
  int64_t mem_capacity;       /* bytes per device from the hardware profile (0 without one) */
  int64_t tokens_per_step;    /* global */
  double model_flops_per_step;/* global: 3 x forward matmul FLOPs */
  char blas[128];             /* library and kernel actually running */
  double wall_s;              /* whole run, host clock */
  double startup_ms;          /* exec to the first step's start on this process's first rank
                               * (fb_startup_ms, measured; NaN when no step ran) */
  double first_step_unix_s;   /* that moment on the wall clock (CLOCK_REALTIME, s since the
                               * epoch): what a caller timing the exec from outside compares */
} fb_run_result;

fb_status fb_run(const fb_run_config *cfg, fb_run_result *res);
/* The global batch a run takes when --batch is not given: one sequence per rank, at least 8
 * (rounded up to a multiple of the world). */
int fb_auto_batch(int world);
/* --world auto: 1 for a one-rank strategy; on sim the profile's devices per node (8 without
 * one); on an executing backend one rank per device it has here (cuda: the visible GPUs, so 1 on
 * a one-GPU machine), else (none counted, a CPU backend) 2. */
int fb_auto_world(bool one_rank, bool executes, int devices_here, int profile_devices);
/* Ranks that are threads of one process on a communicator that needs a device each (nccl):
 * FB_EUSAGE, one line naming --world, --comm and what to use instead, when they outnumber the
 * devices here (devices_here > 0); FB_OK otherwise. Checked before any rank starts. */
fb_status fb_check_own_devices(int world, const char *comm, int devices_here);
/* What --param-dtype auto means for a backend and its hardware profile: bf16 (with fp32
 * masters) on cuda and on sim with a GPU profile, fp32 on the cpu backend and cpu profiles.
 * Any other dtype is returned as it is. */
fb_dtype fb_resolve_param_dtype(fb_dtype t, const char *backend, const struct fb_hardware *hw);
/* Whether a run is a GPU run: the cuda backend, or sim with a GPU profile. */
bool fb_run_on_gpu(const char *backend, const struct fb_hardware *hw);
void fb_run_result_free(fb_run_result *res);

/* The number a step carries wherever it is printed (the step log line, steps.csv, report.json,
 * the trace's ProfilerStep#N and args.step): 1-based, counting from the start of training,
 * so a resumed run goes on where it stopped. `step` is the 0-based step index the executor
 * and the recorder use (fb_rec_op.step, the loop variable); fb_run_result arrays hold steps
 * first_step.. so their entry k is index first_step + k. */
static inline int fb_step_number(int step) { return step + 1; }

#endif
