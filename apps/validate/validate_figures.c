/* `validate --dataset` on training-run files: a row's published figures as tokens/s per GPU
 * (see validate_rows.h, ds_published_tps). Sources print what they measured in their own units:
 * tokens/s per GPU (or a range "6100-6200"), tokens/s over all GPUs, samples/s, seconds per
 * iteration, TFLOP/s per GPU, MFU or HFU. The last three count FLOPs by each source's own
 * formula (../shared/gpu-data/SOURCES.md, "strategy-runs.csv"), restated in the table below;
 * nothing here is fitted. It runs nothing and prints nothing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "validate_rows.h"

/* Parameters of a Llama-shaped model (q, k, v, o, SwiGLU, two norms per block, embeddings). */
static double params(const ds_fig_in *m, bool tied) {
  const double kvd = m->d * m->kv / m->h;
  return m->L * (2 * m->d * m->d + 2 * m->d * kvd + 3 * m->d * m->f + 2 * m->d) +
         m->v * m->d * (tied ? 1 : 2) + m->d;
}

/* Megatron-DeepSpeed's throughput_calculator (megatron/utils.py), per token:
 * 24 c L h^2 (1 + s / 6h + V / 16 L h), c = 4 with activation checkpointing, else 3. It
 * reproduces the ZeRO++ tutorial's printed 7.65 / 20.70 TFLOPs from its iteration times. */
static double flops_megatron(const ds_fig_in *m) {
  const double c = m->recompute ? 4 : 3;
  return 24 * c * m->L * m->d * m->d *
         (1 + m->seq / (6 * m->d) + m->v / (16 * m->L * m->d));
}

/* ATorch's compute_llama2_training_flops(...)[0] ("hardware flops", fsdp_llama2.py), per token:
 * the block GEMMs and the unmasked attention (4 s h per layer) forward, rerun and backward
 * (4x with checkpointing, 3x without), the head 3x. It reproduces the note's 1.0024e15 per GPU
 * and iteration (B 4, s 4096, Llama-2-7B). */
static double flops_atorch(const ds_fig_in *m) {
  const double c = m->recompute ? 4 : 3, kvd = m->d * m->kv / m->h;
  const double gemm = 2 * m->L * (2 * m->d * m->d + 2 * m->d * kvd + 3 * m->d * m->f);
  return c * (gemm + 4 * m->seq * m->d * m->L) + 6 * m->v * m->d;
}

/* KempnerForge kempnerforge/metrics/mfu.py: 6 P + 12 L D S per token, P with the untied
 * embeddings (reproduces the printed 51.7 / 53.8 / 44.4 %). */
static double flops_kempner(const ds_fig_in *m) {
  return 6 * params(m, false) + 12 * m->L * m->d * m->seq;
}

/* oumi's MFU callback (src/lema/performance/mfu.py): 6 N per token, N with the tied
 * embeddings of the model family (1.71B), no attention term. */
static double flops_oumi(const ds_fig_in *m) { return 6 * params(m, true); }

typedef struct flop_rule {
  const char *source;             /* source_id */
  double (*per_token)(const ds_fig_in *m);
  double peak;                    /* FLOP/s per GPU the MFU / HFU figures divide by */
  const char *what;               /* the convention, one phrase */
} flop_rule;

static const flop_rule flop_rules[] = {
    {.source = "zeropp-blog", .per_token = flops_megatron,
     .what = "Megatron-DeepSpeed's estimate, recompute counted"},
    {.source = "zeropp-tutorial", .per_token = flops_megatron,
     .what = "Megatron-DeepSpeed's estimate, recompute counted"},
    {.source = "atorch-llama2", .per_token = flops_atorch, .peak = 312e12,
     .what = "ATorch's hardware FLOPs, recompute counted, HFU of 312"},
    {.source = "kempnerforge-mfu", .per_token = flops_kempner, .peak = 989e12,
     .what = "KempnerForge's 6P + 12LDS of 989"},
    {.source = "oumi-pr213", .per_token = flops_oumi, .peak = 312e12,
     .what = "oumi's 6N of 312"},
};

