/* The option table: one row per flag / YAML key (name, field, kind, range, default shown in
 * --help), and the code that turns one text value into a field (strict number parsing,
 * allowed values) or a field back into text. Cross-checks between options live in config.c;
 * the command line in cli.c, YAML files in yaml_config.c. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../device/device.h"
#include "config.h"
#include "../backends/registry.h"

#define FIELD(f) .off = offsetof(fb_run_config, f), .size = sizeof(((fb_run_config *)0)->f)
#define IMAX ((double)INT_MAX)

static const char G_WHAT[] = "what to run", G_BATCH[] = "batch and data",
                  G_OPT[] = "optimisation", G_STRAT[] = "strategy options",
                  G_OUT[] = "resources and output", G_OTHER[] = "other";

static const fb_option options[] = {
    {.name = "model", .group = G_WHAT, .kind = FB_OPT_STR, FIELD(model), .metavar = "NAME",
     .help = "model: a name in models/ or a path to a YAML file"},
    {.name = "strategy", .group = G_WHAT, .kind = FB_OPT_STR, FIELD(strategy), .metavar = "NAME",
     .help = "sharding strategy"},
    {.name = "backend", .group = G_WHAT, .kind = FB_OPT_STR, FIELD(backend), .metavar = "NAME",
     .choices_fn = fb_config_backend_choices,
     .help = "device (auto: a GPU when built and present, else cpu or sim by the run's size)"},
    {.name = "comm", .group = G_WHAT, .kind = FB_OPT_STR, FIELD(comm), .metavar = "NAME",
     .choices = "auto|local|mpi|nccl|sim",
     .help = "communicator (auto: the backend's own: nccl on cuda, local or mpi under a "
             "launcher on cpu, sim on sim; local/mpi on a GPU stage through pinned host memory)"},
    {.name = "hardware", .group = G_WHAT, .kind = FB_OPT_STR, FIELD(hardware), .metavar = "NAME",
     .dflt = "\"\" = backend default", .help = "hardware profile in models/hardware/ or a path"},
    {.name = "nics-per-node", .group = G_WHAT, .kind = FB_OPT_INT, FIELD(nics_per_node),
     .metavar = "N", .min = 0, .max = 64, .dflt = "0 = the profile's",
     .help = "network adapters per node the simulated run prices (the profile's nics_per_node "
             "key), e.g. 4 for '4 x 100 Gb RoCE per node'"},
    {.name = "nic-gbps", .group = G_WHAT, .kind = FB_OPT_F64, FIELD(nic_gbps), .metavar = "G",
     .min = 0, .max = 1e5, .dflt = "0 = the profile's",
     .help = "speed of one network adapter in Gb/s per direction (the profile's nic_gbps key)"},
    {.name = "world", .group = G_WHAT, .kind = FB_OPT_INT, FIELD(world), .metavar = "N",
     .min = 0, .max = 1 << 20, .dflt = "0 = auto", .help = "ranks (mpi/nccl: from the launcher)"},

    {.name = "batch", .group = G_BATCH, .kind = FB_OPT_INT, FIELD(batch), .metavar = "N",
     .min = 1, .max = IMAX, .dflt = "auto = max(8, world) rounded to a multiple of world",
     .help = "global batch: sequences per step over all ranks"},
    {.name = "micro-batch", .group = G_BATCH, .kind = FB_OPT_INT, FIELD(micro_batch),
     .metavar = "N", .min = 0, .max = IMAX, .dflt = "0 = batch/world",
     .help = "sequences per micro-step per rank (gradient accumulation below batch/world)"},
    {.name = "seq", .group = G_BATCH, .kind = FB_OPT_INT, FIELD(seq), .metavar = "T", .min = 0,
     .max = IMAX, .dflt = "0 = min(256, max_seq)", .help = "tokens per sequence"},
    {.name = "steps", .group = G_BATCH, .kind = FB_OPT_INT, FIELD(steps), .metavar = "N",
     .min = 1, .max = IMAX, .help = "optimizer steps"},
    {.name = "data", .group = G_BATCH, .kind = FB_OPT_STR, FIELD(data), .metavar = "FILE",
     .help = "'synthetic' or a token file (fsdpbench prepare)"},

    {.name = "optimizer", .group = G_OPT, .kind = FB_OPT_STR, FIELD(optimizer), .metavar = "NAME",
     .choices = "adamw|sgd", .help = "optimizer"},
    {.name = "lr", .group = G_OPT, .kind = FB_OPT_F64, FIELD(lr), .metavar = "X", .min = 0,
     .min_open = 1, .max = INFINITY, .help = "peak learning rate"},
    {.name = "min-lr", .group = G_OPT, .kind = FB_OPT_F64, FIELD(min_lr), .metavar = "X",
     .min = 0, .max = INFINITY, .dflt = "lr/10", .help = "learning rate at the end of the decay"},
    {.name = "warmup", .group = G_OPT, .kind = FB_OPT_INT, FIELD(warmup), .metavar = "N",
     .min = 0, .max = IMAX, .help = "linear warmup steps"},
    {.name = "schedule", .group = G_OPT, .kind = FB_OPT_STR, FIELD(schedule), .metavar = "NAME",
     .choices = "cosine|constant", .help = "after warmup: cosine decay to min-lr, or constant"},
    {.name = "beta1", .group = G_OPT, .kind = FB_OPT_F64, FIELD(beta1), .metavar = "X", .min = 0,
     .max = 1, .max_open = 1, .help = "AdamW first-moment decay"},
    {.name = "beta2", .group = G_OPT, .kind = FB_OPT_F64, FIELD(beta2), .metavar = "X", .min = 0,
     .max = 1, .max_open = 1, .help = "AdamW second-moment decay"},
    {.name = "eps", .group = G_OPT, .kind = FB_OPT_F64, FIELD(eps), .metavar = "X", .min = 0,
     .min_open = 1, .max = INFINITY, .help = "AdamW epsilon"},
    {.name = "weight-decay", .group = G_OPT, .kind = FB_OPT_F64, FIELD(weight_decay),
     .metavar = "X", .min = 0, .max = INFINITY,
     .help = "decoupled weight decay (matrices only, not norms or biases)"},
    {.name = "momentum", .group = G_OPT, .kind = FB_OPT_F64, FIELD(momentum), .metavar = "X",
     .min = 0, .max = 1, .max_open = 1, .help = "SGD momentum"},
    {.name = "grad-clip", .group = G_OPT, .kind = FB_OPT_F64, FIELD(grad_clip), .metavar = "X",
     .min = 0, .max = INFINITY, .help = "clip the global gradient norm to X (0 = off)"},
    {.name = "seed", .group = G_OPT, .kind = FB_OPT_U64, FIELD(seed), .metavar = "N",
     .help = "seed of the initialisation and the synthetic data"},

    {.name = "prefetch-forward", .group = G_STRAT, .kind = FB_OPT_BOOL, FIELD(prefetch_forward),
     .help = "gather the next unit while this one computes (forward)"},
    {.name = "prefetch-backward", .group = G_STRAT, .kind = FB_OPT_BOOL,
     FIELD(prefetch_backward), .help = "gather the previous unit while this one computes (backward)"},
    {.name = "reshard-after-forward", .group = G_STRAT, .kind = FB_OPT_BOOL,
     FIELD(reshard_after_forward), .help = "free gathered params after forward (off = ZeRO-2)"},
    {.name = "max-inflight", .group = G_STRAT, .kind = FB_OPT_INT, FIELD(max_inflight),
     .metavar = "N", .min = 1, .max = IMAX, .help = "fsdp: unit gathers in flight at once"},
    {.name = "accum", .group = G_STRAT, .kind = FB_OPT_ACCUM, FIELD(accum), .metavar = "MODE",
     .choices = "reduce|no-reshard|no-reduce",
     .help = "gradient accumulation: reduce every micro-step, keep params, or reduce at the end"},
    {.name = "bucket-mb", .group = G_STRAT, .kind = FB_OPT_MB, FIELD(bucket_bytes),
     .metavar = "MB", .min = 0, .min_open = 1, .max = 1 << 20,
     .help = "ddp gradient bucket size in MiB"},
    {.name = "param-dtype", .group = G_STRAT, .kind = FB_OPT_DTYPE, FIELD(param_dtype),
     .metavar = "T", .choices = "auto|fp32|bf16",
     .help = "parameters as gathered and computed (fp32 masters either way); auto: bf16 on GPUs "
             "and GPU profiles, fp32 on the cpu backend and cpu profiles"},
    {.name = "reduce-dtype", .group = G_STRAT, .kind = FB_OPT_DTYPE, FIELD(reduce_dtype),
     .metavar = "T", .choices = "fp32|bf16", .help = "gradient reduction"},
    {.name = "recompute", .group = G_STRAT, .kind = FB_OPT_RECOMPUTE, FIELD(recompute),
     .metavar = "MODE", .choices = "off|full|selective|op",
     .help = "activation checkpointing: full = a block keeps its input and reruns its forward "
             "in backward; selective = rerun only the attention core (softmax(QK^T)V), matmul "
             "outputs stay saved (Megatron-LM); op = torchtitan's op-level policy: keep the "
             "outputs of every second matmul and of attention, rerun the rest. A bare "
             "--recompute or true = full; false or --no-recompute = off (old boolean configs "
             "keep working)"},
    {.name = "recompute-layers", .group = G_STRAT, .kind = FB_OPT_INT, FIELD(recompute_layers),
     .metavar = "K", .min = 0, .max = IMAX, .dflt = "0 = all layers",
     .help = "checkpoint K of the L blocks, every (L/K)-th from block 1: block l iff "
             "(l-1)*K mod L < K (K <= layers)"},

    {.name = "recompute-passes", .group = G_STRAT, .kind = FB_OPT_INT, FIELD(recompute_passes),
     .metavar = "N", .min = 1, .max = 4,
     .help = "times a fully checkpointed block's forward reruns in its backward: 1, or 2 for "
             "two nested checkpoint wrappers (FSDP's checkpoint_wrapper around a block that "
             "HF's gradient checkpointing wraps again: PyTorch reruns the forward once per "
             "level); the results are the same bits"},

    {.name = "overlap-grad-reduce", .group = G_STRAT, .kind = FB_OPT_BOOL,
     FIELD(overlap_grad_reduce),
     .help = "zero1 (others refuse it: their schedule is fixed): reduce-scatter each unit's "
             "gradient as its backward ends, overlapping the rest of the backward (DeepSpeed's "
             "overlap_comm, InternLM's zero_overlap_communication, Megatron's "
             "--overlap-grad-reduce), instead of all of them after the backward. With --accum "
             "no-reduce only the last micro-step reduces. The same bits either way"},
    {.name = "param-sync", .group = G_STRAT, .kind = FB_OPT_STR, FIELD(param_sync),
     .metavar = "MODE", .choices = "all-gather|broadcast",
     .help = "zero1/zero2 (others refuse broadcast): how the step's updated parameter slices "
             "reach every replica. all-gather: one per unit, each unit's next forward waits "
             "for its own; broadcast: each owner broadcasts its whole partition in one call, "
             "in rank order, and the next forward waits for all of them (InternLM's "
             "HybridZeroOptimizer). The same bits either way"},
    {.name = "grad-reduce", .group = G_STRAT, .kind = FB_OPT_STR, FIELD(grad_reduce),
     .metavar = "MODE", .choices = "reduce-scatter|all-reduce",
     .help = "zero1/zero2 (others refuse all-reduce): how a unit's gradient reaches the owner "
             "of each slice. reduce-scatter: each owner receives its slice's sum (over the "
             "shard group, then across replicas under --mesh); all-reduce: the whole gradient "
             "summed over every rank, each owner keeping its slice (InternLM's "
             "HybridZeroOptimizer: twice the bytes, one flat collective even under --mesh). "
             "The same bits either way"},
    {.name = "mesh", .group = G_STRAT, .kind = FB_OPT_STR, FIELD(mesh), .metavar = "RxS",
     .dflt = "\"\" = 1 x world (hsdp: SHARD = devices per node on sim)",
     .help = "device mesh of a sharded strategy whose table takes it (another strategy "
             "refuses it, naming those that do): REPLICA x SHARD ranks (REPLICA*SHARD = world), state "
             "sharded over SHARD consecutive ranks and replicated REPLICA times; gradients "
             "reduced in the shard group, then all-reduced across replicas"},

    {.name = "zeropp-quant-weights", .group = G_STRAT, .kind = FB_OPT_BOOL,
     FIELD(zeropp_quant_weights),
     .help = "zeropp (qwZ): all-gather the weights for forward as int8 in blocks of 4096 with "
             "an fp32 scale each"},
    {.name = "zeropp-hpz", .group = G_STRAT, .kind = FB_OPT_INT, FIELD(zeropp_hpz),
     .metavar = "S", .min = 0, .max = IMAX, .dflt = "0 = off",
     .help = "zeropp (hpZ): keep a secondary copy of the weights sharded over groups of S "
             "consecutive ranks (a node), so backward gathers stay in the group; S divides world"},
    {.name = "zeropp-quant-grads", .group = G_STRAT, .kind = FB_OPT_BOOL,
     FIELD(zeropp_quant_grads),
     .help = "zeropp (qgZ): reduce gradients by an int4 all-to-all inside the node, then across "
             "nodes, dequantising and summing in between"},
    {.name = "vocab-pad", .group = G_STRAT, .kind = FB_OPT_INT, FIELD(vocab_pad), .metavar = "N",
     .min = 0, .max = 1 << 16, .dflt = "0 = auto: 128 on cuda, 1 elsewhere",
     .help = "the head's GEMMs run on the vocabulary padded to a multiple of N (cuBLAS keeps its "
             "fast kernels: GPT-2's 50257 -> 50304); compute only: parameters, the loss and the "
             "gradients are those of the unpadded head. 1 = no padding. sim predicts the "
             "unpadded head unless given N"},

    {.name = "threads", .group = G_OUT, .kind = FB_OPT_INT, FIELD(threads), .metavar = "N",
     .min = 0, .max = 4096, .dflt = "0 = auto",
     .help = "CPU threads per process, split over its ranks; auto: each rank gets the cores this "
             "process may use divided by the ranks on this node (--world threads of one process, "
             "or the launcher's local size; at most the cores a launcher bound it to), at least "
             "1; --dry-run prints the result"},
    {.name = "pin-ranks", .group = G_OUT, .kind = FB_OPT_BOOL, FIELD(pin_ranks),
     .help = "ranks that run as threads of this process (--comm local) each keep to CPUs of "
             "their own, their compute threads and comm worker with them, where the affinity "
             "mask gives every rank whole CPUs (threads x ranks <= its CPUs): steadier timings "
             "on a shared machine; --no-pin-ranks lets the OS place them"},
    {.name = "mem-limit", .group = G_OUT, .kind = FB_OPT_BYTES, FIELD(mem_limit),
     .metavar = "SIZE", .min = 0, .dflt = "0 = none",
     .help = "device memory per rank: bytes or 512M, 8G, 1.5GiB"},
    {.name = "timeout", .group = G_OUT, .kind = FB_OPT_F64, FIELD(timeout_s), .metavar = "S",
     .min = 0, .min_open = 1, .max = 7 * 86400.0,
     .help = "collective timeout in seconds, at most a week (PyTorch's default is also 10 "
             "minutes)"},
    {.name = "out", .group = G_OUT, .kind = FB_OPT_STR, FIELD(out), .metavar = "DIR",
     .dflt = "\"\" = none", .help = "output directory (metrics, summary, trace)"},
    {.name = "trace", .group = G_OUT, .kind = FB_OPT_BOOL, FIELD(trace),
     .help = "write a Chrome trace of the traced steps"},
    {.name = "trace-steps", .group = G_OUT, .kind = FB_OPT_TRACE_STEPS, .off = 0, .size = 0,
     .metavar = "W,U,A", .help = "trace schedule: skip W steps, warm up U, record A (0: every remaining step; the default 0,1,0 records the steps the report summarises)"},
    {.name = "mem-snapshot", .group = G_OUT, .kind = FB_OPT_BOOL, FIELD(mem_snapshot),
     .help = "write rank<r>_memory_snapshot.pickle (torch.cuda.memory._snapshot format)"},
    {.name = "log-every", .group = G_OUT, .kind = FB_OPT_INT, FIELD(log_every), .metavar = "N",
     .min = 1, .max = IMAX, .help = "print a log line every N steps"},
    {.name = "quiet", .group = G_OUT, .kind = FB_OPT_BOOL, FIELD(quiet),
     .help = "no per-step log lines, no run header (the closing report is always printed)"},
    {.name = "ckpt", .group = G_OUT, .kind = FB_OPT_STR, FIELD(ckpt), .metavar = "DIR",
     .dflt = "\"\" = none",
     .help = "write sharded checkpoints DIR/step-<N>/ (each rank its shard, a manifest committed "
             "last by atomic rename)"},
    {.name = "save-every", .group = G_OUT, .kind = FB_OPT_INT, FIELD(save_every), .metavar = "N",
     .min = 0, .max = IMAX, .dflt = "0 = at the end",
     .help = "with --ckpt: save after every N steps (and after the last)"},
    {.name = "resume", .group = G_OUT, .kind = FB_OPT_STR, FIELD(resume), .metavar = "PATH",
     .dflt = "\"\" = none",
     .help = "continue from a checkpoint (a step-<N> directory, or a --ckpt directory: its newest "
             "complete one), with any strategy and world size (resharded)"},
    {.name = "init-from", .group = G_OUT, .kind = FB_OPT_STR, FIELD(init_from), .metavar = "PATH",
     .dflt = "\"\" = none",
     .help = "initial parameters from a checkpoint or a .safetensors file (names as export "
             "writes them); the optimizer starts fresh"},
    {.name = "dry-run", .group = G_OUT, .kind = FB_OPT_BOOL, FIELD(dry_run),
     .help = "resolve and check the configuration (backend, comm, model, strategy, dtype, "
             "memory fit), print it as YAML with the predicted peak per rank, run nothing: "
             "exit 0 runs, 2 invalid, 3 does not fit"},

    {.name = "config", .group = G_OTHER, .kind = FB_OPT_CONFIG, .metavar = "FILE",
     .dflt = "none", .help = "YAML file of these keys ('-' or '_'); flags override it"},
    {.name = "help", .group = G_OTHER, .kind = FB_OPT_HELP, .dflt = "", .help = "this text"},
    {.name = "version", .group = G_OTHER, .kind = FB_OPT_VERSION, .dflt = "",
     .help = "print the version"},
};

int fb_config_option_count(void) { return (int)(sizeof options / sizeof options[0]); }

const fb_option *fb_config_option_at(int i) {
  if (i < 0 || i >= fb_config_option_count()) return NULL;
  return &options[i];
}

/* Names compare with '-' and '_' alike. */
static int name_eq(const char *a, const char *b) {
  for (;; a++, b++) {
    char x = *a == '_' ? '-' : *a, y = *b == '_' ? '-' : *b;
    if (x != y) return 0;
    if (!x) return 1;
  }
}

