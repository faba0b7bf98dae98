/* Transformer stages (see transformer.h). Composition only: every piece of math is a kernel
 * behind fb_k_*; this file decides shapes, buffers and their lifetimes. */
#include "transformer.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/cpu_kernels.h"

struct fb_tf_block_acts {
  fb_buf x_out;                          /* block output = next block input (always kept) */
  fb_buf ln1, ln1_mean, ln1_rstd, qkv, q, k, v, att, lse, xmid, ln2, ln2_mean, ln2_rstd;
  fb_buf fc, gelu, a, b, h;
  bool have; /* the saved set (everything but x_out) is allocated */
  bool core_dropped; /* selective: att and lse were freed after forward, rerun before use */
  bool op_dropped;   /* op: the buffers op_kept marks not were freed after forward */
};

#define ACT FB_MEM_ACT
/* element size of activations, parameters and unit gradients; of statistics (fp32, fp64 in
 * the fp64 checks) */
static inline size_t esz(const fb_tf *t) { return fb_dtype_size(t->act); }
static inline size_t ssz(const fb_tf *t) { return t->act == FB_F64 ? 8 : 4; }
static inline fb_kctx kc(const fb_tf *t, int unit) {
  fb_kctx k = {.dev = t->dev, .s = t->s, .act = t->act, .unit = unit};
  return k;
}
/* The context k of the calling stage (named `k`, beside `t`) for a kernel on parameter `slot`
 * of k's unit: the recorder names the kernel's trace slice after that parameter's module. */
static inline fb_kctx on_param(const fb_tf *t, fb_kctx k, int slot) {
  k.param = 1 + t->m->units[k.unit].first + slot;
  return k;
}
#define ON(slot) ((const fb_kctx[]){on_param(t, k, (slot))})
/* Parameter `slot` of unit u inside a flat buffer of the compute dtype / of fp32 grads. */
static inline void *par(const fb_tf *t, const void *base, int u, int slot) {
  const fb_param *p = &t->m->params[t->m->units[u].first + slot];
  return (char *)base + (size_t)p->offset * esz(t);
}
static inline void *grd(const fb_tf *t, void *base, int u, int slot) {
  const fb_param *p = &t->m->params[t->m->units[u].first + slot];
  return (char *)base + (size_t)p->offset * esz(t); /* gradients have the compute dtype */
}

static fb_status act_alloc(fb_tf *t, fb_buf *b, size_t elems, size_t elsz, const char *label) {
  return fb_alloc(t->dev, elems * elsz, ACT, label, b);
}

const fb_tf_logits fb_tf_logits_cpu = {.chunk_bytes = (size_t)64 << 20, .rows = 1,
                                       .vocab_multiple = 1};
const fb_tf_logits fb_tf_logits_gpu = {.chunk_bytes = (size_t)4 << 30, .rows = 128,
                                       .vocab_multiple = 1};

fb_status fb_tf_begin(fb_tf *t, const fb_model *m, fb_device *dev, fb_stream *s, fb_dtype act,
                      int B, int T, fb_recompute recompute, const int32_t *tokens,
                      const int32_t *targets, float dscale, double *loss_dev) {
  memset(t, 0, sizeof *t);
  t->m = m;
  t->dev = dev;
  t->s = s;
  t->act = act;
  t->B = B;
  t->T = T;
  t->recompute = recompute;
  t->recompute_passes = 1;
  t->logits = &fb_tf_logits_cpu;
  t->tokens = tokens;
  t->targets = targets;
  t->dscale = dscale;
  t->loss_dev = loss_dev;
  t->blocks = calloc((size_t)m->spec.layers, sizeof *t->blocks);
  if (!t->blocks) return FB_ERR(FB_ENOMEM, "out of host memory (activation table)");
  const fb_model_spec *sp = &m->spec;
  size_t sc = fb_attention_scratch_bytes(dev, B, T, sp->heads, sp->kv_heads, fb_head_dim(sp)) *
              (act == FB_F64 ? 2 : 1);
  return fb_alloc(dev, sc, FB_MEM_TEMP, "attention.scratch", &t->attn_scratch);
}

const char *fb_recompute_name(fb_recompute m) {
  switch (m) {
  case FB_RECOMPUTE_OFF: return "off";
  case FB_RECOMPUTE_FULL: return "full";
  case FB_RECOMPUTE_SELECTIVE: return "selective";
  case FB_RECOMPUTE_OP: return "op";
  }
  return "?";
}

bool fb_tf_block_recomputed(int l, int L, int K) {
  if (K <= 0 || K >= L) return true;
  return (int)(((long long)(l - 1) * K) % L) < K; /* exactly K blocks, starting with block 1 */
}

static fb_recompute block_mode(const fb_tf *t, int l) {
  if (t->recompute == FB_RECOMPUTE_OFF) return FB_RECOMPUTE_OFF;
  return fb_tf_block_recomputed(l, t->m->spec.layers, t->recompute_layers) ? t->recompute
                                                                             : FB_RECOMPUTE_OFF;
}

