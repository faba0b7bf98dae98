/* Model YAML files (models/NAME.yaml or a path) into an fb_model_spec: every key known, every
 * required key present, sizes positive and consistent (dim % heads, heads % kv_heads, even
 * head dim for RoPE). Errors name the file and the key. Shapes and parameter lists are built
 * from the spec in engine/model/. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

typedef enum { K_NAME = 0, K_FAMILY, K_VOCAB, K_DIM, K_LAYERS, K_HEADS, K_KV_HEADS, K_FFN,
               K_MAX_SEQ, K_NORM_EPS, K_ROPE_THETA, K_TIED, K_INIT_STD, K_N } spec_key;

static const char *const key_names[K_N] = {
    [K_NAME] = "name",         [K_FAMILY] = "family",     [K_VOCAB] = "vocab",
    [K_DIM] = "dim",           [K_LAYERS] = "layers",     [K_HEADS] = "heads",
    [K_KV_HEADS] = "kv_heads", [K_FFN] = "ffn",           [K_MAX_SEQ] = "max_seq",
    [K_NORM_EPS] = "norm_eps", [K_ROPE_THETA] = "rope_theta", [K_TIED] = "tied",
    [K_INIT_STD] = "init_std"};

/* Every key is required except rope_theta, which only family llama needs. */

typedef struct spec_ctx {
  fb_model_spec *s;
  bool seen[K_N];
} spec_ctx;

static int key_index(const char *k) {
  char n[32];
  size_t i = 0;
  for (; k[i] && i + 1 < sizeof n; i++) n[i] = k[i] == '-' ? '_' : k[i];
  n[i] = 0;
  for (int j = 0; j < K_N; j++)
    if (!strcmp(key_names[j], n)) return j;
  return -1;
}

/* Upper bounds of the integer keys, each far above any published model, so that a typo or a
 * hostile file is refused at once instead of making the simulator build 10^8 layers for
 * minutes; the products of these bounds fit in int64 (fb_model_build checks them again). A
 * largest-everything model is refused by the memory check in about a second. */
typedef struct int_bound {
  long max;
  const char *why;
} int_bound;

static const int_bound int_bounds[K_N] = {
    [K_VOCAB] = {.max = 1L << 24, .why = "larger than any published vocabulary: Gemma has 256000"},
    [K_DIM] = {.max = 1L << 17, .why = "larger than any published model: PaLM-540B has 18432"},
    [K_LAYERS] = {.max = 1024, .why = "8x any published model (llama3.1-405b has 126); the "
                                      "simulator takes seconds per 1000 layers"},
    [K_HEADS] = {.max = 1L << 14, .why = "larger than any published model: llama3.1-405b has 128"},
    [K_KV_HEADS] = {.max = 1L << 14, .why = "at most the heads bound"},
    [K_FFN] = {.max = 1L << 20, .why = "larger than any published model: llama3.1-405b has 53248"},
    [K_MAX_SEQ] = {.max = 1L << 20,
                   .why = "8x any published training context (llama3.1-405b has 131072)"},
};

static fb_status set_int(const char *where, spec_key k, const char *key, const char *v,
                         int *out) {
  const int_bound *b = &int_bounds[k];
  assert(b->max > 0 && b->max <= INT_MAX);
  char *e;
  errno = 0;
  long x = (*v && !isspace((unsigned char)*v)) ? strtol(v, &e, 10) : 0;
  if (!*v || isspace((unsigned char)*v) || *e || errno)
    return FB_ERR(FB_EUSAGE, "%s%s: '%s' is not an integer (want an integer in [1, %ld])", where,
                  key, v, b->max);
  if (x < 1 || x > b->max)
    return FB_ERR(FB_EUSAGE, "%s%s: '%s' is not allowed (want an integer in [1, %ld]; %s)",
                  where, key, v, b->max, x < 1 ? "sizes are positive" : b->why);
  *out = (int)x;
  return FB_OK;
}

static fb_status set_pos_float(const char *where, const char *key, const char *v, float *out) {
  char *e;
  errno = 0;
  double x = (*v && !isspace((unsigned char)*v)) ? strtod(v, &e) : 0;
  if (!*v || isspace((unsigned char)*v) || *e || errno || !isfinite(x))
    return FB_ERR(FB_EUSAGE, "%s%s: '%s' is not a number (want a number > 0)", where, key, v);
  if (!(x > 0) || !isfinite((float)x) || (float)x == 0.0f)
    return FB_ERR(FB_EUSAGE, "%s%s: '%s' is not allowed (want a number > 0)", where, key, v);
  *out = (float)x;
  return FB_OK;
}

