/* The run configuration's defaults, its final cross-checks (one value against another and
 * against the model) and --help. Parsing of single values is in options.c, flags in cli.c,
 * files in yaml_config.c. --strategy is checked one layer up, against the strategy registry
 * (fb_run_config_finalize in strategies/registry.c): config sits below the strategies and
 * names none of them. Nothing here runs training. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../device/device.h"
#include "config.h"
#include "../backends/registry.h"

void fb_config_defaults(fb_run_config *c) {
  *c = (fb_run_config){
      .model = "debug",
      .strategy = "fsdp",
      .backend = "auto",
      .comm = "auto",
      .hardware = "",
      .world = 0,
      .batch = 0, /* auto: resolved by the runner once the world is known */
      .micro_batch = 0,
      .seq = 0,
      .steps = 10,
      .optimizer = "adamw",
      .lr = 3e-4,
      .min_lr = -1, /* lr/10, resolved by fb_config_finalize */
      .beta1 = 0.9,
      .beta2 = 0.95,
      .eps = 1e-8,
      .weight_decay = 0.1,
      .momentum = 0.9,
      .grad_clip = 1.0,
      .warmup = 0,
      .schedule = "cosine",
      .param_sync = "all-gather",
      .grad_reduce = "reduce-scatter",
      .seed = 1337,
      .data = "synthetic",
      .prefetch_forward = true,
      .prefetch_backward = true,
      .reshard_after_forward = true,
      .max_inflight = 2,
      .accum = FB_ACCUM_REDUCE,
      .bucket_bytes = 25 << 20,
      .param_dtype = FB_DTYPE_AUTO, /* the runner picks: bf16 on GPUs, fp32 on CPUs */
      .reduce_dtype = FB_F32,
      .recompute = FB_RECOMPUTE_OFF,
      .recompute_layers = 0,
      .recompute_passes = 1,
      .threads = 0,
      .pin_ranks = true,
      .mem_limit = 0,
      .timeout_s = 600,
      .out = "",
      .trace = false,
      .trace_wait = 0,
      .trace_warmup = 1,
      .trace_active = 0, /* every step after the warm-up: the steps the report summarises */
      .mem_snapshot = false,
      .log_every = 1,
      .quiet = false,
  };
}

fb_status fb_config_finalize(fb_run_config *c) {
  if (c->min_lr < 0) c->min_lr = c->lr / 10;
  /* Every value on its own. */
  for (int i = 0; i < fb_config_option_count(); i++) {
    const fb_option *o = fb_config_option_at(i);
    if (!strcmp(o->name, "batch") && c->batch == 0) continue; /* 0 = auto (the default) */
    FB_TRY(fb_config_check_option(c, o));
  }
  if (c->min_lr > c->lr)
    return FB_ERR(FB_EUSAGE, "--min-lr: '%g' is not allowed (want a number between 0 and lr, %g)",
                  c->min_lr, c->lr);

  /* The model. */
  if (memchr(c->model, 0, sizeof c->model) == NULL || !c->model[0])
    return FB_ERR(FB_EUSAGE, "--model: '' is not allowed (want a name in models/ or a path)");
  FB_TRY(fb_model_spec_load(c->model, &c->spec));
  if (c->seq == 0) c->seq = c->spec.max_seq < 256 ? c->spec.max_seq : 256;
  if (c->seq > c->spec.max_seq)
    return FB_ERR(FB_EUSAGE, "--seq: %d exceeds the model's context (max_seq %d of model '%s')",
                  c->seq, c->spec.max_seq, c->spec.name);

  if (c->recompute_layers > c->spec.layers)
    return FB_ERR(FB_EUSAGE,
                  "--recompute-layers: %d is not allowed (want an integer between 0 and %d, the "
                  "layers of model '%s'; 0 = all)",
                  c->recompute_layers, c->spec.layers, c->spec.name);

  /* Where it runs. */
  bool sim_dev = !strcmp(c->backend, "sim"), sim_comm = !strcmp(c->comm, "sim");
  if (sim_comm && !sim_dev)
    return FB_ERR(FB_EUSAGE, "--comm: 'sim' needs --backend sim (got --backend %s)", c->backend);
  if (sim_dev && strcmp(c->comm, "auto") && !sim_comm)
    return FB_ERR(FB_EUSAGE, "--comm: '%s' is not allowed with --backend sim (want sim or auto)",
                  c->comm);
  if (strcmp(c->backend, "auto")) {
    const fb_device_entry *e = fb_device_entry_lookup(c->backend);
    char all[160];
    fb_device_names(all, sizeof all);
    if (!e)
      return FB_ERR(FB_EUSAGE, "--backend: '%s' is not allowed (want auto, %s%s)", c->backend,
                    all, strcmp(c->backend, "cuda") ? "" : "; this build has no CUDA");
    if (strcmp(c->comm, "auto") && !fb_word_in(c->comm, e->caps->comms))
      return FB_ERR(FB_EUSAGE, "--comm: '%s' is not allowed with --backend %s (want auto, %s)",
                    c->comm, c->backend, e->caps->comms);
  }
  if (c->hardware[0]) {
    char path[4096];
    FB_TRY(fb_resolve_yaml("models/hardware", c->hardware, path, sizeof path));
  }

  /* Batch split. */
  if (c->world > 0 && c->batch % c->world)
    return FB_ERR(FB_EUSAGE,
                  "--batch: %d is not divisible by --world %d (want a multiple of the world size)",
                  c->batch, c->world);
  if (c->micro_batch > 0) {
    int per_rank = c->world > 0 ? c->batch / c->world : c->batch;
    if (per_rank % c->micro_batch && c->world > 0)
      return FB_ERR(FB_EUSAGE,
                    "--micro-batch: %d does not divide the %d sequences per rank (--batch %d / "
                    "--world %d)",
                    c->micro_batch, per_rank, c->batch, c->world);
    if (per_rank % c->micro_batch)
      return FB_ERR(FB_EUSAGE, "--micro-batch: %d does not divide --batch %d", c->micro_batch,
                    c->batch);
  }

  int replica, shard;
  FB_TRY(fb_config_mesh(c, c->world, &replica, &shard));

  /* Data. */
  if (strcmp(c->data, "synthetic") && access(c->data, R_OK))
    return FB_ERR(FB_EUSAGE, "--data: cannot read '%s': %s (want 'synthetic' or a token file)",
                  c->data, strerror(errno));
  return FB_OK;
}