/* The saved set of a block, in allocation order: the buffer, its size, its ledger label, the
 * families that have it and whether op-level checkpointing keeps it after forward (the
 * outputs of a block's 1st, 3rd, ... matmul and of attention, transformer.h). */
enum { SZ_NC, SZ_NKV, SZ_N3C, SZ_NF, SZ_STAT, SZ_LSE };
enum { FAM_GPT2 = 1, FAM_LLAMA = 2, FAM_BOTH = 3 };
typedef struct saved_buf {
  size_t off;        /* of the fb_buf in fb_tf_block_acts */
  unsigned char size, fam;
  bool op_kept;
  const char *label;
} saved_buf;
#define SB(f, sz, fm, kept, lab) {offsetof(fb_tf_block_acts, f), sz, fm, kept, lab}
static const saved_buf saved_bufs[] = {
    SB(ln1, SZ_NC, FAM_BOTH, false, "act.norm1"),
    SB(ln1_rstd, SZ_STAT, FAM_BOTH, false, "act.norm1.rstd"),
    SB(att, SZ_NC, FAM_BOTH, true, "act.attn_out"),
    SB(lse, SZ_LSE, FAM_BOTH, true, "act.attn_lse"),
    SB(xmid, SZ_NC, FAM_BOTH, false, "act.residual_mid"),
    SB(ln2, SZ_NC, FAM_BOTH, false, "act.norm2"),
    SB(ln2_rstd, SZ_STAT, FAM_BOTH, false, "act.norm2.rstd"),
    SB(ln1_mean, SZ_STAT, FAM_GPT2, false, "act.norm1.mean"),
    SB(ln2_mean, SZ_STAT, FAM_GPT2, false, "act.norm2.mean"),
    SB(qkv, SZ_N3C, FAM_GPT2, true, "act.qkv"),   /* matmul 1 */
    SB(fc, SZ_NF, FAM_GPT2, true, "act.fc"),      /* matmul 3 */
    SB(gelu, SZ_NF, FAM_GPT2, false, "act.gelu"),
    SB(q, SZ_NC, FAM_LLAMA, true, "act.q"),       /* matmul 1 */
    SB(k, SZ_NKV, FAM_LLAMA, false, "act.k"),
    SB(v, SZ_NKV, FAM_LLAMA, true, "act.v"),      /* matmul 3 */
    SB(a, SZ_NF, FAM_LLAMA, true, "act.w1"),      /* matmul 5 */
    SB(b, SZ_NF, FAM_LLAMA, false, "act.w3"),
    SB(h, SZ_NF, FAM_LLAMA, false, "act.swiglu"),
};
#undef SB
enum { NSAVED = sizeof saved_bufs / sizeof saved_bufs[0] };

static fb_buf *saved_at(fb_tf_block_acts *a, int i) {
  return (fb_buf *)((char *)a + saved_bufs[i].off);
}

static bool saved_in(const fb_tf *t, int i) {
  return saved_bufs[i].fam & (t->m->spec.family == FB_GPT2 ? FAM_GPT2 : FAM_LLAMA);
}

static size_t saved_bytes(const fb_tf *t, int i) {
  const fb_model_spec *s = &t->m->spec;
  const size_t N = (size_t)t->B * t->T, C = s->dim, F = s->ffn, E = esz(t);
  const size_t kvd = (size_t)s->kv_heads * fb_head_dim(s);
  switch (saved_bufs[i].size) {
  case SZ_NC: return N * C * E;
  case SZ_NKV: return N * kvd * E;
  case SZ_N3C: return N * 3 * C * E;
  case SZ_NF: return N * F * E;
  case SZ_STAT: return N * ssz(t);
  default: return (size_t)t->B * s->heads * t->T * ssz(t); /* SZ_LSE */
  }
}

static void free_saved(fb_tf *t, fb_tf_block_acts *a) {
  for (int i = 0; i < NSAVED; i++) fb_free(t->dev, saved_at(a, i), NULL);
  a->have = false;
  a->core_dropped = false;
  a->op_dropped = false;
}

/* Allocates the block's saved set (only_dropped: what op-level checkpointing freed). */
static fb_status alloc_set(fb_tf *t, fb_tf_block_acts *a, bool only_dropped) {
  for (int i = 0; i < NSAVED; i++) {
    if (!saved_in(t, i) || (only_dropped && saved_bufs[i].op_kept)) continue;
    fb_status st = fb_alloc(t->dev, saved_bytes(t, i), ACT, saved_bufs[i].label, saved_at(a, i));
    if (st != FB_OK) {
      free_saved(t, a);
      return st;
    }
  }
  a->have = true;
  return FB_OK;
}

static fb_status alloc_saved(fb_tf *t, fb_tf_block_acts *a) { return alloc_set(t, a, false); }