static fb_status visit(void *vctx, const char *path, int line, const char *key, const char *v) {
  spec_ctx *ctx = vctx;
  fb_model_spec *s = ctx->s;
  char where[600];
  snprintf(where, sizeof where, "%s:%d: ", path, line);
  int k = key_index(key);
  if (k < 0)
    return FB_ERR(FB_EUSAGE,
                  "%sunknown key '%s' (allowed: name, family, vocab, dim, layers, heads, "
                  "kv_heads, ffn, max_seq, norm_eps, rope_theta, tied, init_std)",
                  where, key);
  ctx->seen[k] = true;
  switch ((spec_key)k) {
  case K_NAME:
    if (!*v || strlen(v) >= sizeof s->name)
      return FB_ERR(FB_EUSAGE, "%sname: '%s' is not allowed (want 1 to %zu characters)", where, v,
                    sizeof s->name - 1);
    snprintf(s->name, sizeof s->name, "%s", v);
    return FB_OK;
  case K_FAMILY:
    if (!strcmp(v, "gpt2")) s->family = FB_GPT2;
    else if (!strcmp(v, "llama")) s->family = FB_LLAMA;
    else return FB_ERR(FB_EUSAGE, "%sfamily: '%s' is not allowed (want gpt2 or llama)", where, v);
    return FB_OK;
  case K_VOCAB: return set_int(where, K_VOCAB, key, v, &s->vocab);
  case K_DIM: return set_int(where, K_DIM, key, v, &s->dim);
  case K_LAYERS: return set_int(where, K_LAYERS, key, v, &s->layers);
  case K_HEADS: return set_int(where, K_HEADS, key, v, &s->heads);
  case K_KV_HEADS: return set_int(where, K_KV_HEADS, key, v, &s->kv_heads);
  case K_FFN: return set_int(where, K_FFN, key, v, &s->ffn);
  case K_MAX_SEQ: return set_int(where, K_MAX_SEQ, key, v, &s->max_seq);
  case K_NORM_EPS: return set_pos_float(where, key, v, &s->norm_eps);
  case K_ROPE_THETA: return set_pos_float(where, key, v, &s->rope_theta);
  case K_INIT_STD: return set_pos_float(where, key, v, &s->init_std);
  case K_TIED:
    if (!strcasecmp(v, "true") || !strcasecmp(v, "yes")) s->tied = true;
    else if (!strcasecmp(v, "false") || !strcasecmp(v, "no")) s->tied = false;
    else return FB_ERR(FB_EUSAGE, "%stied: '%s' is not allowed (want true or false)", where, v);
    return FB_OK;
  case K_N: break;
  }
  return FB_ERR(FB_EINTERNAL, "model key %d not handled", k);
}

fb_status fb_model_spec_load(const char *name_or_path, fb_model_spec *out) {
  char path[4096];
  FB_TRY(fb_resolve_yaml("models", name_or_path, path, sizeof path));
  fb_model_spec s = {.rope_theta = 10000.0f};
  spec_ctx ctx = {.s = &s};
  FB_TRY(fb_yaml_read_flat(path, "--model", visit, &ctx));
  for (int k = 0; k < K_N; k++) {
    if (ctx.seen[k] || (k == K_ROPE_THETA && s.family != FB_LLAMA)) continue;
    return FB_ERR(FB_EUSAGE,
                  "%s: missing key '%s' (required: name, family, vocab, dim, layers, heads, "
                  "kv_heads, ffn, max_seq, norm_eps, tied, init_std; rope_theta for llama)",
                  path, key_names[k]);
  }
  if (s.dim % s.heads)
    return FB_ERR(FB_EUSAGE, "%s: heads: %d does not divide dim %d (want dim %% heads == 0)", path,
                  s.heads, s.dim);
  if (s.kv_heads > s.heads || s.heads % s.kv_heads)
    return FB_ERR(FB_EUSAGE,
                  "%s: kv_heads: %d does not divide heads %d (want heads %% kv_heads == 0)", path,
                  s.kv_heads, s.heads);
  if (s.family == FB_GPT2 && s.kv_heads != s.heads)
    return FB_ERR(FB_EUSAGE,
                  "%s: kv_heads: %d is not allowed for family gpt2 (want kv_heads == heads, %d)",
                  path, s.kv_heads, s.heads);
  if (s.family == FB_LLAMA && (s.dim / s.heads) % 2)
    return FB_ERR(FB_EUSAGE,
                  "%s: heads: head dim %d/%d = %d is odd (family llama needs an even head dim "
                  "for RoPE)",
                  path, s.dim, s.heads, s.dim / s.heads);
  *out = s;
  return FB_OK;
}
