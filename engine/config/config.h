/* The run configuration: every option a run has, its default, the YAML file and the CLI
 * flags that set it (CLI overrides the file), and the checks that turn bad input into one
 * clear line (FB_EUSAGE naming the key or flag, the bad value and what is allowed).
 * It does not run anything. */
#ifndef FB_CONFIG_H
#define FB_CONFIG_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/data_root.h"
#include "../core/types.h"
#include "../core/yaml_flat.h"
#include "../model/model.h"
#include "../model/transformer.h" /* fb_recompute */

typedef enum fb_accum_mode {
  FB_ACCUM_REDUCE = 0,  /* reduce gradients every micro-step (default) */
  FB_ACCUM_NO_RESHARD,  /* keep gathered params across micro-steps (ZeRO-2 style) */
  FB_ACCUM_NO_REDUCE    /* keep unsharded grads, reduce at the last micro-step (ZeRO-1 style) */
} fb_accum_mode;

typedef struct fb_run_config {
  /* what */
  char model[256];       /* name in models/ or a path to a YAML file */
  fb_model_spec spec;    /* loaded from `model` */
  char strategy[32];     /* a name in the strategy registry (--list-strategies) */
  char backend[16];      /* auto, or a name in the device registry (--list-backends) */
  char comm[16];         /* auto | local | mpi | nccl | sim */
  char hardware[256];    /* profile name in models/hardware/ or a path ("" = backend default) */
  int nics_per_node;     /* network adapters per node over the profile's (0 = the profile's) */
  double nic_gbps;       /* Gb/s per adapter per direction over the profile's (0 = the profile's) */
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
  fb_recompute recompute; /* activation checkpointing: off | full | selective | op */
  int recompute_layers;  /* checkpoint K of the model's blocks (0 = all; <= layers) */
  int recompute_passes;  /* times a fully checkpointed block's forward reruns in backward (1;
                            2 = two nested checkpoint wrappers) */
  bool overlap_grad_reduce; /* zero1: reduce each unit as its backward ends (a reducing
                               micro-step), on the comm stream, not after the whole backward */
  char param_sync[16];   /* zero1/zero2: how the step's updated slices reach every replica:
                            "all-gather" (one per unit) | "broadcast" (one per owner of its
                            whole partition, in rank order, not overlapped: InternLM) */
  char grad_reduce[16];  /* zero1/zero2: how a unit's gradient reaches its owner's slice:
                            "reduce-scatter" | "all-reduce" (the whole gradient over every
                            data-parallel rank, the owner keeping its slice: InternLM) */
  char mesh[32];         /* device mesh "REPLICAxSHARD" of a strategy that takes it
                            (fb_strategy.mesh; "" = the strategy's default) */
  /* zeropp (DeepSpeed ZeRO++): each switch on its own; refused with any other strategy */
  bool zeropp_quant_weights; /* qwZ: int8 block-quantised forward all-gather */
  int zeropp_hpz;            /* hpZ: secondary shard over groups of this many ranks (0 = off) */
  bool zeropp_quant_grads;   /* qgZ: int4 hierarchical all-to-all gradient reduction */
  int vocab_pad;         /* the head's GEMMs pad the vocabulary to a multiple of this (0 =
                          * auto: 128 on a GPU backend, 1 elsewhere; fb_tf_logits) */
  /* resources and output */
  int threads;           /* CPU threads per process (0 = all cores) */
  bool pin_ranks;        /* ranks as threads of one process each on CPUs of their own */
  int64_t mem_limit;     /* bytes per rank (0 = none on cpu; device capacity on cuda/sim) */
  double timeout_s;      /* collective timeout */
  char out[512];         /* output directory ("" = none) */
  bool trace;
  int trace_wait, trace_warmup, trace_active;
  bool mem_snapshot;
  int log_every;
  bool quiet;
  bool dry_run;          /* resolve, validate, predict the memory, print; touch no device */
  /* checkpoints (engine/exec/checkpoint.h) */
  char ckpt[512];        /* directory of step-<N>/ checkpoints ("" = none) */
  int save_every;        /* save after every N steps (0 = only at the end, with --ckpt) */
  char resume[512];      /* a step-<N> directory, or a --ckpt directory (its newest) */
  char init_from[512];   /* parameters from a checkpoint directory or a .safetensors file */
} fb_run_config;

void fb_config_defaults(fb_run_config *c);
/* Applies a YAML mapping of the same keys as the long flags (with '_' or '-'). */
fb_status fb_config_load_yaml(fb_run_config *c, const char *path);
/* Parses argv[first..argc) flags; --config is applied first wherever it appears. Leaves
 * *help set when --help was given. */
fb_status fb_config_parse_args(fb_run_config *c, int argc, char **argv, int first, bool *help);
/* Loads the model spec and checks every value against every other (seq <= max_seq, batch
 * divisible, backend and communicator known ...). Not the strategy: the strategy registry sits
 * above config, so fb_run_config_finalize (strategies/strategy.h) runs this and then checks
 * --strategy; that is what a subcommand calls. */