/* Op-level checkpointing after forward: frees what the policy does not keep. */
static void op_drop(fb_tf *t, fb_tf_block_acts *a) {
  for (int i = 0; i < NSAVED; i++)
    if (saved_in(t, i) && !saved_bufs[i].op_kept) fb_free(t->dev, saved_at(a, i), NULL);
  a->op_dropped = true;
}

fb_status fb_tf_encoder_fwd(fb_tf *t, const void *root) {
  const fb_model_spec *s = &t->m->spec;
  const size_t N = (size_t)t->B * t->T;
  FB_TRY(act_alloc(t, &t->x0, N * s->dim, esz(t), "act.embedding"));
  fb_kctx k = kc(t, 0);
  const void *wpe = s->family == FB_GPT2 ? par(t, root, 0, FB_G_WPE) : NULL;
  return fb_k_encoder_fwd(ON(0), t->x0.ptr, t->tokens, par(t, root, 0, 0), wpe, t->B, t->T, s->dim);
}

static const void *block_input(const fb_tf *t, int l) {
  return l == 1 ? t->x0.ptr : t->blocks[l - 2].x_out.ptr;
}

/* The block's forward into a (saved set must be allocated). op_rerun: only the ops whose
 * outputs op-level checkpointing dropped (norms, elementwise, the even matmuls); the kept
 * outputs and the block output are left as they are. */
static fb_status block_compute(fb_tf *t, int l, const void *P, fb_tf_block_acts *a,
                               bool op_rerun) {
  const bool all = !op_rerun;
  const fb_model_spec *s = &t->m->spec;
  const int N = t->B * t->T, C = s->dim, F = s->ffn, H = s->heads, KVH = s->kv_heads;
  const int hd = fb_head_dim(s), kvd = KVH * hd;
  const void *x = block_input(t, l);
  fb_kctx k = kc(t, l);
  char *att_scr = t->attn_scratch.ptr;
  if (s->family == FB_GPT2) {
    FB_TRY(fb_k_layernorm_fwd(ON(FB_G_LN1_W), a->ln1.ptr, a->ln1_mean.ptr, a->ln1_rstd.ptr, x,
                              par(t, P, l, FB_G_LN1_W), par(t, P, l, FB_G_LN1_B), N, C,
                              s->norm_eps));
    if (all)
      FB_TRY(fb_k_matmul_fwd(ON(FB_G_QKV_W), a->qkv.ptr, a->ln1.ptr, par(t, P, l, FB_G_QKV_W),
                             par(t, P, l, FB_G_QKV_B), N, C, 3 * C));
    char *qkv = a->qkv.ptr;
    if (all)
      FB_TRY(fb_k_attention_fwd(&k, a->att.ptr, a->lse.ptr, qkv, qkv + (size_t)C * esz(t),
                                qkv + (size_t)2 * C * esz(t), t->B, t->T, H, H, hd, 3 * C, 3 * C,
                                att_scr));
    FB_TRY(fb_k_matmul_fwd(ON(FB_G_PROJ_W), a->xmid.ptr, a->att.ptr, par(t, P, l, FB_G_PROJ_W),
                           par(t, P, l, FB_G_PROJ_B), N, C, C));
    FB_TRY(fb_k_add(&k, a->xmid.ptr, a->xmid.ptr, x, (size_t)N * C));
    FB_TRY(fb_k_layernorm_fwd(ON(FB_G_LN2_W), a->ln2.ptr, a->ln2_mean.ptr, a->ln2_rstd.ptr,
                              a->xmid.ptr, par(t, P, l, FB_G_LN2_W), par(t, P, l, FB_G_LN2_B), N, C,
                              s->norm_eps));
    /* the MLP's first linear and GELU are one op (a GEMM epilogue on cuda), rerun whole by
     * op-level recompute too: GELU of the kept pre-activation alone would not be the fused
     * op's bits on cuda (its GELU reads the unrounded sum) */
    FB_TRY(fb_k_matmul_gelu_fwd(ON(FB_G_FC_W), a->gelu.ptr, a->fc.ptr, a->ln2.ptr,
                                par(t, P, l, FB_G_FC_W), par(t, P, l, FB_G_FC_B), N, C, F));
    if (op_rerun) return FB_OK;
    FB_TRY(fb_k_matmul_fwd(ON(FB_G_FC2_W), a->x_out.ptr, a->gelu.ptr, par(t, P, l, FB_G_FC2_W),
                           par(t, P, l, FB_G_FC2_B), N, F, C));
  } else {
    FB_TRY(fb_k_rmsnorm_fwd(ON(FB_L_ATTN_NORM), a->ln1.ptr, a->ln1_rstd.ptr, x,
                            par(t, P, l, FB_L_ATTN_NORM), N, C, s->norm_eps));
    if (all)
      FB_TRY(fb_k_matmul_fwd(ON(FB_L_WQ), a->q.ptr, a->ln1.ptr, par(t, P, l, FB_L_WQ), NULL, N,
                             C, C));
    FB_TRY(fb_k_matmul_fwd(ON(FB_L_WK), a->k.ptr, a->ln1.ptr, par(t, P, l, FB_L_WK), NULL, N, C,
                           kvd));
    if (all)
      FB_TRY(fb_k_matmul_fwd(ON(FB_L_WV), a->v.ptr, a->ln1.ptr, par(t, P, l, FB_L_WV), NULL, N,
                             C, kvd));
    if (all) /* q is kept after its rotation */
      FB_TRY(fb_k_rope_fwd(&k, a->q.ptr, t->B, t->T, H, hd, C, s->rope_theta));
    FB_TRY(fb_k_rope_fwd(&k, a->k.ptr, t->B, t->T, KVH, hd, kvd, s->rope_theta));
    if (all)
      FB_TRY(fb_k_attention_fwd(&k, a->att.ptr, a->lse.ptr, a->q.ptr, a->k.ptr, a->v.ptr, t->B,
                                t->T, H, KVH, hd, C, kvd, att_scr));
    FB_TRY(fb_k_matmul_fwd(ON(FB_L_WO), a->xmid.ptr, a->att.ptr, par(t, P, l, FB_L_WO), NULL, N,
                           C, C));
    FB_TRY(fb_k_add(&k, a->xmid.ptr, a->xmid.ptr, x, (size_t)N * C));
    FB_TRY(fb_k_rmsnorm_fwd(ON(FB_L_FFN_NORM), a->ln2.ptr, a->ln2_rstd.ptr, a->xmid.ptr,
                            par(t, P, l, FB_L_FFN_NORM), N, C, s->norm_eps));
    if (all)
      FB_TRY(fb_k_matmul_fwd(ON(FB_L_W1), a->a.ptr, a->ln2.ptr, par(t, P, l, FB_L_W1), NULL, N,
                             C, F));
    FB_TRY(fb_k_matmul_fwd(ON(FB_L_W3), a->b.ptr, a->ln2.ptr, par(t, P, l, FB_L_W3), NULL, N, C,
                           F));
    FB_TRY(fb_k_swiglu_fwd(&k, a->h.ptr, a->a.ptr, a->b.ptr, (size_t)N * F));
    if (op_rerun) return FB_OK;
    FB_TRY(fb_k_matmul_fwd(ON(FB_L_W2), a->x_out.ptr, a->h.ptr, par(t, P, l, FB_L_W2), NULL, N, F,
                           C));
  }
  return fb_k_add(&k, a->x_out.ptr, a->x_out.ptr, a->xmid.ptr, (size_t)N * C);
}

