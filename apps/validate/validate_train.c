/* `validate --dataset` on training-run files (see validate_rows.h): a row becomes a simulated
 * run through the same runner as `--backend sim`, by the tables below, each a statement about
 * what a column's text means (never a factor for a row): sharding -> strategy (and its mesh or
 * ZeRO++ switches), precision -> dtypes and float8 linears, checkpointing -> recompute,
 * framework -> the step it prices (eager or torch.compile, attention kernel), model -> family,
 * interconnect -> the network (validate_network.c). Unstated micro-batch and checkpointing (a
 * source that "tuned them per run") are searched the way its authors did: the fastest that
 * fits; other unstated settings are assumed from the source's own neighbours. What a row leaves
 * unstated and the run assumed is printed beside it; the published figure, whatever its unit,
 * is read by validate_figures.c. It prints nothing itself (validate_dataset.c does). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../strategies/strategy.h"
#include "../engine/config/config.h"
#include "../engine/exec/runner.h"
#include "report.h"
#include "../engine/sim/gpu_profile.h"
#include "gpu_name.h"
#include "validate_rows.h"

/* One row's columns. */
typedef struct train_in {
  const char *src, *gpu, *model, *prec, *ac, *sharding, *framework, *net, *note;
  double n, mem, gpn, seq, mb, gb, ga, L, d, h, kv, f, v, mfu, hfu;
} train_in;

static void read_row(const ds_ctx *x, int r, train_in *t) {
  const char *s[] = {"source_id", "gpu", "model", "precision", "activation_checkpointing",
                     "sharding", "framework", "interconnect", "note"};
  const char **dst[] = {&t->src, &t->gpu, &t->model, &t->prec, &t->ac, &t->sharding,
                        &t->framework, &t->net, &t->note};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) *dst[i] = ds_col(x, r, s[i]);
  const char *nk[] = {"n_gpus", "gpu_mem_gb", "gpus_per_node", "seq_len", "micro_batch_per_gpu",
                      "global_batch", "grad_accum", "layers", "d_model",
                      "heads", "kv_heads", "ffn", "vocab", "mfu", "hfu"};
  double *nd[] = {&t->n, &t->mem, &t->gpn, &t->seq, &t->mb, &t->gb, &t->ga, &t->L,
                  &t->d, &t->h, &t->kv, &t->f, &t->v, &t->mfu, &t->hfu};
  for (size_t i = 0; i < sizeof nk / sizeof nk[0]; i++) *nd[i] = ds_num(ds_col(x, r, nk[i]));
}

/* What the run will be, as the rules decide it. */
typedef struct train_plan {
  const char *strategy, *label, *param_dtype, *reduce_dtype, *recompute, *framework, *attention;
  bool no_reshard, node_mesh, float8, tune_ac, tune_mb, no_reduce;
  bool bf16_state;       /* the row keeps its training state in bf16 (prec_rule) */
  bool bcast_sync;       /* each owner broadcasts its partition after the step (InternLM) */
  bool overlap_reduce;   /* gradients reduced on a side stream as backward goes */
  bool grad_all_reduce;  /* the whole gradient all-reduced over every rank (InternLM) */
  bool accelerate;       /* HF Accelerate's FSDP plugin: bf16 reduction whatever the precision
                            column's (which the pairs key on), once per step */
  bool zpp_qw, zpp_qg;  /* ZeRO++: quantized weights (qwZ), quantized gradients (qgZ) */
  int zpp_hpz;          /* ZeRO++: secondary weight partition of this many ranks (hpZ; 0 off) */
  int recompute_layers; /* 0 = all */
  int recompute_passes; /* 1; 2 = nested checkpoint wrappers */
  int world, shard;     /* shard: the node-scope mesh's shard group (ranks per node) */
  int gpn;              /* GPUs per node the run prices (the row's, else the profile's) */
  ds_network net;       /* the network the run prices (validate_network.c) */
  char net_why[512];    /* what the network assumed (said last) */
  char assumed[2000];
} train_plan;

static void assume(train_plan *p, const char *what) {
  ds_append(p->assumed, sizeof p->assumed, what);
}

/* ---- sharding ---------------------------------------------------------------------------- */

typedef struct shard_rule {
  const char *has;       /* substring of the sharding column (case-insensitive) */
  const char *strategy;
  const char *label;     /* what the pairs call it (NULL = the strategy) */
  bool no_reshard;       /* SHARD_GRAD_OP: parameters stay gathered after forward (ZeRO-2) */
  bool node_mesh;        /* shard inside the node, replicate across nodes: --mesh (n/g)xg */
  bool zeropp;           /* ZeRO++: its switches from the text (qwZ, hpZ, qgZ) */
  const char *note;      /* what the run schedules differently from the source, said */
} shard_rule;

/* DeepSpeed's stage 3 hooks every leaf module and reduces every parameter's gradient as it is
 * ready, in buckets of reduce_bucket_size; the executor's hooks are per block. */
