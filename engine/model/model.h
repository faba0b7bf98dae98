/* Model description: the parameter list (names, shapes, init), grouped into units, and the
 * flat layout of each unit. Unit 0 is the root (embeddings, final norm, head); unit 1+l is
 * block l. Inside a unit, parameters follow in a fixed order, each starting at a multiple of
 * FB_PARAM_ALIGN elements; the gaps are zero in every buffer.
 * This file knows shapes only: the math is in transformer.h, values in init.h. */
#ifndef FB_MODEL_H
#define FB_MODEL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

#define FB_PARAM_ALIGN 16

typedef enum fb_family { FB_GPT2 = 0, FB_LLAMA = 1 } fb_family;

typedef struct fb_model_spec {
  char name[64];
  fb_family family;
  int vocab, dim, layers, heads, kv_heads, ffn, max_seq;
  float norm_eps, rope_theta, init_std;
  bool tied; /* head shares the token embedding */
} fb_model_spec;

typedef enum fb_init_kind { FB_INIT_NORMAL = 0, FB_INIT_ONES, FB_INIT_ZEROS } fb_init_kind;

typedef struct fb_param {
  char name[48];      /* e.g. "blocks.3.attn.qkv.weight" */
  int id;             /* index in model order */
  int unit;
  int64_t rows, cols; /* cols == 1 for vectors */
  int64_t numel;
  int64_t offset;     /* first element inside its unit's flat buffer */
  bool decay;         /* weight decay applies (matrices, not norms/biases) */
  fb_init_kind init;
  float std;
} fb_param;

typedef struct fb_unit {
  int id;
  int first, count;   /* params [first, first+count) */
  int64_t numel;      /* flat length including alignment gaps (no world padding) */
} fb_unit;

/* Parameter slots inside a unit (index relative to unit.first). */
enum { FB_G_WTE = 0, FB_G_WPE, FB_G_LNF_W, FB_G_LNF_B, FB_G_ROOT_N };
enum { FB_G_LN1_W = 0, FB_G_LN1_B, FB_G_QKV_W, FB_G_QKV_B, FB_G_PROJ_W, FB_G_PROJ_B, FB_G_LN2_W,
       FB_G_LN2_B, FB_G_FC_W, FB_G_FC_B, FB_G_FC2_W, FB_G_FC2_B, FB_G_BLOCK_N };
enum { FB_L_TOK = 0, FB_L_NORM, FB_L_HEAD /* only when untied */ };
enum { FB_L_ATTN_NORM = 0, FB_L_WQ, FB_L_WK, FB_L_WV, FB_L_WO, FB_L_FFN_NORM, FB_L_W1, FB_L_W3,
       FB_L_W2, FB_L_BLOCK_N };

typedef struct fb_model {
  fb_model_spec spec;
  fb_param *params;
  int nparams;
  fb_unit *units;
  int nunits;         /* 1 + layers */
  int64_t numel;      /* true parameter count (no gaps) */
  int64_t max_unit_numel;
} fb_model;

fb_status fb_model_build(const fb_model_spec *spec, fb_model *out);
void fb_model_free(fb_model *m);
static inline int fb_head_dim(const fb_model_spec *s) { return s->dim / s->heads; }
/* Matmul FLOPs of one forward pass over B*T tokens (attention products included);
 * a training step costs 3x (forward + 2x backward). */
double fb_model_forward_flops(const fb_model_spec *s, int B, int T);

/* Names as a PyTorch user reads them, taken from the model's own parameter names
 * (model_names.c; the one place that builds them):
 *  - fb_model_unit_name: unit u's module path, "layers.3" (llama) / "h.3" (gpt2); "root" for
 *    unit 0 (embeddings, final norm, head); "" when u is not a unit.
 *  - fb_model_op_name: the name of an op of unit `unit` (-1: none). `param` is 1 + the model id
 *    of the parameter the op applies (fb_kctx.param; 0: none). An op on a parameter is named
 *    by the parameter's module ("layers.3.attention.wq", "h.3.mlp.c_fc"); a collective or a
 *    phase span (per_unit) is "<op> <unit>" ("all_gather layers.3", "forward h.0"); any other
 *    op of a block is "<unit>.<op>" ("layers.3.attention_fwd"); else plain op.
 * Both truncate to n bytes (n > 0) and return buf. */
const char *fb_model_unit_name(const fb_model *m, int unit, char *buf, size_t n);
const char *fb_model_op_name(const fb_model *m, int unit, int param, const char *op,
                             bool per_unit, char *buf, size_t n);

#endif