fb_status fb_tf_block_fwd(fb_tf *t, int l, const void *P) {
  assert(l >= 1 && l <= t->m->spec.layers);
  fb_tf_block_acts *a = &t->blocks[l - 1];
  const size_t N = (size_t)t->B * t->T;
  FB_TRY(act_alloc(t, &a->x_out, N * t->m->spec.dim, esz(t), "act.block_out"));
  FB_TRY(alloc_saved(t, a));
  FB_TRY(block_compute(t, l, P, a, false));
  switch (block_mode(t, l)) {
  case FB_RECOMPUTE_OFF: break;
  case FB_RECOMPUTE_FULL: free_saved(t, a); break;
  case FB_RECOMPUTE_SELECTIVE: /* drop what the attention core saved (transformer.h) */
    fb_free(t->dev, &a->att, NULL);
    fb_free(t->dev, &a->lse, NULL);
    a->core_dropped = true;
    break;
  case FB_RECOMPUTE_OP: op_drop(t, a); break;
  }
  return FB_OK;
}

/* Selective: reruns the attention core of block l on its saved q/k/v into fresh att and lse,
 * exactly as block_compute did (same kernel, inputs and scratch: bitwise the same output). */
static fb_status rerun_attention_core(fb_tf *t, int l, fb_tf_block_acts *a) {
  if (!a->core_dropped) return FB_OK;
  const fb_model_spec *s = &t->m->spec;
  const int C = s->dim, H = s->heads, KVH = s->kv_heads, hd = fb_head_dim(s), kvd = KVH * hd;
  const size_t N = (size_t)t->B * t->T, lse = (size_t)t->B * s->heads * t->T;
  fb_kctx k = kc(t, l);
  FB_TRY(act_alloc(t, &a->att, N * C, esz(t), "act.attn_out.recompute"));
  FB_TRY(act_alloc(t, &a->lse, lse, ssz(t), "act.attn_lse.recompute"));
  a->core_dropped = false;
  if (s->family == FB_GPT2) {
    char *qkv = a->qkv.ptr;
    return fb_k_attention_fwd(&k, a->att.ptr, a->lse.ptr, qkv, qkv + (size_t)C * esz(t),
                              qkv + (size_t)2 * C * esz(t), t->B, t->T, H, H, hd, 3 * C, 3 * C,
                              t->attn_scratch.ptr);
  }
  return fb_k_attention_fwd(&k, a->att.ptr, a->lse.ptr, a->q.ptr, a->k.ptr, a->v.ptr, t->B,
                            t->T, H, KVH, hd, C, kvd, t->attn_scratch.ptr);
}