#define DS_SCHEDULE                                                                            \
  "DeepSpeed's schedule not executed: it gathers per leaf module and reduces per parameter "  \
  "(reduce_bucket_size buckets), zeropp gathers and reduces a block "                          \
  "(scripts/deepspeed_zero3_events.py estimates the difference)"

/* First match wins: "FSDP2 FULL_SHARD" is fsdp2 (per-parameter dim-0 shards); "ZeRO++ ... on
 * top of ZeRO-3" is ZeRO++; DeepSpeed's ZeRO-3 is zeropp with its switches off, ZeRO-3 as
 * DeepSpeed partitions it (every tensor sliced over the ranks: an all-gather per fetch and a
 * reduce-scatter of the gradient, as the rows say), where `zero3` is the ZeRO paper's
 * whole-tensor ownership (a broadcast per tensor, a reduce per gradient); InternLM's zero1=8
 * ("within each 8-GPU node") is zero1 on a node-scope mesh, its zero1=-1 ("over all") zero1
 * over every rank. */
static const shard_rule shard_rules[] = {
    {.has = "HYBRID_SHARD", .strategy = "hsdp", .node_mesh = true},
    {.has = "HSDP", .strategy = "hsdp", .node_mesh = true},
    {.has = "SHARD_GRAD_OP", .strategy = "fsdp", .no_reshard = true},
    {.has = "FSDP2", .strategy = "fsdp2"},
    {.has = "FULL_SHARD", .strategy = "fsdp"},
    {.has = "ZeRO++", .strategy = "zeropp", .zeropp = true, .note = DS_SCHEDULE},
    {.has = "DeepSpeed ZeRO-3", .strategy = "zeropp", .label = "zero3", .note = DS_SCHEDULE},
    {.has = "ZeRO-3", .strategy = "zero3"},
    {.has = "ZeRO-1 sharded within each", .strategy = "zero1", .label = "zero1-node",
     .node_mesh = true},
    {.has = "ZeRO-1 over all", .strategy = "zero1"},
};

/* ZeRO++'s three switches as the row states them (DeepSpeed's zero_quantized_weights,
 * zero_hpz_partition_size, zero_quantized_gradients): hpZ's partition is the row's
 * zero_hpz_partition_size, else the GPUs of a node (the blog: "inside each machine"). */
static void plan_zeropp(const train_in *t, train_plan *p) {
  p->zpp_qw = ds_has(t->sharding, "qwZ");
  p->zpp_qg = ds_has(t->sharding, "qgZ");
  const char *h = strstr(t->sharding, "zero_hpz_partition_size=");
  p->zpp_hpz = h ? atoi(h + strlen("zero_hpz_partition_size=")) : 0;
  if (!p->zpp_hpz && ds_has(t->sharding, "hpZ")) p->zpp_hpz = -1; /* the node: set with gpn */
}

/* The source's text up to its first ';' or 100 characters ("..." where cut): the clause that
 * names the sharding, before the reason (ds_skip keeps any reason whole; this keeps it short). */
static const char *first_clause(const char *text, char *buf, size_t n) {
  size_t len = strcspn(text, ";");
  const bool cut = len > 100 || text[len];
  snprintf(buf, n, "%.*s%s", (int)(len > 100 ? 100 : len), text, cut ? " ..." : "");
  return buf;
}

static bool plan_sharding(const train_in *t, train_plan *p, ds_result *o) {
  char clause[128];
  if (!strncasecmp(t->sharding, "NON-DP", 6)) {
    ds_skip(o, "%s: tensor/pipeline/context parallel, not pure data parallel",
            first_clause(t->sharding, clause, sizeof clause));
    return false;
  }
  for (size_t i = 0; i < sizeof shard_rules / sizeof shard_rules[0]; i++) {
    const shard_rule *r = &shard_rules[i];
    if (!ds_has(t->sharding, r->has)) continue;
    p->strategy = r->strategy;
    p->label = r->label ? r->label : r->strategy;
    p->no_reshard = r->no_reshard;
    p->node_mesh = r->node_mesh;
    if (r->zeropp) plan_zeropp(t, p);
    if (r->note) assume(p, r->note);
    const fb_strategy *st = fb_strategy_lookup(p->strategy);
    if (!st)
      return ds_skip(o, "strategy %s is not in this build (branch zeropp adds ZeRO++)",
                     p->strategy), false;
    /* gradients kept whole until the last micro-batch (DeepSpeed stage 1, InternLM's
     * skip_grad_reduce, FSDP's no_sync): --accum no-reduce where the strategy has it */
    p->no_reduce = ds_has(t->sharding, "only during the backward of the last") ||
                   ds_has(t->sharding, "only on the last");
    /* InternLM's zero_overlap_communication ("on a side stream"): --overlap-grad-reduce; its
     * broadcast_params (one broadcast per shard owner after the step, not overlapped):
     * --param-sync broadcast; each where the strategy's table takes it */
    p->overlap_reduce = ds_has(t->sharding, "side stream") && st->tunes_grad_overlap;
    p->bcast_sync = ds_has(t->sharding, "broadcast") && st->param_sync;
    /* InternLM's reduce_tensor: the whole gradient all-reduced over every data-parallel rank,
     * each owner keeping its slice (--grad-reduce all-reduce) */
    p->grad_all_reduce = ds_has(t->sharding, "all-reduced") && st->grad_all_reduce;
    /* the registry says which strategies read --mesh (strategies/mesh.h) */
    if (p->node_mesh && !st->mesh)
      return ds_skip(o, "%s within each node needs --mesh for it, not in this build",
                     p->strategy), false;
    return true;
  }
  ds_skip(o, "sharding '%s' not modelled", first_clause(t->sharding, clause, sizeof clause));
  return false;
}