/* A size of --mesh: digits, no sign, >= 1; the rest of the text in *end. */
static int mesh_size(const char *s, const char **end) {
  long v = 0;
  const char *p = s;
  for (; *p >= '0' && *p <= '9' && v <= 1 << 20; p++) v = v * 10 + (*p - '0');
  *end = p;
  return p == s || v < 1 || v > 1 << 20 ? -1 : (int)v;
}

fb_status fb_config_mesh(const fb_run_config *c, int world, int *replica, int *shard) {
  *replica = *shard = 0;
  if (!c->mesh[0]) return FB_OK;
  const char *x, *end = "";
  const int rep = mesh_size(c->mesh, &x);
  const int sh = rep > 0 && (*x == 'x' || *x == 'X') ? mesh_size(x + 1, &end) : -1;
  if (sh < 1 || *end)
    return FB_ERR(FB_EUSAGE, "--mesh: '%s' is not allowed (want REPLICAxSHARD, two integers >= 1, "
                  "e.g. 2x4)", c->mesh);
  if (world > 0 && (int64_t)rep * sh != world)
    return FB_ERR(FB_EUSAGE, "--mesh: '%s' is not allowed with --world %d (want REPLICAxSHARD "
                  "with REPLICA*SHARD = %d, e.g. 1x%d)", c->mesh, world, world, world);
  *replica = rep;
  *shard = sh;
  return FB_OK;
}

void fb_config_print_help(FILE *f, const char *strategies) {
  fb_run_config d;
  fb_config_defaults(&d);
  fprintf(f,
          "usage: fsdpbench [flags]   (flags: --name value or --name=value; booleans: --x, "
          "--no-x, --x=true|false)\n"
          "Trains a transformer with a data-parallel sharding strategy, or predicts the run on a "
          "simulated device.\n"
          "A YAML file given with --config sets the same keys ('-' or '_'); flags override it.\n");
  const char *group = NULL;
  for (int i = 0; i < fb_config_option_count(); i++) {
    const fb_option *o = fb_config_option_at(i);
    if (!group || strcmp(group, o->group)) {
      group = o->group;
      fprintf(f, "\n%s:\n", group);
    }
    char flag[64], dflt[160], allowed[160] = "";
    if (o->kind == FB_OPT_BOOL)
      snprintf(flag, sizeof flag, "--[no-]%s", o->name);
    else if (o->kind == FB_OPT_RECOMPUTE)
      snprintf(flag, sizeof flag, "--%s [%s]", o->name, o->metavar); /* value optional */
    else if (o->metavar)
      snprintf(flag, sizeof flag, "--%s %s", o->name, o->metavar);
    else
      snprintf(flag, sizeof flag, "--%s", o->name);
    if (o->dflt)
      snprintf(dflt, sizeof dflt, "%s", o->dflt);
    else
      fb_config_format_option(&d, o, dflt, sizeof dflt);
    if (!strcmp(o->name, "strategy") && strategies)
      snprintf(allowed, sizeof allowed, " {%s}", strategies);
    else if (o->choices || o->choices_fn) {
      char ch[160];
      snprintf(allowed, sizeof allowed, " {%s}", fb_option_choices(o, ch, sizeof ch));
    }
    if (dflt[0])
      fprintf(f, "  %-30s %s%s [default: %s]\n", flag, o->help, allowed, dflt);
    else
      fprintf(f, "  %-30s %s%s\n", flag, o->help, allowed);
  }
}