static size_t dscratch_elems(const fb_tf *t) {
  const fb_model_spec *s = &t->m->spec;
  const size_t N = (size_t)t->B * t->T, C = s->dim, F = s->ffn;
  const size_t kvd = (size_t)s->kv_heads * fb_head_dim(s);
  if (s->family == FB_GPT2) return N * (C + C + 3 * C + F);
  return N * (C + C + C + C + 2 * kvd + 3 * F);
}

/* The head's weight and its gradient as the GEMMs see them: the parameter itself, or, with a
 * padded vocabulary (fb_tf_logits.vocab_multiple), [Vp, C] copies whose rows past V are zero.
 * The gradient copy starts as the gradient (it accumulates) and goes back once the head ran.
 * Vg is the vocabulary the GEMMs and the logits rows span: Vp on a GPU (cuBLAS's fast kernels)
 * and on sim (which prices that GPU), V on the cpu kernels (cpu, cpu-opaque). A BLAS's
 * element bits depend on the shape it is given: fb_gemm cuts the output into panels by its
 * width, and OpenBLAS 0.3.21's Zen/Haswell sgemm rounds an output element differently by
 * where it falls among the kernel's tails (measured: columns 192..199 of a 14 x 200 x 16
 * product differ from the same columns of the 14 x 256 x 16 one with zero rows past 200;
 * with AVX-512 they happened to agree). So the cpu runs the very GEMMs and chunks of the
 * unpadded head on the first V rows of the padded copies (the rows past V stay exact zeros),
 * the logits dense [rows, V] inside the padded buffer: the loss and every gradient are those
 * of the unpadded head for any padding on any cpu, while the allocations stay padded. */
typedef struct head_mat {
  int Vp, Vg;
  const void *w;
  void *dw;
  fb_buf wpad, dwpad;
} head_mat;

static fb_status head_mat_begin(fb_tf *t, fb_kctx k, const void *w, void *dw, head_mat *h) {
  const int64_t V = t->m->spec.vocab, C = t->m->spec.dim;
  const int64_t mult = t->logits->vocab_multiple > 1 ? t->logits->vocab_multiple : 1;
  const size_t rows = (size_t)V * C * esz(t);
  memset(h, 0, sizeof *h);
  h->Vp = (int)((V + mult - 1) / mult * mult);
  h->Vg = t->dev->ops->kernels == &fb_cpu_kernels ? (int)V : h->Vp;
  h->w = w, h->dw = dw;
  if (h->Vp == V) return FB_OK;
  const size_t bytes = (size_t)h->Vp * C * esz(t);
  FB_TRY(act_alloc(t, &h->wpad, bytes, 1, "head.weight_padded"));
  FB_TRY(fb_k_copy(&k, "head_pad", h->wpad.ptr, w, rows));
  FB_TRY(fb_k_memset0(&k, "head_pad", (char *)h->wpad.ptr + rows, bytes - rows));
  FB_TRY(act_alloc(t, &h->dwpad, bytes, 1, "head.grad_padded"));
  FB_TRY(fb_k_copy(&k, "head_pad", h->dwpad.ptr, dw, rows));
  FB_TRY(fb_k_memset0(&k, "head_pad", (char *)h->dwpad.ptr + rows, bytes - rows));
  h->w = h->wpad.ptr, h->dw = h->dwpad.ptr;
  return FB_OK;
}

/* Copies the padded gradient's first V rows back into dw (when `ok`) and frees the copies
 * (nothing left to free: a no-op). */
static fb_status head_mat_end(fb_tf *t, fb_kctx k, void *dw, head_mat *h, bool ok) {
  fb_status st = FB_OK;
  if (ok && h->dwpad.ptr)
    st = fb_k_copy(&k, "head_unpad", dw, h->dwpad.ptr,
                   (size_t)t->m->spec.vocab * t->m->spec.dim * esz(t));
  fb_free(t->dev, &h->dwpad, NULL);
  fb_free(t->dev, &h->wpad, NULL);
  return st;
}

/* The head's matmul, loss and matmul backward over logits chunks of `chunk` rows (Vg wide). */
static fb_status head_chunks(fb_tf *t, fb_kctx k, const head_mat *h, void *logits,
                             const void *xf, void *dxf, int chunk, int slot) {
  const int N = t->B * t->T, C = t->m->spec.dim, V = t->m->spec.vocab;
  for (int r0 = 0; r0 < N; r0 += chunk) {
    int cn = N - r0 < chunk ? N - r0 : chunk;
    const char *xr = (const char *)xf + (size_t)r0 * C * esz(t);
    char *dxr = (char *)dxf + (size_t)r0 * C * esz(t);
    FB_TRY(fb_k_matmul_fwd(ON(slot), logits, xr, h->w, NULL, cn, C, h->Vg));
    FB_TRY(fb_k_xent_fwd_bwd(&k, logits, t->loss_dev, t->targets + r0, cn, V, h->Vg,
                             t->dscale));
    FB_TRY(fb_k_matmul_bwd(ON(slot), dxr, h->dw, NULL, logits, xr, h->w, cn, C, h->Vg));
  }
  return FB_OK;
}