/* ---- precision ----------------------------------------------------------------------------- */

typedef struct prec_rule {
  const char *has;       /* substring of the precision column */
  const char *reduce;    /* gradient reduction dtype; NULL: not expressible */
  bool float8;           /* torchao float8 linears (tensorwise scales, float8 all-gather) */
  bool fp16;             /* fp16 compute: priced as bf16 (the same cost), said so */
  bool bf16_state;       /* weights, gradients and AdamW moments kept in bf16 (8 bytes a
                            parameter; the engine keeps them in fp32, 16): said under the
                            row's peak memory (validate_memory.c) */
  const char *note;      /* what the run prices differently from the source, said */
  const char *why;       /* not expressible: the reason */
} prec_rule;

/* Compute is bf16 with fp32 master weights in every row (the engine keeps fp32 masters; rows
 * whose AdamW runs on bf16 weights differ in the optimizer's bytes and in memory, which the
 * row's peak-memory line says: bf16_state). First match wins. */
static const prec_rule prec_rules[] = {
    {.has = "amp_fp8", .why = "FP8 through TransformerEngine (amp_fp8) is not modelled (torchao's "
                              "float8 tensorwise linears are)"},
    {.has = "float8 tensorwise", .reduce = "fp32", .float8 = true},
    {.has = "Float8 linears (torchao)", .reduce = "fp32", .float8 = true},
    {.has = "fp8", .why = "this FP8 recipe is not modelled (torchao's float8 tensorwise is)"},
    {.has = "grads reduced in bf16", .reduce = "bf16"},
    /* DeepSpeed --fp16: fp16 weights, activations and gradient reduction, fp32 masters */
    {.has = "fp16", .reduce = "bf16", .fp16 = true},
    {.has = "pure bf16", .reduce = "bf16", .bf16_state = true},
    {.has = "param/reduce/buffer bf16", .reduce = "bf16"},
    {.has = "model cast to bf16", .reduce = "fp32", .bf16_state = true},
    /* ATorch's amp_native is torch.autocast over the forward and its fsdp wrapper passes FSDP1
     * no MixedPrecision (atorch/auto/opt_lib/amp_optimization.py, zero_optimization.py) */
    {.has = "bf16 AMP", .reduce = "fp32",
     .note = "bf16 AMP is torch.autocast over fp32 weights (ATorch's amp_native; its FSDP1 has no "
             "MixedPrecision), so FSDP gathers fp32 there; priced with bf16 gathers (no "
             "autocast-over-fp32 mode)"},
    {.has = "bf16", .reduce = "fp32"},
};

static bool plan_precision(const train_in *t, train_plan *p, ds_result *o) {
  p->param_dtype = "bf16";
  /* Composer's PURE preset: llm-foundry's tables write it as precision "bf16" (SOURCES.md) */
  if (!strcmp(t->prec, "bf16") && ds_has(t->framework, "llm-foundry")) {
    p->reduce_dtype = "bf16";
    return true;
  }
  for (size_t i = 0; i < sizeof prec_rules / sizeof prec_rules[0]; i++) {
    const prec_rule *r = &prec_rules[i];
    if (!ds_has(t->prec, r->has)) continue;
    if (!r->reduce) return ds_skip(o, "%s", r->why), false;
    p->reduce_dtype = r->reduce;
    p->float8 = r->float8;
    p->bf16_state = r->bf16_state;
    if (r->fp16 && ds_has(t->prec, "not stated"))
      assume(p, "precision not stated: fp16, as the source's tutorial runs it");
    if (r->fp16)
      assume(p, "fp16 priced as bf16 compute with fp32 masters and 2-byte gradients (the same "
                "tensor-core rate and bytes on this GPU)");
    if (r->note) assume(p, r->note);
    return true;
  }
  ds_skip(o, "precision '%s' not modelled", t->prec);
  return false;
}

/* HF Accelerate's FSDP plugin, what every FSDP row run through `accelerate launch --use_fsdp`
 * or HF Trainer executes (huggingface/accelerate, utils/dataclasses.py set_mixed_precision and
 * accelerator.py accumulate / no_sync, the same in July 2024 and today): mixed_precision 'bf16'
 * becomes MixedPrecision(param_dtype=bf16, reduce_dtype=bf16), so gradients reduce in bf16;
 * and Accelerator.accumulate enters the model's no_sync on every micro-batch but the last, so
 * FSDP reduces once per step (--accum no-reduce). */