const fb_option *fb_config_option(const char *name) {
  for (int i = 0; i < fb_config_option_count(); i++)
    if (name_eq(options[i].name, name)) return &options[i];
  return NULL;
}

/* ---- strict scalar parsing ---------------------------------------------------------------- */

static int parse_ll(const char *s, long long *v) {
  if (!*s || isspace((unsigned char)*s)) return -1;
  char *e;
  errno = 0;
  *v = strtoll(s, &e, 10);
  return (*e || errno) ? -1 : 0;
}

static int parse_f64(const char *s, double *v) {
  if (!*s || isspace((unsigned char)*s)) return -1;
  char *e;
  errno = 0;
  *v = strtod(s, &e);
  return (*e || errno == ERANGE || !isfinite(*v)) ? -1 : 0;
}

static int parse_bool(const char *s, bool *v) {
  static const char *t[] = {"true", "yes", "on", "1"}, *f[] = {"false", "no", "off", "0"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(s, t[i])) { *v = true; return 0; }
    if (!strcasecmp(s, f[i])) { *v = false; return 0; }
  }
  return -1;
}

int fb_parse_bytes(const char *s, int64_t *out) {
  static const struct { const char *suffix; double mul; } units[] = {
      {"", 1},          {"b", 1},         {"k", 0x1p10},    {"kb", 0x1p10},  {"kib", 0x1p10},
      {"m", 0x1p20},    {"mb", 0x1p20},   {"mib", 0x1p20},  {"g", 0x1p30},   {"gb", 0x1p30},
      {"gib", 0x1p30},  {"t", 0x1p40},    {"tb", 0x1p40},   {"tib", 0x1p40}};
  if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.')) return -1;
  char *e;
  errno = 0;
  double v = strtod(s, &e);
  if (errno == ERANGE || !isfinite(v) || v < 0 || e == s) return -1;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(e, units[i].suffix)) continue;
    double b = v * units[i].mul;
    if (b >= 0x1p62) return -1;
    if (units[i].mul == 1 && b != floor(b)) return -1; /* fractional bytes */
    *out = (int64_t)llround(b);
    return 0;
  }
  return -1;
}