fb_status fb_tf_head(fb_tf *t, const void *root, void *rg) {
  const fb_model_spec *s = &t->m->spec;
  const int N = t->B * t->T, C = s->dim;
  const int L = s->layers;
  const void *x = t->blocks[L - 1].x_out.ptr;
  fb_kctx k = kc(t, 0);
  fb_buf xf = {0}, mean = {0}, rstd = {0}, dxf = {0}, logits = {0};
  head_mat hm = {0};
  fb_status st;
  const bool gpt2 = s->family == FB_GPT2;
  const int head_slot = gpt2 ? FB_G_WTE : (s->tied ? FB_L_TOK : FB_L_HEAD);
  const int norm_slot = gpt2 ? FB_G_LNF_W : FB_L_NORM;
  FB_CHECK_GOTO(st, head_mat_begin(t, *ON(head_slot), par(t, root, 0, head_slot),
                                   grd(t, rg, 0, head_slot), &hm), out);
  /* rows per logits chunk: chunk_bytes of fp32 logits Vg wide (the chunks, and so the order
   * the weight gradient accumulates in, are the unpadded head's where the cpu executes), a
   * multiple of logits->rows when that is less than N, at least 1 row; the buffer is Vp wide */
  size_t rows = t->logits->chunk_bytes / ((size_t)hm.Vg * 4), align = (size_t)t->logits->rows;
  if (rows < (size_t)N && align > 1 && rows >= align) rows -= rows % align;
  int chunk = rows < 1 ? 1 : rows > (size_t)N ? N : (int)rows;

  FB_CHECK_GOTO(st, act_alloc(t, &t->dres, (size_t)N * C, esz(t), "grad.residual"), out);
  FB_CHECK_GOTO(st, act_alloc(t, &t->dscratch, dscratch_elems(t), esz(t), "grad.block_scratch"),
                out);
  FB_CHECK_GOTO(st, act_alloc(t, &xf, (size_t)N * C, esz(t), "act.final_norm"), out);
  FB_CHECK_GOTO(st, act_alloc(t, &rstd, (size_t)N, ssz(t), "act.final_norm.rstd"), out);
  FB_CHECK_GOTO(st, act_alloc(t, &dxf, (size_t)N * C, esz(t), "grad.final_norm"), out);
  FB_CHECK_GOTO(st, fb_alloc(t->dev, (size_t)chunk * hm.Vp * esz(t), FB_MEM_TEMP,
                             "logits.chunk", &logits), out);
  if (gpt2) {
    FB_CHECK_GOTO(st, act_alloc(t, &mean, (size_t)N, ssz(t), "act.final_norm.mean"), out);
    FB_CHECK_GOTO(st, fb_k_layernorm_fwd(ON(norm_slot), xf.ptr, mean.ptr, rstd.ptr, x,
                                         par(t, root, 0, norm_slot),
                                         par(t, root, 0, FB_G_LNF_B), N, C, s->norm_eps), out);
  } else {
    FB_CHECK_GOTO(st, fb_k_rmsnorm_fwd(ON(norm_slot), xf.ptr, rstd.ptr, x,
                                       par(t, root, 0, norm_slot), N, C, s->norm_eps), out);
  }
  FB_CHECK_GOTO(st, head_chunks(t, k, &hm, logits.ptr, xf.ptr, dxf.ptr, chunk, head_slot), out);
  FB_CHECK_GOTO(st, head_mat_end(t, *ON(head_slot), grd(t, rg, 0, head_slot), &hm, true), out);
  FB_CHECK_GOTO(st, fb_k_memset0(&k, "zero_grad.residual", t->dres.ptr, (size_t)N * C * esz(t)),
                out);
  if (gpt2)
    st = fb_k_layernorm_bwd(ON(norm_slot), t->dres.ptr, grd(t, rg, 0, norm_slot),
                            grd(t, rg, 0, FB_G_LNF_B), dxf.ptr, x, par(t, root, 0, norm_slot),
                            mean.ptr, rstd.ptr, N, C);
  else
    st = fb_k_rmsnorm_bwd(ON(norm_slot), t->dres.ptr, grd(t, rg, 0, norm_slot), dxf.ptr, x,
                          par(t, root, 0, norm_slot), rstd.ptr, N, C);
  if (st == FB_OK) fb_free(t->dev, &t->blocks[L - 1].x_out, NULL);
out:
  (void)head_mat_end(t, k, NULL, &hm, false); /* a failed head's copies (no-op otherwise) */
  fb_free(t->dev, &logits, NULL);
  fb_free(t->dev, &dxf, NULL);
  fb_free(t->dev, &rstd, NULL);
  fb_free(t->dev, &mean, NULL);
  fb_free(t->dev, &xf, NULL);
  return st;
}