static void plan_accelerate(const train_in *t, train_plan *p) {
  if (!ds_has(t->framework, "HF Accelerate") ||
      (strcmp(p->strategy, "fsdp") && strcmp(p->strategy, "hsdp")))
    return;
  p->accelerate = true;
  p->no_reduce = true;
  assume(p, "HF Accelerate's FSDP plugin: gradients reduced in bf16 (its MixedPrecision for "
            "mixed_precision bf16), once per step (Accelerator.accumulate's no_sync)");
}

/* ---- activation checkpointing ------------------------------------------------------------ */

/* "every n-th block", ratio not stated: the row's own HFU / MFU states it. HFU counts the
 * recomputed forward (fms-fsdp: PyTorch's FLOP counter), MFU does not, so HFU / MFU = 1 + p / 3
 * for a fraction p of the blocks rerun (one forward = 1/3 of a step's model FLOPs). */
static bool every_nth_block(const train_in *t, train_plan *p, ds_result *o) {
  if (!(t->hfu > 0 && t->mfu > 0)) {
    ds_skip(o, "checkpointing '%s': no ratio and no HFU/MFU to infer it", t->ac);
    return false;
  }
  double frac = 3.0 * (t->hfu / t->mfu - 1.0);
  int k = (int)lround(fmin(fmax(frac, 0.0), 1.0) * t->L);
  char buf[96];
  snprintf(buf, sizeof buf, "%d of %.0f blocks rerun (HFU/MFU %.2f/%.2f)", k, t->L, t->hfu, t->mfu);
  assume(p, buf);
  p->recompute = k > 0 ? "full" : "off";
  p->recompute_layers = k > 0 && k < (int)t->L ? k : 0;
  return true;
}

static bool plan_recompute(const train_in *t, train_plan *p, ds_result *o) {
  const char *ac = t->ac;
  if (ds_has(ac, "every n-th block")) return every_nth_block(t, p, o);
  if (ds_has(ac, "not stated") && ds_has(ac, ": full")) {
    assume(p, "checkpointing not stated: full, as the source's tutorial runs it");
    return p->recompute = "full", true;
  }
  if (!*ac || ds_has(ac, "not stated")) return p->tune_ac = true, true;
  if (!strncasecmp(ac, "none", 4)) return p->recompute = "off", true;
  /* FSDP's checkpoint_wrapper around each decoder layer and HF's gradient checkpointing inside
   * it: nested wrappers, each of which reruns the layer's forward in backward */
  if (!strncasecmp(ac, "full", 4) && ds_has(ac, "checkpoint_wrapper") &&
      ds_has(ac, "gradient_checkpointing")) {
    assume(p, "two nested checkpoint wrappers: the forward reruns twice (--recompute-passes 2)");
    p->recompute_passes = 2;
    return p->recompute = "full", true;
  }
  if (!strncasecmp(ac, "full", 4) || !strncasecmp(ac, "enabled", 7))
    return p->recompute = "full", true;
  if (ds_has(ac, "op-level")) return p->recompute = "op", true;
  if (ds_has(ac, "per-layer")) { /* torchtitan selective_ac_option "2": every 2nd block */
    p->recompute = "full";
    p->recompute_layers = (int)t->L / 2;
    return true;
  }
  ds_skip(o, "activation checkpointing '%s' not modelled", ac);
  return false;
}

/* ---- framework: the step a profile prices -------------------------------------------------- */

typedef struct fw_rule {
  const char *has;       /* substring of the framework column */
  const char *framework; /* the profile's `framework` ("eager" / "compile"), NULL = keep */
  const char *attention; /* the profile's `attention_kernel`, NULL = keep (flash2) */
} fw_rule;

/* Every matching rule applies, in order (a later one overrides). llm-foundry's benchmark
 * launcher runs attn_impl=triton by default (SOURCES.md); fms-fsdp and HF transformers write
 * RMSNorm out in Python (eager-hf: its chain of kernels); torch.compile fuses all of it;
 * TinyLlama's flash-attn kernels fuse norm, rotary and loss by hand. */
static const fw_rule fw_rules[] = {
    {.has = "llm-foundry", .attention = "triton"},
    {.has = "fms-fsdp", .framework = "eager-hf"},
    {.has = "HF transformers", .framework = "eager-hf"},
    {.has = "HF Accelerate", .framework = "eager-hf"},
    {.has = "torch.compile", .framework = "compile"},
    {.has = "torch.compile=false", .framework = "eager"},
    /* torchtrain (torchtitan before April 2024): Meta's Llama RMSNorm written out in Python */
    {.has = "torchtrain", .framework = "eager-hf"},
    {.has = "fused RMSNorm", .framework = "fused"},
    /* InternLM (use_flash_attn: flash-attn's fused rotary, dense and cross-entropy, Apex's
     * fused RMSNorm) and Megatron-DeepSpeed (fused LayerNorm, bias-GELU and softmax) */
    {.has = "InternLM", .framework = "fused"},
    /* KempnerForge calls F.scaled_dot_product_attention under torch 2.11.0 (its uv.lock at
     * 01b461a), whose SDPA runs cuDNN's fused flash attention on Hopper for every shape
     * checked on the lent H100 and H200 (h100-measured.md; docs/simulator.md, attention) */
    {.has = "KempnerForge", .attention = "cudnn"},
    {.has = "Megatron-DeepSpeed", .framework = "fused"},
};

