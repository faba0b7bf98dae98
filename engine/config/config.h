/* The run configuration: every option a run has, its default, the YAML file and the CLI
 * flags that set it (CLI overrides the file), and the checks that turn bad input into one
 * clear line (FB_EUSAGE naming the key or flag, the bad value and what is allowed).
 * It does not run anything. */
#ifndef FB_CONFIG_H
#define FB_CONFIG_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/types.h"
#include "../model/model.h"

typedef enum fb_accum_mode {
  FB_ACCUM_REDUCE = 0,  /* reduce gradients every micro-step (default) */
  FB_ACCUM_NO_RESHARD,  /* keep gathered params across micro-steps (ZeRO-2 style) */
  FB_ACCUM_NO_REDUCE    /* keep unsharded grads, reduce at the last micro-step (ZeRO-1 style) */
} fb_accum_mode;

typedef struct fb_run_config {
  /* what */
  char model[256];       /* name in models/ or a path to a YAML file */
  fb_model_spec spec;    /* loaded from `model` */
  char strategy[32];     /* single | ddp | zero3 | fsdp | yafsdp */
  char backend[16];      /* auto | cpu | cuda | sim */
  char comm[16];         /* auto | local | mpi | nccl | sim */
  char hardware[256];    /* profile name in models/hardware/ or a path ("" = backend default) */
  int world;             /* ranks (local/sim); mpi/nccl take it from the launcher */
  /* batch */
  int batch;             /* global batch, sequences per step */
  int micro_batch;       /* sequences per micro-step per rank (0 = batch/world) */
  int seq;               /* tokens per sequence (0 = min(256, model max_seq)) */
  int steps;
  /* optimisation */
  char optimizer[16];    /* adamw | sgd */
  double lr, min_lr, beta1, beta2, eps, weight_decay, momentum, grad_clip;
  int warmup;            /* linear warmup steps; then cosine decay to min_lr */
  char schedule[16];     /* cosine | constant */
  uint64_t seed;
  char data[512];        /* "synthetic" or a token file (see engine/exec/data.h) */
  /* strategy options */
  bool prefetch_forward, prefetch_backward, reshard_after_forward;
  int max_inflight;      /* fsdp: gathers in flight at once (>= 1) */
  fb_accum_mode accum;
  int64_t bucket_bytes;  /* ddp gradient bucket size */
  fb_dtype param_dtype, reduce_dtype;
  bool recompute;        /* activation recomputation (block granularity) */
  /* resources and output */
  int threads;           /* CPU threads per process (0 = all cores) */
  int64_t mem_limit;     /* bytes per rank (0 = none on cpu; device capacity on cuda/sim) */
  double timeout_s;      /* collective timeout */
  char out[512];         /* output directory ("" = none) */
  bool trace;
  int trace_wait, trace_warmup, trace_active;
  bool mem_snapshot;
  int log_every;
  bool quiet;
} fb_run_config;

void fb_config_defaults(fb_run_config *c);
/* Applies a YAML mapping of the same keys as the long flags (with '_' or '-'). */
fb_status fb_config_load_yaml(fb_run_config *c, const char *path);
/* Parses argv[first..argc) flags; --config is applied first wherever it appears. Leaves
 * *help set when --help was given. */
fb_status fb_config_parse_args(fb_run_config *c, int argc, char **argv, int first, bool *help);
/* Loads the model spec and checks every value against every other (seq <= max_seq, batch
 * divisible, strategy known ...). */
fb_status fb_config_finalize(fb_run_config *c);
/* Prints every flag with its default and meaning. */
void fb_config_print_help(FILE *f);

/* Model YAML (models/NAME.yaml or a path). Unknown keys and bad values are FB_EUSAGE. */
fb_status fb_model_spec_load(const char *name_or_path, fb_model_spec *out);
/* Directory holding models/ (FSDPBENCH_HOME, else next to the executable, else the source
 * tree, else "."). */
const char *fb_data_root(void);
/* Resolves `name` inside root/sub with extension .yaml, or returns name if it is a path. */
fb_status fb_resolve_yaml(const char *sub, const char *name, char *out, size_t n);

#endif