fb_status fb_tf_block_bwd(fb_tf *t, int l, const void *P, void *G) {
  const fb_model_spec *s = &t->m->spec;
  const int N = t->B * t->T, C = s->dim, F = s->ffn, H = s->heads, KVH = s->kv_heads;
  const int hd = fb_head_dim(s), kvd = KVH * hd;
  fb_tf_block_acts *a = &t->blocks[l - 1];
  const void *x = block_input(t, l);
  fb_kctx k = kc(t, l);
  char *att_scr = t->attn_scratch.ptr;
  if (!a->have) { /* full recompute: rebuild the saved set from the kept input */
    FB_TRY(alloc_saved(t, a));
    fb_buf keep = a->x_out;
    FB_TRY(act_alloc(t, &a->x_out, (size_t)N * C, esz(t), "act.recompute_out"));
    fb_status st = FB_OK;
    for (int pass = 0; pass < (t->recompute_passes > 1 ? t->recompute_passes : 1) && st == FB_OK;
         pass++)
      st = block_compute(t, l, P, a, false);
    fb_free(t->dev, &a->x_out, NULL);
    a->x_out = keep;
    FB_TRY(st);
  }
  if (a->op_dropped) { /* op-level: rebuild what the policy dropped, from the kept outputs */
    FB_TRY(alloc_set(t, a, true));
    a->op_dropped = false;
    FB_TRY(block_compute(t, l, P, a, true));
  }
  char *sc = t->dscratch.ptr;
  void *dres = t->dres.ptr;
  const size_t E = esz(t);
  if (s->family == FB_GPT2) {
    char *dln = sc, *datt = dln + (size_t)N * C * E, *dqkv = datt + (size_t)N * C * E;
    char *dF = dqkv + (size_t)N * 3 * C * E;
    FB_TRY(fb_k_matmul_bwd_gelu(ON(FB_G_FC2_W), dF, grd(t, G, l, FB_G_FC2_W),
                                grd(t, G, l, FB_G_FC2_B), dres, a->gelu.ptr,
                                par(t, P, l, FB_G_FC2_W), a->fc.ptr, N, F, C));
    FB_TRY(fb_k_matmul_bwd(ON(FB_G_FC_W), dln, grd(t, G, l, FB_G_FC_W), grd(t, G, l, FB_G_FC_B),
                           dF, a->ln2.ptr, par(t, P, l, FB_G_FC_W), N, C, F));
    FB_TRY(fb_k_layernorm_bwd(ON(FB_G_LN2_W), dres, grd(t, G, l, FB_G_LN2_W),
                              grd(t, G, l, FB_G_LN2_B), dln, a->xmid.ptr, par(t, P, l, FB_G_LN2_W),
                              a->ln2_mean.ptr, a->ln2_rstd.ptr, N, C));
    FB_TRY(rerun_attention_core(t, l, a));
    FB_TRY(fb_k_matmul_bwd(ON(FB_G_PROJ_W), datt, grd(t, G, l, FB_G_PROJ_W),
                           grd(t, G, l, FB_G_PROJ_B), dres, a->att.ptr, par(t, P, l, FB_G_PROJ_W),
                           N, C, C));
    char *qkv = a->qkv.ptr;
    FB_TRY(fb_k_attention_bwd(&k, dqkv, dqkv + (size_t)C * E, dqkv + (size_t)2 * C * E, datt,
                              qkv, qkv + (size_t)C * E, qkv + (size_t)2 * C * E, a->att.ptr,
                              a->lse.ptr, t->B, t->T, H, H, hd, 3 * C, 3 * C, att_scr));
    FB_TRY(fb_k_matmul_bwd(ON(FB_G_QKV_W), dln, grd(t, G, l, FB_G_QKV_W),
                           grd(t, G, l, FB_G_QKV_B), dqkv, a->ln1.ptr, par(t, P, l, FB_G_QKV_W),
                           N, C, 3 * C));
    FB_TRY(fb_k_layernorm_bwd(ON(FB_G_LN1_W), dres, grd(t, G, l, FB_G_LN1_W),
                              grd(t, G, l, FB_G_LN1_B), dln, x, par(t, P, l, FB_G_LN1_W),
                              a->ln1_mean.ptr, a->ln1_rstd.ptr, N, C));
  } else {
    char *dn = sc, *dn2 = dn + (size_t)N * C * E, *datt = dn2 + (size_t)N * C * E;
    char *dq = datt + (size_t)N * C * E, *dk = dq + (size_t)N * C * E;
    char *dv = dk + (size_t)N * kvd * E, *da = dv + (size_t)N * kvd * E;
    char *db = da + (size_t)N * F * E, *dh = db + (size_t)N * F * E;
    FB_TRY(fb_k_matmul_bwd(ON(FB_L_W2), dh, grd(t, G, l, FB_L_W2), NULL, dres, a->h.ptr,
                           par(t, P, l, FB_L_W2), N, F, C));
    FB_TRY(fb_k_swiglu_bwd(&k, da, db, dh, a->a.ptr, a->b.ptr, (size_t)N * F));
    FB_TRY(fb_k_matmul_bwd(ON(FB_L_W1), dn, grd(t, G, l, FB_L_W1), NULL, da, a->ln2.ptr,
                           par(t, P, l, FB_L_W1), N, C, F));
    FB_TRY(fb_k_matmul_bwd(ON(FB_L_W3), dn2, grd(t, G, l, FB_L_W3), NULL, db, a->ln2.ptr,
                           par(t, P, l, FB_L_W3), N, C, F));
    FB_TRY(fb_k_grad_add(&k, dn, dn, dn2, (size_t)N * C));
    FB_TRY(fb_k_rmsnorm_bwd(ON(FB_L_FFN_NORM), dres, grd(t, G, l, FB_L_FFN_NORM), dn, a->xmid.ptr,
                            par(t, P, l, FB_L_FFN_NORM), a->ln2_rstd.ptr, N, C));
    FB_TRY(rerun_attention_core(t, l, a));
    FB_TRY(fb_k_matmul_bwd(ON(FB_L_WO), datt, grd(t, G, l, FB_L_WO), NULL, dres, a->att.ptr,
                           par(t, P, l, FB_L_WO), N, C, C));
    FB_TRY(fb_k_attention_bwd(&k, dq, dk, dv, datt, a->q.ptr, a->k.ptr, a->v.ptr, a->att.ptr,
                              a->lse.ptr, t->B, t->T, H, KVH, hd, C, kvd, att_scr));
    FB_TRY(fb_k_rope_bwd(&k, dq, t->B, t->T, H, hd, C, s->rope_theta));
    FB_TRY(fb_k_rope_bwd(&k, dk, t->B, t->T, KVH, hd, kvd, s->rope_theta));
    FB_TRY(fb_k_matmul_bwd(ON(FB_L_WQ), dn, grd(t, G, l, FB_L_WQ), NULL, dq, a->ln1.ptr,
                           par(t, P, l, FB_L_WQ), N, C, C));
    FB_TRY(fb_k_matmul_bwd(ON(FB_L_WK), dn2, grd(t, G, l, FB_L_WK), NULL, dk, a->ln1.ptr,
                           par(t, P, l, FB_L_WK), N, C, kvd));
    FB_TRY(fb_k_grad_add(&k, dn, dn, dn2, (size_t)N * C));
    FB_TRY(fb_k_matmul_bwd(ON(FB_L_WV), dn2, grd(t, G, l, FB_L_WV), NULL, dv, a->ln1.ptr,
                           par(t, P, l, FB_L_WV), N, C, kvd));
    FB_TRY(fb_k_grad_add(&k, dn, dn, dn2, (size_t)N * C));
    FB_TRY(fb_k_rmsnorm_bwd(ON(FB_L_ATTN_NORM), dres, grd(t, G, l, FB_L_ATTN_NORM), dn, x,
                            par(t, P, l, FB_L_ATTN_NORM), a->ln1_rstd.ptr, N, C));
  }
  free_saved(t, a);
  if (l >= 2) fb_free(t->dev, &t->blocks[l - 2].x_out, NULL);
  return FB_OK;
}