static void plan_framework(const train_in *t, train_plan *p) {
  p->framework = "eager";
  p->attention = "flash2";
  for (size_t i = 0; i < sizeof fw_rules / sizeof fw_rules[0]; i++) {
    if (!ds_has(t->framework, fw_rules[i].has)) continue;
    if (fw_rules[i].framework) p->framework = fw_rules[i].framework;
    if (fw_rules[i].attention) p->attention = fw_rules[i].attention;
  }
}

/* ---- world --------------------------------------------------------------------------------- */

/* A source that states its clusters but not which one a row ran on. */
typedef struct world_fact {
  const char *source_id;
  int world;
  const char *why;
} world_fact;

static const world_fact world_facts[] = {
    {"pytorch-blog-float8-fsdp2", 128,
     "world not stated: 128, the smallest of the post's three clusters (128/256/512 H100)"},
};

/* The world, the GPUs per node, the network, and what node-scope sharding makes of them. */
static bool plan_world(const train_in *t, const fb_hardware *hw, train_plan *p, ds_result *o) {
  p->world = t->n >= 1 ? (int)t->n : 0;
  for (size_t i = 0; !p->world && i < sizeof world_facts / sizeof world_facts[0]; i++)
    if (!strcmp(t->src, world_facts[i].source_id))
      p->world = world_facts[i].world, assume(p, world_facts[i].why);
  if (!p->world) return ds_skip(o, "%s", "world (n_gpus) not stated"), false;
  p->gpn = t->gpn >= 1 ? (int)t->gpn : hw->devices_per_node;
  if (!(t->gpn >= 1) && p->world > p->gpn) {
    char buf[96];
    snprintf(buf, sizeof buf, "GPUs per node not stated: %d, the profile's", p->gpn);
    assume(p, buf);
  }
  o->own_network = ds_row_network(t->net, t->src, hw, p->gpn, p->world, &p->net, p->net_why,
                                  sizeof p->net_why) && p->world > p->gpn;
  if (p->zpp_hpz < 0) p->zpp_hpz = p->gpn < p->world ? p->gpn : p->world;
  if (!p->node_mesh) return true;
  p->shard = p->gpn < p->world ? p->gpn : p->world;
  if (p->world % p->shard)
    return ds_skip(o, "%s", "sharding within a node: the world is not a whole number of nodes"),
           false;
  return true;
}

/* ---- settings a source leaves out ---------------------------------------------------------- */

/* The ZeRO++ blog prints its micro-batch as "1K tokens" per GPU: one sequence of that many
 * tokens; a Megatron GPT's vocabulary, not stated, is GPT-2's 50257 padded to a multiple of 128
 * (Megatron's --make-vocab-size-divisible-by default), which reproduces the tutorial's printed
 * TFLOPs; a global batch not stated is one micro-batch per GPU, no accumulation. */
static void plan_unstated(train_in *t, train_plan *p) {
  char buf[160];
  const char *k = strstr(t->note, "printed as '");
  int kt = 0;
  if (!(t->seq >= 1) && k && sscanf(k, "printed as '%dK tokens'", &kt) == 1 && kt > 0) {
    t->seq = 1024.0 * kt;
    t->mb = 1;
    snprintf(buf, sizeof buf, "sequence not stated: one sequence of %.0f tokens per micro-batch "
             "(the source's '%dK tokens' per GPU)", t->seq, kt);
    assume(p, buf);
  }
  if (!(t->v >= 1) && ds_has(t->model, "GPT")) {
    t->v = 50304;
    assume(p, "vocabulary not stated: 50304, GPT-2's padded to a multiple of 128 (Megatron)");
  }
  if (!(t->gb >= 1) && t->mb >= 1 && t->n >= 1 && !(t->ga >= 1)) {
    t->ga = 1;
    t->gb = t->n * t->mb;
    snprintf(buf, sizeof buf, "global batch not stated: %.0f, one micro-batch per GPU", t->gb);
    assume(p, buf);
  }
}

/* ---- model --------------------------------------------------------------------------------- */

typedef struct family_rule {
  const char *has;       /* substring of the model column */
  const char *family;    /* this program's model family */
} family_rule;

/* Llama's architecture (RMSNorm, SwiGLU, RoPE, GQA, untied head) under other names: Qwen2
 * (HF Qwen2ForCausalLM: the same blocks plus a QKV bias, ~0.01% of the FLOPs), Granite 7B
 * ("Llama-2-7B architecture" in the row), TinyLlama (lit-gpt's LLaMA config), InternLM-7B (the
 * same blocks, QKV and output biases). MPT is GPT-2 shaped (LayerNorm, GELU MLP, tied
 * embeddings, learned positions in llm-foundry's benchmarks), as is Megatron's GPT. */
