/* Forward and backward of the transformer, one stage at a time, on any device: the executor
 * interleaves these calls with the strategy's hooks. Stages: encoder, block l (1..L), head
 * (final norm + classifier + softmax cross-entropy, forward and backward fused chunk by chunk
 * so the [N, vocab] logits never exist whole), block l backward, encoder backward.
 *
 * What is kept for backward, per block (N = B*T tokens, C = dim, F = ffn):
 *   GPT-2: block input, ln_1 out + mean/rstd, qkv [N,3C], attention out [N,C], lse [B,H,T],
 *          mid residual, ln_2 out + mean/rstd, fc out [N,F], gelu out [N,F].
 *   Llama: block input, norm out + rstd, q, k (after RoPE), v, attention out, lse, mid
 *          residual, norm out + rstd, w1 out, w3 out, swiglu out.
 * Attention keeps only its output and the log-sum-exp per query (4*B*H*T bytes), never the
 * T x T probabilities: backward recomputes them block by block. With recompute on, a block
 * keeps only its input and recomputes the rest during its backward.
 * Unit gradients have the compute dtype (fp32; bf16 with mixed precision; fp64 in the whole-
 * model gradient check); statistics (mean, rstd, lse) are fp32 (fp64 in the check). Activations are allocated through the device (FB_MEM_ACT) when produced and freed when the
 * backward no longer needs them, so the memory timeline shows them rise and fall. */
#ifndef FB_TRANSFORMER_H
#define FB_TRANSFORMER_H
#include <stdbool.h>
#include <stdint.h>

#include "../device/kernels.h"
#include "model.h"

typedef struct fb_tf_block_acts fb_tf_block_acts;

typedef struct fb_tf {
  const fb_model *m;
  fb_device *dev;
  fb_stream *s;
  int B, T;
  fb_dtype act;           /* compute dtype of activations and parameters (fp64: checks) */
  bool recompute;
  const int32_t *tokens;  /* device [B*T] */
  const int32_t *targets; /* device [B*T] */
  float dscale;           /* d loss / d (token loss): 1 / global tokens of the step */
  double *loss_dev;       /* device fp64 accumulator for this micro-step */
  /* state */
  fb_buf x0;              /* encoder output = block 1 input */
  fb_tf_block_acts *blocks; /* [L] */
  fb_buf dres;            /* residual-stream gradient during backward */
  fb_buf dscratch;        /* per-block backward scratch */
  fb_buf attn_scratch;    /* attention scratch (temp) */
} fb_tf;

/* Prepares a micro-step (no allocation of activations yet). */
fb_status fb_tf_begin(fb_tf *t, const fb_model *m, fb_device *dev, fb_stream *s, fb_dtype act,
                      int B, int T, bool recompute, const int32_t *tokens, const int32_t *targets,
                      float dscale, double *loss_dev);
fb_status fb_tf_encoder_fwd(fb_tf *t, const void *root_params);
fb_status fb_tf_block_fwd(fb_tf *t, int l, const void *params);  /* l = 1..L */
/* Final norm, head and loss; gradients into root_grads, leaves dres = d(last block output). */
fb_status fb_tf_head(fb_tf *t, const void *root_params, void *root_grads);
fb_status fb_tf_block_bwd(fb_tf *t, int l, const void *params, void *grads);
fb_status fb_tf_encoder_bwd(fb_tf *t, void *root_grads);
/* Frees whatever is still allocated (also after a failure). */
void fb_tf_end(fb_tf *t);

#endif