/* ---- what each option allows, as words ----------------------------------------------------- */

static void describe(const fb_option *o, char *buf, size_t n) {
  switch (o->kind) {
  case FB_OPT_INT:
    if (o->max < IMAX)
      snprintf(buf, n, "an integer between %.0f and %.0f", o->min, o->max);
    else
      snprintf(buf, n, "an integer >= %.0f", o->min);
    break;
  case FB_OPT_U64: snprintf(buf, n, "an integer between 0 and 18446744073709551615"); break;
  case FB_OPT_F64:
  case FB_OPT_MB:
    if (isfinite(o->max))
      snprintf(buf, n, "a number %s %g and %s %g", o->min_open ? ">" : ">=", o->min,
               o->max_open ? "<" : "<=", o->max);
    else
      snprintf(buf, n, "a number %s %g", o->min_open ? ">" : ">=", o->min);
    break;
  case FB_OPT_BOOL: snprintf(buf, n, "true or false"); break;
  case FB_OPT_BYTES: snprintf(buf, n, "a size >= 0: bytes or 512K, 512M, 8G, 1.5GiB"); break;
  case FB_OPT_TRACE_STEPS:
    snprintf(buf, n, "WAIT,WARMUP,ACTIVE: integers >= 0 (ACTIVE 0: every remaining step), e.g. 0,1,2");
    break;
  case FB_OPT_STR:
  case FB_OPT_DTYPE:
  case FB_OPT_ACCUM:
  case FB_OPT_RECOMPUTE:
    if (o->choices || o->choices_fn) {
      char ch[120];
      snprintf(buf, n, "one of %s", fb_option_choices(o, ch, sizeof ch));
      break;
    }
    snprintf(buf, n, "text shorter than %zu characters", o->size);
    break;
  default: snprintf(buf, n, "no value"); break;
  }
}