static const family_rule family_rules[] = {
    {"MPT", "gpt2"},    {"Llama", "llama"},   {"Qwen2", "llama"},
    {"Granite", "llama"}, {"InternLM", "llama"}, {"GPT", "gpt2"},
};

static fb_status write_model(const train_in *t, const char *path, ds_result *o) {
  const char *fam = NULL;
  for (size_t i = 0; i < sizeof family_rules / sizeof family_rules[0] && !fam; i++)
    if (ds_has(t->model, family_rules[i].has)) fam = family_rules[i].family;
  if (!fam)
    return ds_skip(o, "model family of '%s' not modelled (MPT, and Llama's architecture)",
                   t->model), FB_EUNSUPPORTED;
  if (!(t->L > 0 && t->d > 0 && t->h > 0 && t->kv > 0 && t->f > 0 && t->v > 0))
    return ds_skip(o, "%s", "model dimensions missing"), FB_EUNSUPPORTED;
  const bool llama = !strcmp(fam, "llama");
  FILE *fp = fopen(path, "w");
  if (!fp) return FB_ERR(FB_EIO, "validate: cannot write %s", path);
  fprintf(fp, "name: dataset-model\nfamily: %s\nvocab: %.0f\ndim: %.0f\nlayers: %.0f\n"
              "heads: %.0f\nkv_heads: %.0f\nffn: %.0f\nmax_seq: %.0f\nnorm_eps: 1e-5\n%s"
              "tied: %s\ninit_std: 0.02\n",
          fam, t->v, t->d, t->L, t->h, t->kv, t->f, t->seq,
          llama ? "rope_theta: 10000\n" : "", llama ? "false" : "true");
  return fclose(fp) ? FB_ERR(FB_EIO, "validate: cannot write %s", path) : FB_OK;
}

/* ---- the run ------------------------------------------------------------------------------- */

static bool set(fb_run_config *c, const char *key, const char *val, ds_result *o) {
  if (fb_config_set(c, key, val, "dataset: ") == FB_OK) return true;
  snprintf(o->skip, sizeof o->skip, "--%s %s: %s", key, val, fb_error_msg());
  return false;
}

static bool set_int(fb_run_config *c, const char *key, double v, ds_result *o) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.0f", v);
  return set(c, key, buf, o);
}

/* ZeRO++'s switches (strategy zeropp): --zeropp-quant-weights, --zeropp-hpz S,
 * --zeropp-quant-grads. A build without them refuses the row with the option's own error. */
static bool set_zeropp(const train_plan *p, fb_run_config *c, ds_result *o) {
  if (strcmp(p->strategy, "zeropp")) return true;
  if (p->zpp_qw && !set(c, "zeropp-quant-weights", "true", o)) return false;
  if (p->zpp_hpz > 1 && !set_int(c, "zeropp-hpz", p->zpp_hpz, o)) return false;
  return !p->zpp_qg || set(c, "zeropp-quant-grads", "true", o);
}

