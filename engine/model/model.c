/* Builds the parameter list and unit layout of a GPT-2 or Llama model from its spec.
 * Shapes follow the reference implementations (weights [out, in]); init rules follow GPT-2
 * (normal(0, std), residual projections scaled by 1/sqrt(2L), norms 1, biases 0). */
#include "model.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builder {
  fb_model *m;
  int cap;
  int64_t unit_cursor;
} builder;

static fb_status add_param(builder *b, int unit, const char *name, int64_t rows, int64_t cols,
                           fb_init_kind init, float std) {
  fb_model *m = b->m;
  if (m->nparams == b->cap) {
    int cap = b->cap ? b->cap * 2 : 64;
    fb_param *p = realloc(m->params, (size_t)cap * sizeof *p);
    if (!p) return FB_ERR(FB_ENOMEM, "out of host memory building the parameter list");
    m->params = p;
    b->cap = cap;
  }
  /* The spec's bounds (model_spec.c) keep every product far below 2^63; a spec built in code
   * is checked here too, so no shape ever wraps around. */
  int64_t numel, aligned, cursor, total;
  if (rows < 1 || cols < 1 || __builtin_mul_overflow(rows, cols, &numel) ||
      __builtin_add_overflow(b->unit_cursor, FB_PARAM_ALIGN - 1, &aligned) ||
      __builtin_add_overflow(aligned / FB_PARAM_ALIGN * FB_PARAM_ALIGN, numel, &cursor) ||
      __builtin_add_overflow(m->numel, numel, &total))
    return FB_ERR(FB_EUSAGE, "model '%s': parameter %s is %lld x %lld: the model's size "
                  "overflows a 64-bit count (want smaller dim, ffn, vocab, max_seq or layers)",
                  m->spec.name, name, (long long)rows, (long long)cols);
  fb_param *p = &m->params[m->nparams];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->id = m->nparams;
  p->unit = unit;
  p->rows = rows;
  p->cols = cols;
  p->numel = numel;
  p->init = init;
  p->std = std;
  p->decay = rows > 1 && cols > 1;
  p->offset = aligned / FB_PARAM_ALIGN * FB_PARAM_ALIGN;
  b->unit_cursor = cursor;
  m->numel = total;
  m->nparams++;
  return FB_OK;
}

static void close_unit(builder *b, int unit, int first) {
  fb_unit *u = &b->m->units[unit];
  u->id = unit;
  u->first = first;
  u->count = b->m->nparams - first;
  u->numel = b->unit_cursor;
  if (u->numel > b->m->max_unit_numel) b->m->max_unit_numel = u->numel;
  b->unit_cursor = 0;
}