static const flop_rule *flop_rule_for(const char *src) {
  for (size_t i = 0; i < sizeof flop_rules / sizeof flop_rules[0]; i++)
    if (!strcmp(src, flop_rules[i].source)) return &flop_rules[i];
  return NULL;
}

/* One published figure, converted; NaN when the row lacks it or it cannot be converted. */
typedef struct figure {
  const char *column, *unit;
  double value, tps;              /* as printed; tokens/s per GPU */
  char how[96];                   /* the conversion */
} figure;

static void convert(const ds_fig_in *m, const flop_rule *fr, figure *g) {
  const double v = g->value, n = m->world;
  g->tps = NAN;
  if (!strcmp(g->column, "tokens_per_s_total")) {
    g->tps = v / n;
    snprintf(g->how, sizeof g->how, "/ %.0f GPUs", n);
  } else if (!strcmp(g->column, "samples_per_s")) {
    g->tps = v * m->seq / n;
    snprintf(g->how, sizeof g->how, "x %.0f tokens / %.0f GPUs", m->seq, n);
  } else if (!strcmp(g->column, "iter_time_s") && m->gb > 0) {
    g->tps = m->gb * m->seq / v / n;
    snprintf(g->how, sizeof g->how, "%.0f x %.0f tokens per step / %.0f GPUs", m->gb, m->seq, n);
  } else if (fr && !strcmp(g->column, "tflops_per_gpu")) {
    g->tps = v * 1e12 / fr->per_token(m);
    snprintf(g->how, sizeof g->how, "%s", fr->what);
  } else if (fr && fr->peak > 0 && (!strcmp(g->column, "mfu") || !strcmp(g->column, "hfu"))) {
    g->tps = v * fr->peak / fr->per_token(m);
    snprintf(g->how, sizeof g->how, "%s", fr->what);
  }
}

/* tokens_per_s_per_gpu as printed: a number, or a range "A-B" read as its midpoint. */
static double tps_column(const char *s, char *how, size_t n) {
  double a, b;
  char tail;
  if (sscanf(s, "%lf-%lf%c", &a, &b, &tail) == 2 && a > 0 && b >= a) {
    snprintf(how, n, "range %s: its midpoint", s);
    return 0.5 * (a + b);
  }
  how[0] = 0;
  return ds_num(s);
}

double ds_published_tps(const ds_ctx *x, int r, const ds_fig_in *m, char *note, size_t n) {
  static const struct { const char *column, *unit; } cols[] = {
      {"tokens_per_s_total", "tok/s"}, {"samples_per_s", "samples/s"},
      {"iter_time_s", "s/step"},       {"tflops_per_gpu", "TFLOP/s"},
      {"mfu", "MFU"},                  {"hfu", "HFU"},
  };
  const flop_rule *fr = flop_rule_for(ds_col(x, r, "source_id"));
  char how[96];
  const char *first = ds_col(x, r, "tokens_per_s_per_gpu");
  double pub = tps_column(first, how, sizeof how);
  size_t len = 0;
  note[0] = 0;
  if (how[0]) len += (size_t)snprintf(note, n, "tok/s/GPU %s %.0f", how, pub);
  for (size_t i = 0; i < sizeof cols / sizeof cols[0] && len < n; i++) {
    figure g = {.column = cols[i].column, .unit = cols[i].unit,
                .value = ds_num(ds_col(x, r, cols[i].column))};
    if (!(g.value > 0)) continue;
    convert(m, fr, &g);
    const bool use = !(pub > 0) && g.tps > 0;
    if (use) pub = g.tps;
    if (g.tps > 0)
      len += (size_t)snprintf(note + len, n - len, "%s%g %s (%s) = %.1f tok/s/GPU%s",
                              len ? "; " : "", g.value, g.unit, g.how, g.tps,
                              use ? ", the figure compared" : "");
    else
      len += (size_t)snprintf(note + len, n - len, "%s%g %s: no FLOP convention stated for "
                              "this source, not read", len ? "; " : "", g.value, g.unit);
  }
  return pub > 0 ? pub : NAN;
}
