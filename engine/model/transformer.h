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
 * T x T probabilities: backward recomputes them block by block.
 *
 * Activation checkpointing (fb_recompute, torchtitan's `activation_checkpoint.mode`):
 *   full       a block keeps only its input (the previous block's output, kept anyway) and
 *              reruns its whole forward at the start of its backward.
 *   selective  selective checkpointing of the attention core, as Megatron-LM's
 *              recompute_granularity=selective (Korthikanti et al. 2022, "Reducing Activation
 *              Recomputation in Large Transformer Models"). The attention core here is the one
 *              op fb_k_attention_fwd = softmax(QK^T / sqrt(hd)) V, flash style: it never stores
 *              the T x T scores or probabilities (its backward rebuilds P block by block in
 *              every mode), so what it saves for backward is its output [N,C] (the input of
 *              the output projection) and the log-sum-exp [B,H,T]. Selective frees those two
 *              right after the block's forward and reruns fb_k_attention_fwd on the saved
 *              q/k/v (GPT-2: the fused qkv matmul output; Llama: q and k after RoPE, v) just
 *              before the output projection's backward, the first backward op that reads
 *              them. The matmul outputs (qkv or q/k/v, the MLP's fc or w1/w3; the output
 *              projections write the residual stream, kept as the mid residual and the block
 *              output) and the elementwise results around them (norms, gelu, swiglu) stay
 *              saved, so nothing else is rerun.
 *              (torchtitan's op-level policy differs: see op.)
 *   op         torchtitan's op-level selective checkpointing (selective_ac_option "op",
 *              torchtitan/parallelisms/parallelize_llama.py, _save_list and _custom_policy):
 *              of a block's matmuls, counted in forward order, the outputs of the 1st, 3rd,
 *              ... are saved and the others rerun; attention's output and log-sum-exp are
 *              saved; every other op (norms, RoPE, gelu/swiglu, residual adds) is rerun. Here:
 *              GPT-2 keeps qkv (matmul 1), the attention output and lse and fc (matmul 3);
 *              Llama keeps q (matmul 1, kept after its rotation: torchtitan keeps it before
 *              and reruns RoPE), v (matmul 3), the attention output and lse, and w1's output
 *              (matmul 5). The last matmul (GPT-2's 4th, Llama's 7th) writes the block output,
 *              kept anyway (torchtitan also saves w2's output beside it: one [N,C] tensor per
 *              block more than here). Everything else is freed after forward and rebuilt at
 *              the start of the block's backward: norm 1 and its statistics, (Llama: wk, k's
 *              RoPE), the output projection and the mid residual, norm 2, (Llama: w3, swiglu;
 *              GPT-2: gelu, which is one op with its matmul, matmul_gelu_fwd, so fc's GEMM
 *              reruns with it and rewrites fc's kept bits unchanged).
 *   The reruns use the same kernels on the same inputs, so the gradients and the trained
 *   parameters are bitwise those without recompute; the simulator costs the rerun kernels
 *   like any other (they go through the same fb_k_* wrappers) and sees the smaller ledger.
 * recompute_passes P (full mode): the block's forward reruns P times in its backward, as
 * PyTorch does under P nested checkpoint wrappers (each level reruns what it wraps); the
 * reruns write the same saved set, so the results are the same bits.
 * recompute_layers K (0 = all): only K of the L blocks are checkpointed, spread evenly and
 * starting with the first: block l (1-based) iff ((l-1)*K) mod L < K, i.e. every (L/K)-th
 * block 1, 1+L/K, ... (torchtitan's layer frequency, counted from block 1: the last block's
 * backward follows its forward at once, so checkpointing it frees the least at the peak).
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

/* Activation checkpointing mode (see above); the config's --recompute. */
typedef enum fb_recompute {
  FB_RECOMPUTE_OFF = 0,
  FB_RECOMPUTE_FULL,
  FB_RECOMPUTE_SELECTIVE,
  FB_RECOMPUTE_OP
} fb_recompute;

/* "off", "full", "selective", "op" ("?" for anything else). */
const char *fb_recompute_name(fb_recompute m);
/* Whether block l (1..L) of L is checkpointed when K of them are (K = 0 or K >= L: all). */
bool fb_tf_block_recomputed(int l, int L, int K);

/* How the head chunks its logits: rows of at most chunk_bytes of fp32 logits. A CPU run keeps its
 * temporaries small (64 MiB). A GPU run (cuda, or sim with a GPU profile) takes 4 GiB, which
 * holds a micro-batch's logits whole, as PyTorch frameworks materialise them (torchtitan,
 * llm-foundry): the head is then one GEMM per pass that reads the weight once, where a chunked
 * head reads it, and read-modify-writes its fp32 gradient, once per chunk (measured on an
 * H200: 1B at batch 4 x 2048 predicted 202 ms/step chunked, 169 whole after the profiles'
 * refit; PyTorch ran 170-175, docs/simulator.md). */
typedef struct fb_tf_logits {
  size_t chunk_bytes; /* fp32 bytes of logits one chunk may hold */
  int rows;           /* a chunk smaller than the micro-batch has a multiple of this many rows
                         (on a GPU an odd row count leaves the head's GEMM rows 2-byte aligned,
                         off the tensor-core fast path) */
  int vocab_multiple; /* the head's GEMMs run on the vocabulary padded to a multiple of this
                         (0 or 1: none). A run sets it from --vocab-pad: 128 on cuda, where
                         cuBLAS keeps its fast kernels (GPT-2's 50257 columns ran on sm75
                         fallbacks on an H100: 122 -> 109 ms a step padded to 50304); 1 on cpu
                         and sim unless asked. Compute only: the weight and its gradient are
                         copied into [Vp, C] buffers with zero rows past V for the head and
                         back, the logits rows are Vp wide and their padding columns get a zero
                         gradient; parameters, their layout and count, the loss and every
                         gradient are those of the unpadded head (tests/test_vocab_pad.c). The
                         executing cpu keeps the padded buffers but runs the unpadded head's
                         GEMMs and chunks on their first V rows (a BLAS rounds by shape). */
} fb_tf_logits;
extern const fb_tf_logits fb_tf_logits_cpu, fb_tf_logits_gpu;

typedef struct fb_tf {
  const fb_model *m;
  fb_device *dev;
  fb_stream *s;
  int B, T;
  fb_dtype act;           /* compute dtype of activations and parameters (fp64: checks) */
  fb_recompute recompute; /* activation checkpointing mode */
  int recompute_layers;   /* checkpoint K of the L blocks (0 = all); set after fb_tf_begin,
                           * before the first block forward */
  int recompute_passes;   /* a fully checkpointed block's forward reruns this many times in its
                           * backward (1 = fb_tf_begin's; 2 = nested checkpoint wrappers) */
  const fb_tf_logits *logits; /* the head's chunking (fb_tf_logits_cpu unless set after
                               * fb_tf_begin) */
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

/* Prepares a micro-step (no allocation of activations yet); recompute applies to every block
 * until recompute_layers is set. */
fb_status fb_tf_begin(fb_tf *t, const fb_model *m, fb_device *dev, fb_stream *s, fb_dtype act,
                      int B, int T, fb_recompute recompute, const int32_t *tokens,
                      const int32_t *targets, float dscale, double *loss_dev);
fb_status fb_tf_encoder_fwd(fb_tf *t, const void *root_params);
fb_status fb_tf_block_fwd(fb_tf *t, int l, const void *params);  /* l = 1..L */
/* Final norm, head and loss; gradients into root_grads, leaves dres = d(last block output). */
fb_status fb_tf_head(fb_tf *t, const void *root_params, void *root_grads);
fb_status fb_tf_block_bwd(fb_tf *t, int l, const void *params, void *grads);
fb_status fb_tf_encoder_bwd(fb_tf *t, void *root_grads);
/* Frees whatever is still allocated (also after a failure). */
void fb_tf_end(fb_tf *t);

#endif