fb_status fb_tf_encoder_bwd(fb_tf *t, void *rg) {
  const fb_model_spec *s = &t->m->spec;
  fb_kctx k = kc(t, 0);
  void *dwpe = s->family == FB_GPT2 ? grd(t, rg, 0, FB_G_WPE) : NULL;
  FB_TRY(fb_k_encoder_bwd(ON(0), grd(t, rg, 0, 0), dwpe, t->dres.ptr, t->tokens, t->B, t->T,
                          s->dim));
  fb_free(t->dev, &t->x0, NULL);
  fb_free(t->dev, &t->dres, NULL);
  fb_free(t->dev, &t->dscratch, NULL);
  return FB_OK;
}

void fb_tf_end(fb_tf *t) {
  if (!t->m) return;
  for (int l = 0; l < t->m->spec.layers && t->blocks; l++) {
    free_saved(t, &t->blocks[l]);
    fb_free(t->dev, &t->blocks[l].x_out, NULL);
  }
  fb_free(t->dev, &t->x0, NULL);
  fb_free(t->dev, &t->dres, NULL);
  fb_free(t->dev, &t->dscratch, NULL);
  fb_free(t->dev, &t->attn_scratch, NULL);
  free(t->blocks);
  t->blocks = NULL;
  t->m = NULL;
}