void fb_config_backend_choices(char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "auto");
  for (int i = 0; fb_device_entry_at(i) && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "|%s", fb_device_entry_at(i)->name);
}

const char *fb_option_choices(const fb_option *o, char *buf, size_t n) {
  if (!o->choices_fn) return o->choices;
  o->choices_fn(buf, n);
  return buf;
}

static bool in_range(const fb_option *o, double v) {
  if (v < o->min || (o->min_open && v == o->min)) return false;
  if (v > o->max || (o->max_open && v == o->max)) return false;
  return true;
}

/* Index of s in a "a|b|c" list (exact), or -1. */
static int choice_index(const char *choices, const char *s) {
  int i = 0;
  size_t len = strlen(s);
  for (const char *p = choices; *p; i++) {
    const char *bar = strchr(p, '|');
    size_t l = bar ? (size_t)(bar - p) : strlen(p);
    if (l == len && !strncmp(p, s, l)) return i;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

/* The one range rule of --trace-steps, for a value set by name (command line, YAML, --sweep) and
 * for a config checked as a whole: ACTIVE 0 records every remaining step. */
static bool trace_steps_ok(int wait, int warmup, int active) {
  return wait >= 0 && warmup >= 0 && active >= 0;
}

static int parse_trace_steps(const char *s, int v[3]) {
  const char *p = s;
  for (int i = 0; i < 3; i++) {
    while (*p == ' ') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    char *e;
    errno = 0;
    long x = strtol(p, &e, 10);
    if (errno || x > INT_MAX) return -1;
    v[i] = (int)x;
    p = e;
    while (*p == ' ') p++;
    if (i < 2) {
      if (*p != ',') return -1;
      p++;
    }
  }
  return (*p || !trace_steps_ok(v[0], v[1], v[2])) ? -1 : 0;
}

#define AT(c, o, T) ((T *)((char *)(c) + (o)->off))
#define CAT(c, o, T) ((const T *)((const char *)(c) + (o)->off))

fb_status fb_config_set(fb_run_config *c, const char *key, const char *value, const char *origin) {
  char chb[160];
  const fb_option *o = fb_config_option(key);
  char who[320], want[160];
  if (!o || (origin && (o->kind == FB_OPT_CONFIG || o->kind == FB_OPT_HELP ||
                        o->kind == FB_OPT_VERSION))) {
    if (!origin) return FB_ERR(FB_EUSAGE, "unknown flag '--%s' (see --help)", key);
    char allowed[1024] = "";
    size_t len = 0;
    for (int i = 0; i < fb_config_option_count(); i++) {
      const fb_option *r = &options[i];
      if (r->kind == FB_OPT_CONFIG || r->kind == FB_OPT_HELP || r->kind == FB_OPT_VERSION)
        continue;
      len += (size_t)snprintf(allowed + len, sizeof allowed - len, "%s%s", len ? ", " : "",
                              r->name);
      if (len >= sizeof allowed) break;
    }
    return FB_ERR(FB_EUSAGE, "%sunknown key '%s' (allowed: %s)", origin, key, allowed);
  }
  if (origin)
    snprintf(who, sizeof who, "%s%s", origin, key);
  else
    snprintf(who, sizeof who, "--%s", o->name);
  describe(o, want, sizeof want);
  for (const char *p = value; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      return FB_ERR(FB_EUSAGE, "%s: the value contains a control character (want %s)", who, want);

  switch (o->kind) {
  case FB_OPT_STR: {
    if ((o->choices || o->choices_fn) && choice_index(fb_option_choices(o, chb, sizeof chb), value) < 0)
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    size_t len = strlen(value);
    if (len >= o->size)
      return FB_ERR(FB_EUSAGE, "%s: '%.40s...' is too long (%zu characters, at most %zu)", who,
                    value, len, o->size - 1);
    memcpy(AT(c, o, char), value, len + 1);
    return FB_OK;
  }
  case FB_OPT_INT: {
    long long v;
    if (parse_ll(value, &v))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not an integer (want %s)", who, value, want);
    if (!in_range(o, (double)v))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    *AT(c, o, int) = (int)v;
    return FB_OK;
  }
  case FB_OPT_U64: {
    char *e;
    errno = 0;
    unsigned long long v = isdigit((unsigned char)value[0]) ? strtoull(value, &e, 10) : 0;
    if (!isdigit((unsigned char)value[0]) || *e || errno)
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    *AT(c, o, uint64_t) = (uint64_t)v;
    return FB_OK;
  }
  case FB_OPT_F64:
  case FB_OPT_MB: {
    double v;
    if (parse_f64(value, &v))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not a number (want %s)", who, value, want);
    if (!in_range(o, v))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    if (o->kind == FB_OPT_F64)
      *AT(c, o, double) = v;
    else
      *AT(c, o, int64_t) = llround(v * 0x1p20) > 0 ? llround(v * 0x1p20) : 1;
    return FB_OK;
  }
  case FB_OPT_BOOL: {
    bool v;
    if (parse_bool(value, &v))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    *AT(c, o, bool) = v;
    return FB_OK;
  }
  case FB_OPT_BYTES: {
    int64_t v;
    if (fb_parse_bytes(value, &v))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    *AT(c, o, int64_t) = v;
    return FB_OK;
  }
  case FB_OPT_DTYPE: {
    fb_dtype t;
    if (!strcmp(value, "auto") && o->choices && strstr(o->choices, "auto")) {
      *AT(c, o, fb_dtype) = FB_DTYPE_AUTO;
      return FB_OK;
    }
    if (fb_dtype_parse(value, &t) || (t != FB_F32 && t != FB_BF16))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    *AT(c, o, fb_dtype) = t;
    return FB_OK;
  }
  case FB_OPT_ACCUM: {
    char norm[32];
    snprintf(norm, sizeof norm, "%s", value);
    for (char *p = norm; *p; p++)
      if (*p == '_') *p = '-';
    int i = strlen(value) < sizeof norm ? choice_index(o->choices, norm) : -1;
    if (i < 0) return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    *AT(c, o, fb_accum_mode) = (fb_accum_mode)i; /* table order == enum order */
    return FB_OK;
  }
  case FB_OPT_RECOMPUTE: {
    /* table order == enum order; the old boolean's words still read as full / off */
    int i = choice_index(o->choices, value);
    bool b;
    if (i < 0 && !parse_bool(value, &b)) i = b ? FB_RECOMPUTE_FULL : FB_RECOMPUTE_OFF;
    if (i < 0) return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (%s)", who, value, o->choices);
    *AT(c, o, fb_recompute) = (fb_recompute)i;
    return FB_OK;
  }
  case FB_OPT_TRACE_STEPS: {
    int v[3];
    if (parse_trace_steps(value, v))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want %s)", who, value, want);
    c->trace_wait = v[0];
    c->trace_warmup = v[1];
    c->trace_active = v[2];
    return FB_OK;
  }
  case FB_OPT_CONFIG: /* the file is read by the command line (cli.c), which sets its keys */
    return FB_ERR(FB_EUSAGE, "%s: a file of options is read by the command line (--config "
                  "FILE), not set as one value", who);
  case FB_OPT_HELP:
  case FB_OPT_VERSION: break;
  }
  return FB_ERR(FB_EUSAGE, "%s takes no value", who);
}

fb_status fb_config_check_option(const fb_run_config *c, const fb_option *o) {
  char want[160], val[600], chb[160];
  describe(o, want, sizeof want);
  fb_config_format_option(c, o, val, sizeof val);
  bool ok = true;
  switch (o->kind) {
  case FB_OPT_STR:
    ok = !(o->choices || o->choices_fn) ||
         choice_index(fb_option_choices(o, chb, sizeof chb), CAT(c, o, char)) >= 0;
    ok = ok && memchr(CAT(c, o, char), 0, o->size) != NULL;
    break;
  case FB_OPT_INT: ok = in_range(o, *CAT(c, o, int)); break;
  case FB_OPT_F64: ok = isfinite(*CAT(c, o, double)) && in_range(o, *CAT(c, o, double)); break;
  case FB_OPT_MB: ok = *CAT(c, o, int64_t) >= 1 && *CAT(c, o, int64_t) <= (int64_t)o->max * 0x100000; break;
  case FB_OPT_BYTES: ok = *CAT(c, o, int64_t) >= 0; break;
  case FB_OPT_DTYPE:
    ok = *CAT(c, o, fb_dtype) == FB_F32 || *CAT(c, o, fb_dtype) == FB_BF16 ||
         (*CAT(c, o, fb_dtype) == FB_DTYPE_AUTO && o->choices && strstr(o->choices, "auto"));
    break;
  case FB_OPT_ACCUM:
    ok = *CAT(c, o, fb_accum_mode) >= FB_ACCUM_REDUCE &&
         *CAT(c, o, fb_accum_mode) <= FB_ACCUM_NO_REDUCE;
    break;
  case FB_OPT_TRACE_STEPS:
    ok = trace_steps_ok(c->trace_wait, c->trace_warmup, c->trace_active);
    break;
  case FB_OPT_RECOMPUTE:
    ok = *CAT(c, o, fb_recompute) >= FB_RECOMPUTE_OFF &&
         *CAT(c, o, fb_recompute) <= FB_RECOMPUTE_OP;
    break;
  default: break;
  }
  if (ok) return FB_OK;
  return FB_ERR(FB_EUSAGE, "--%s: '%s' is not allowed (want %s)", o->name, val, want);
}

/* Shortest %g form that reads back to the same double. */
static void fmt_double(double v, char *buf, size_t n) {
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return;
  }
}

void fb_config_format_option(const fb_run_config *c, const fb_option *o, char *buf, size_t n) {
  switch (o->kind) {
  case FB_OPT_STR: snprintf(buf, n, "%.*s", (int)o->size, CAT(c, o, char)); break;
  case FB_OPT_INT: snprintf(buf, n, "%d", *CAT(c, o, int)); break;
  case FB_OPT_U64: snprintf(buf, n, "%llu", (unsigned long long)*CAT(c, o, uint64_t)); break;
  case FB_OPT_F64: fmt_double(*CAT(c, o, double), buf, n); break;
  case FB_OPT_MB: fmt_double((double)*CAT(c, o, int64_t) / 0x1p20, buf, n); break;
  case FB_OPT_BOOL: snprintf(buf, n, "%s", *CAT(c, o, bool) ? "true" : "false"); break;
  case FB_OPT_BYTES: snprintf(buf, n, "%lld", (long long)*CAT(c, o, int64_t)); break;
  case FB_OPT_DTYPE: snprintf(buf, n, "%s", fb_dtype_name(*CAT(c, o, fb_dtype))); break;
  case FB_OPT_ACCUM: {
    static const char *names[] = {[FB_ACCUM_REDUCE] = "reduce",
                                  [FB_ACCUM_NO_RESHARD] = "no-reshard",
                                  [FB_ACCUM_NO_REDUCE] = "no-reduce"};
    fb_accum_mode m = *CAT(c, o, fb_accum_mode);
    snprintf(buf, n, "%s", (m >= FB_ACCUM_REDUCE && m <= FB_ACCUM_NO_REDUCE) ? names[m] : "?");
    break;
  }
  case FB_OPT_TRACE_STEPS:
    snprintf(buf, n, "%d,%d,%d", c->trace_wait, c->trace_warmup, c->trace_active);
    break;
  case FB_OPT_RECOMPUTE: snprintf(buf, n, "%s", fb_recompute_name(*CAT(c, o, fb_recompute))); break;
  default: snprintf(buf, n, "%s", ""); break;
  }
}