fb_status fb_config_finalize(fb_run_config *c);
/* Prints every flag with its default and meaning; `strategies` ("single, ddp, ...", from the
 * strategy registry: fb_strategy_names) is shown as --strategy's allowed values (NULL: none). */
void fb_config_print_help(FILE *f, const char *strategies);
/* --mesh as numbers: *replica x *shard ranks, both 0 when unset. FB_EUSAGE (one line naming
 * --mesh, the value and what is allowed) when malformed, a size is < 1, or the product is not
 * `world` (> 0; 0 = not known yet). */
fb_status fb_config_mesh(const fb_run_config *c, int world, int *replica, int *shard);

/* Model YAML (models/NAME.yaml or a path). Unknown keys and bad values are FB_EUSAGE. */
fb_status fb_model_spec_load(const char *name_or_path, fb_model_spec *out);
/* ---- additions: the option table, one setter, the CLI with --version ---- */
#define FB_VERSION "0.1.0"

typedef enum fb_opt_kind {
  FB_OPT_STR = 0,    /* text; `choices` ("a|b|c") restricts it when set */
  FB_OPT_INT,        /* int in [min, max] */
  FB_OPT_U64,        /* unsigned 64-bit (seed) */
  FB_OPT_F64,        /* finite double in [min, max] (bounds open where min_open / max_open) */
  FB_OPT_BOOL,       /* true|false (CLI: --x, --no-x, --x=true|false) */
  FB_OPT_BYTES,      /* int64 bytes: 123, 512K, 512M, 8G, 1.5GiB (K/M/G/T are powers of 1024) */
  FB_OPT_MB,         /* a size in MiB stored as int64 bytes */
  FB_OPT_DTYPE,      /* fp32 | bf16 */
  FB_OPT_ACCUM,      /* reduce | no-reshard | no-reduce */
  FB_OPT_TRACE_STEPS,/* WAIT,WARMUP,ACTIVE */
  FB_OPT_RECOMPUTE,  /* off | full | selective; also true (= full) and false (= off); CLI: a
                      * bare --recompute is full, --no-recompute off */
  FB_OPT_CONFIG,     /* --config FILE (CLI only) */
  FB_OPT_HELP,       /* --help (CLI only) */
  FB_OPT_VERSION     /* --version (CLI only) */
} fb_opt_kind;

typedef struct fb_option {
  const char *name;    /* long flag name without "--"; YAML key with '-' or '_' */
  const char *group;   /* heading in --help */
  fb_opt_kind kind;
  size_t off, size;    /* field in fb_run_config */
  const char *metavar; /* shown after the flag in --help */
  const char *choices; /* "a|b|c" for FB_OPT_STR with a fixed set (NULL = free text) */
  void (*choices_fn)(char *buf, size_t n); /* or the set built from a registry at run time */
  double min, max;
  int min_open, max_open;
  const char *dflt;    /* default as shown in --help (NULL = formatted from fb_config_defaults) */
  const char *help;
} fb_option;

int fb_config_option_count(void);
/* The allowed values of o ("a|b|c"), from its list or its registry (buf holds the latter). */
const char *fb_option_choices(const fb_option *o, char *buf, size_t n);
/* "auto|cpu|cpu-opaque|..." from the device registry (the --backend choices). */
void fb_config_backend_choices(char *buf, size_t n);
const fb_option *fb_config_option_at(int i);
/* The option named `name` ('-' and '_' alike, no leading "--"); NULL when unknown. */
const fb_option *fb_config_option(const char *name);
/* Sets one option from text. origin NULL: a command-line flag (errors read "--steps: ...");
 * else the prefix of a file position, e.g. "run.yaml:12: " (errors read "run.yaml:12: steps: ..."). */
fb_status fb_config_set(fb_run_config *c, const char *key, const char *value, const char *origin);
/* Checks the option's current value in c against its range / allowed values (as a flag). */
fb_status fb_config_check_option(const fb_run_config *c, const fb_option *o);
/* The option's current value in c as text that fb_config_set accepts back. */
void fb_config_format_option(const fb_run_config *c, const fb_option *o, char *buf, size_t n);
/* Writes every option as a flat YAML mapping that fb_config_load_yaml reads back unchanged. */
void fb_config_write_yaml(FILE *f, const fb_run_config *c);

typedef enum fb_cli_action { FB_CLI_RUN = 0, FB_CLI_HELP, FB_CLI_VERSION } fb_cli_action;
/* fb_config_parse_args with --version told apart from --help (fb_config_parse_args reports
 * --version as help). */
fb_status fb_config_parse_cli(fb_run_config *c, int argc, char **argv, int first,
                              fb_cli_action *action);

/* Parses a byte size ("4096", "512K", "512M", "8G", "1.5GiB"; K/M/G/T and KB/KiB ... are all
 * powers of 1024). Returns 0 on success, -1 when malformed, negative or too large. */
int fb_parse_bytes(const char *s, int64_t *out);

#endif