fb_status fb_model_build(const fb_model_spec *s, fb_model *m) {
  memset(m, 0, sizeof *m);
  m->spec = *s;
  if (s->dim <= 0 || s->heads <= 0 || s->dim % s->heads || s->layers <= 0 || s->vocab <= 0 ||
      s->kv_heads <= 0 || s->heads % s->kv_heads || s->ffn <= 0 || s->max_seq <= 0 || s->layers == INT_MAX)
    return FB_ERR(FB_EUSAGE, "model '%s': inconsistent shape (dim %d, heads %d, kv_heads %d)",
                  s->name, s->dim, s->heads, s->kv_heads);
  m->nunits = 1 + s->layers;
  m->units = calloc((size_t)m->nunits, sizeof *m->units);
  if (!m->units) return FB_ERR(FB_ENOMEM, "out of host memory building units");
  builder b = {.m = m};
  const int64_t C = s->dim, F = s->ffn, V = s->vocab, hd = C / s->heads;
  const float std = s->init_std > 0 ? s->init_std : 0.02f;
  const float res_std = std / sqrtf(2.0f * (float)s->layers);
  char nm[48];
  fb_status st = FB_OK;
#define ADD(unit, name, r, c, init, sd) FB_CHECK_GOTO(st, add_param(&b, unit, name, r, c, init, sd), fail)
  if (s->family == FB_GPT2) {
    ADD(0, "wte", V, C, FB_INIT_NORMAL, std);
    ADD(0, "wpe", s->max_seq, C, FB_INIT_NORMAL, std * 0.5f);
    ADD(0, "ln_f.weight", C, 1, FB_INIT_ONES, 0);
    ADD(0, "ln_f.bias", C, 1, FB_INIT_ZEROS, 0);
    close_unit(&b, 0, 0);
    for (int l = 0; l < s->layers; l++) {
      int first = m->nparams;
#define BN(suffix) (snprintf(nm, sizeof nm, "h.%d.%s", l, suffix), nm)
      ADD(1 + l, BN("ln_1.weight"), C, 1, FB_INIT_ONES, 0);
      ADD(1 + l, BN("ln_1.bias"), C, 1, FB_INIT_ZEROS, 0);
      ADD(1 + l, BN("attn.c_attn.weight"), 3 * C, C, FB_INIT_NORMAL, std);
      ADD(1 + l, BN("attn.c_attn.bias"), 3 * C, 1, FB_INIT_ZEROS, 0);
      ADD(1 + l, BN("attn.c_proj.weight"), C, C, FB_INIT_NORMAL, res_std);
      ADD(1 + l, BN("attn.c_proj.bias"), C, 1, FB_INIT_ZEROS, 0);
      ADD(1 + l, BN("ln_2.weight"), C, 1, FB_INIT_ONES, 0);
      ADD(1 + l, BN("ln_2.bias"), C, 1, FB_INIT_ZEROS, 0);
      ADD(1 + l, BN("mlp.c_fc.weight"), F, C, FB_INIT_NORMAL, std);
      ADD(1 + l, BN("mlp.c_fc.bias"), F, 1, FB_INIT_ZEROS, 0);
      ADD(1 + l, BN("mlp.c_proj.weight"), C, F, FB_INIT_NORMAL, res_std);
      ADD(1 + l, BN("mlp.c_proj.bias"), C, 1, FB_INIT_ZEROS, 0);
      close_unit(&b, 1 + l, first);
    }
  } else {
    const int64_t kvd = (int64_t)s->kv_heads * hd;
    ADD(0, "tok_embeddings.weight", V, C, FB_INIT_NORMAL, std);
    ADD(0, "norm.weight", C, 1, FB_INIT_ONES, 0);
    if (!s->tied) ADD(0, "output.weight", V, C, FB_INIT_NORMAL, std);
    close_unit(&b, 0, 0);
    for (int l = 0; l < s->layers; l++) {
      int first = m->nparams;
#define LN(suffix) (snprintf(nm, sizeof nm, "layers.%d.%s", l, suffix), nm)
      ADD(1 + l, LN("attention_norm.weight"), C, 1, FB_INIT_ONES, 0);
      ADD(1 + l, LN("attention.wq.weight"), C, C, FB_INIT_NORMAL, std);
      ADD(1 + l, LN("attention.wk.weight"), kvd, C, FB_INIT_NORMAL, std);
      ADD(1 + l, LN("attention.wv.weight"), kvd, C, FB_INIT_NORMAL, std);
      ADD(1 + l, LN("attention.wo.weight"), C, C, FB_INIT_NORMAL, res_std);
      ADD(1 + l, LN("ffn_norm.weight"), C, 1, FB_INIT_ONES, 0);
      ADD(1 + l, LN("feed_forward.w1.weight"), F, C, FB_INIT_NORMAL, std);
      ADD(1 + l, LN("feed_forward.w3.weight"), F, C, FB_INIT_NORMAL, std);
      ADD(1 + l, LN("feed_forward.w2.weight"), C, F, FB_INIT_NORMAL, res_std);
      close_unit(&b, 1 + l, first);
    }
  }
#undef ADD
#undef BN
#undef LN
  return FB_OK;
fail:
  fb_model_free(m);
  return st;
}

void fb_model_free(fb_model *m) {
  free(m->params);
  free(m->units);
  memset(m, 0, sizeof *m);
}

double fb_model_forward_flops(const fb_model_spec *s, int B, int T) {
  const double N = (double)B * T, C = s->dim, F = s->ffn, V = s->vocab;
  const double hd = C / s->heads, kvd = (double)s->kv_heads * hd;
  double per_layer;
  if (s->family == FB_GPT2)
    per_layer = 2 * N * (3 * C * C + C * C + 2 * C * F);
  else
    per_layer = 2 * N * (C * C + 2 * C * kvd + C * C + 3 * C * F);
  /* causal attention: QK^T and PV over the lower triangle */
  per_layer += 2.0 * B * s->heads * (double)T * T * hd;
  return per_layer * s->layers + 2 * N * C * V;
}