/* The configuration of one candidate (mb, recompute); false: refused, o->skip says why. */
static bool configure(const train_in *t, const train_plan *p, const char *model,
                      const char *hw, double mb, const char *rc, fb_run_config *c,
                      ds_result *o) {
  fb_config_defaults(c);
  const char *kv[][2] = {{"model", model},       {"backend", "sim"},
                         {"comm", "sim"},        {"hardware", hw},
                         {"steps", "2"},         {"quiet", "true"},
                         {"strategy", p->strategy}, {"param-dtype", p->param_dtype},
                         {"reduce-dtype", p->accelerate ? "bf16" : p->reduce_dtype},
                         {"recompute", rc}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    if (!set(c, kv[i][0], kv[i][1], o)) return false;
  if (p->no_reshard && !set(c, "reshard-after-forward", "false", o)) return false;
  if (p->recompute_layers && !set_int(c, "recompute-layers", p->recompute_layers, o))
    return false;
  if (p->recompute_passes > 1 && !set_int(c, "recompute-passes", p->recompute_passes, o))
    return false;
  if (p->node_mesh) {
    char mesh[32];
    snprintf(mesh, sizeof mesh, "%dx%d", p->world / p->shard, p->shard);
    if (!set(c, "mesh", mesh, o)) return false;
  }
  if (!set_zeropp(p, c, o) || !set_int(c, "nics-per-node", p->net.nics, o)) return false;
  char gbps[32];
  snprintf(gbps, sizeof gbps, "%g", p->net.gbps);
  if (!set(c, "nic-gbps", gbps, o)) return false;
  if (p->bcast_sync && !set(c, "param-sync", "broadcast", o)) return false;
  if (p->overlap_reduce && !set(c, "overlap-grad-reduce", "true", o)) return false;
  if (p->grad_all_reduce && !set(c, "grad-reduce", "all-reduce", o)) return false;
  if (p->no_reduce && (fb_strategy_lookup(p->strategy)->accum_modes &
                       (1u << FB_ACCUM_NO_REDUCE)) && !set(c, "accum", "no-reduce", o))
    return false;
  double ga = t->ga >= 1 ? t->ga : 1;
  double gb = t->gb >= 1 ? t->gb : p->world * mb * ga;
  if (fmod(gb, p->world * mb) != 0) {
    ds_skip(o, "%s", "global batch is not a multiple of micro-batch x GPUs");
    return false;
  }
  if (!set_int(c, "world", p->world, o) || !set_int(c, "seq", t->seq, o) ||
      !set_int(c, "micro-batch", mb, o) || !set_int(c, "batch", gb, o))
    return false;
  if (fb_run_config_finalize(c) != FB_OK) {
    snprintf(o->skip, sizeof o->skip, "configuration refused: %s", fb_error_msg());
    return false;
  }
  return true;
}

/* One candidate's prediction: tokens/s per GPU, the allocator model's OOM count, and the
 * last step's time, compute and collectives (rank 0). */
typedef struct candidate {
  double tps, step_s, compute_s, comm_s, hidden_s;
  long long ooms;
  double mem_alloc, mem_state, mem_reserved; /* rank 0's peaks (validate_rows.h) */
  double mem_fp32_state; /* what rank 0's weights, gradients and optimizer state hold beyond 8
                            bytes a parameter (its fp32 masters: 4 bytes a parameter owned; with
                            bf16 params every strategy keeps only them in params.shard). Read
                            as the source's bf16 state where gradients are sharded as the
                            weights are (the FSDP and ZeRO-3 rows that carry bf16_state) */
} candidate;

static fb_status run_one(const fb_run_config *c, candidate *k) {
  fb_run_result res;
  FB_TRY(fb_run(c, &res));
  const fb_step_stats *last = &res.ranks[0].steps[res.nsteps - 1];
  k->step_s = last->wall;
  k->compute_s = last->compute;
  k->comm_s = last->comm;
  k->hidden_s = fb_report_hidden(last->comm, last->exposed_comm);
  k->tps = (double)res.tokens_per_step / last->wall / res.world;
  int64_t reserved = 0;
  k->ooms = (long long)fb_report_ooms(&res, &reserved);
  k->mem_alloc = (double)res.ranks[0].mem.peak_total;
  k->mem_state = (double)res.ranks[0].mem_setup.peak_total;
  k->mem_reserved = (double)reserved;
  const double owned = (double)res.ranks[0].mem_setup.cur[FB_MEM_PARAM_SHARD] / 4;
  k->mem_fp32_state = fmax(0, (double)res.ranks[0].persistent_bytes - 8 * owned);
  fb_run_result_free(&res);
  return FB_OK;
}

/* Every (micro-batch, recompute) the row leaves open; the fastest that fits wins. */
static fb_status search(const train_in *t, train_plan *p, const char *model, const char *hw,
                        ds_result *o) {
  static const double mbs[] = {1, 2, 4, 8};
  static const char *const rcs[] = {"off", "op", "full"};
  const int nmb = p->tune_mb ? 4 : 1, nrc = p->tune_ac ? 3 : 1;
  candidate best = {0};
  double best_mb = 0;
  const char *best_rc = NULL;
  for (int i = 0; i < nmb; i++)
    for (int j = 0; j < nrc; j++) {
      double mb = p->tune_mb ? mbs[i] : t->mb;
      const char *rc = p->tune_ac ? rcs[j] : p->recompute;
      fb_run_config c;
      candidate k;
      if (!configure(t, p, model, hw, mb, rc, &c, o)) {
        if (nmb * nrc == 1) return FB_OK;
        o->skip[0] = 0;
        continue;
      }
      FB_TRY(run_one(&c, &k));
      bool tuned = nmb * nrc > 1;
      if ((!tuned || k.ooms == 0) && k.tps > best.tps) best = k, best_mb = mb, best_rc = rc;
    }
  if (!best_rc) return ds_skip(o, "%s", "no micro-batch and checkpointing fit the memory"), FB_OK;
  if (nmb * nrc > 1) {
    char buf[96];
    snprintf(buf, sizeof buf, "not stated, fastest that fits: micro-batch %.0f, recompute %s",
             best_mb, best_rc);
    assume(p, buf);
  }
  o->predicted = best.tps;
  o->ooms = best.ooms;
  o->step_s = best.step_s;
  o->compute_s = best.compute_s;
  o->comm_s = best.comm_s;
  o->hidden_s = best.hidden_s;
  o->mem_alloc = best.mem_alloc;
  o->mem_state = best.mem_state;
  o->mem_reserved = best.mem_reserved;
  o->mem_fp32_state = p->bf16_state ? best.mem_fp32_state : 0;
  return FB_OK;
}

/* The row's profile: the GPU's, with the framework, attention kernel and float8 it runs, and
 * its GPUs per node (the network goes in as the run options --nics-per-node / --nic-gbps). */
static fb_status write_hw(const ds_ctx *x, const train_plan *p, const char *prof, char *path,
                          size_t n) {
  char lines[256];
  snprintf(lines, sizeof lines, "framework: %s\nattention_kernel: %s\nfloat8_linears: %s\n"
           "devices_per_node: %d\n", p->framework, p->attention, p->float8 ? "true" : "false",
           p->gpn);
  return ds_write_profile(x, "row", prof, lines, path, n);
}

/* What a row runs apart from its strategy and GPU count: rows of one source with the same key
 * differ only in those (validate_pairs.c). The cluster is the interconnect text as the source
 * wrote it (a row on 2 of a node's 4 GPUs is on the same cluster as one on all 4); the work is
 * tokens per GPU per step, not micro-batch and accumulation apart (2 x 4 and 4 x 2 are the
 * same work). */
static void pair_key(const train_in *t, const train_plan *p, ds_result *o) {
  const double tok = t->seq * (t->mb >= 1 ? t->mb : 0) * (t->ga >= 1 ? t->ga : 1);
  snprintf(o->key, sizeof o->key, "%s|%s|%.0f/%.0f/%.0f/%.0f/%.0f/%.0f|%.0f|%.0f|%s/%s|%s/%d/"
           "%d|%s/%s|%.80s", t->src, o->gpu, t->L, t->d, t->h, t->kv, t->f, t->v, t->seq, tok,
           p->param_dtype, p->reduce_dtype, p->tune_ac ? "tuned" : p->recompute,
           p->recompute_layers, p->recompute_passes, p->framework, p->attention, t->net);
  snprintf(o->strat, sizeof o->strat, "%s", p->label);
  o->world = p->world;
}

/* The published figure, whatever the source printed, as tokens/s per GPU. */
static bool read_published(const ds_ctx *x, int r, const train_in *t, const train_plan *p,
                           ds_result *o) {
  ds_fig_in m = {.world = p->world, .seq = t->seq, .gb = t->gb, .L = t->L, .d = t->d,
                 .h = t->h, .kv = t->kv, .f = t->f, .v = t->v,
                 .recompute = !p->tune_ac && !strcmp(p->recompute, "full")};
  o->published = ds_published_tps(x, r, &m, o->figures, sizeof o->figures);
  if (o->published > 0) return true;
  ds_skip(o, "%s", "no published throughput this validator can read");
  return false;
}

fb_status ds_train_row(ds_ctx *x, int r, ds_result *o) {
  train_in t;
  read_row(x, r, &t);
  char mem[8], seq[8], mb[8];
  snprintf(mem, sizeof mem, isnan(t.mem) ? "?" : "%.0f", t.mem);
  snprintf(seq, sizeof seq, isnan(t.seq) ? "?" : "%.0f", t.seq);
  snprintf(mb, sizeof mb, isnan(t.mb) ? "?" : "%.0f", t.mb);
  snprintf(o->what, sizeof o->what, "%-12.12s %-5.5s %3sGB x%-4.0f seq %-5s mb %-3s ac %-9.9s %s",
           t.model, t.gpu, mem, t.n, seq, mb, t.ac, t.prec);
  o->published = NAN;
  train_plan p = {.recompute = "off"};
  if (!plan_sharding(&t, &p, o) || !plan_precision(&t, &p, o)) return FB_OK;
  plan_accelerate(&t, &p);
  char why[160];
  const char *prof = ds_row_profile(x, t.gpu, isnan(t.mem) ? 0 : (int)t.mem, why, sizeof why);
  if (!prof) return ds_skip(o, "%s", why), FB_OK;
  snprintf(o->gpu, sizeof o->gpu, "%s", prof);
  fb_hardware hw;
  FB_TRY(fb_hardware_load(prof, &hw));
  plan_unstated(&t, &p);
  if (!(t.seq >= 1)) return ds_skip(o, "%s", "sequence length missing"), FB_OK;
  if (!plan_world(&t, &hw, &p, o) || !plan_recompute(&t, &p, o)) return FB_OK;
  p.tune_mb = !(t.mb >= 1);
  plan_framework(&t, &p);
  snprintf(o->assumed, sizeof o->assumed, "%s", p.assumed);
  if (!read_published(x, r, &t, &p, o)) return FB_OK;
  char model[96], hwpath[96];
  snprintf(model, sizeof model, "%s/model.yaml", x->tmpdir);
  fb_status st = write_model(&t, model, o);
  if (st == FB_EUNSUPPORTED) return FB_OK;
  FB_TRY(st);
  FB_TRY(write_hw(x, &p, prof, hwpath, sizeof hwpath));
  FB_TRY(search(&t, &p, model, hwpath, o));
  if (!o->skip[0]) ds_published_mem(x, r, o);
  pair_key(&t, &p, o);
  if (p.net_why[0]) assume(&p, p.net_why);
  snprintf(o->assumed, sizeof o->assumed, "%s", p.assumed);
  return FB_OK;
}
