/* Declarations of one precision's ops; included by ops.h once per precision with FB_R (the
 * element type) and FB_OPNAME(x) (the suffixed name). No include guard on purpose.
 * Conventions are those of engine/device/kernels.h; statistics (mean, rstd, lse) and optimizer
 * state have the element type too, so the double variant is a full-precision reference. */
/* Row-major C = alpha op(A) op(B) + beta C through CBLAS, cut into panels fixed by the shape
 * so the result does not depend on the thread count (see ops_impl.h). */
void FB_OPNAME(fb_gemm)(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, FB_R alpha,
                        const FB_R *A, int lda, const FB_R *B, int ldb, FB_R beta, FB_R *C,
                        int ldc);
void FB_OPNAME(fb_encoder_fwd)(FB_R *out, const int32_t *tok, const FB_R *wte, const FB_R *wpe,
                               int B, int T, int C);
void FB_OPNAME(fb_encoder_bwd)(FB_R *dwte, FB_R *dwpe, const FB_R *dout, const int32_t *tok,
                               int B, int T, int C);
void FB_OPNAME(fb_layernorm_fwd)(FB_R *out, FB_R *mean, FB_R *rstd, const FB_R *inp,
                                 const FB_R *w, const FB_R *b, int N, int C, FB_R eps);
void FB_OPNAME(fb_layernorm_bwd)(FB_R *dinp, FB_R *dw, FB_R *db, const FB_R *dout,
                                 const FB_R *inp, const FB_R *w, const FB_R *mean,
                                 const FB_R *rstd, int N, int C);
void FB_OPNAME(fb_rmsnorm_fwd)(FB_R *out, FB_R *rstd, const FB_R *inp, const FB_R *w, int N,
                               int C, FB_R eps);
void FB_OPNAME(fb_rmsnorm_bwd)(FB_R *dinp, FB_R *dw, const FB_R *dout, const FB_R *inp,
                               const FB_R *w, const FB_R *rstd, int N, int C);
void FB_OPNAME(fb_matmul_fwd)(FB_R *out, const FB_R *inp, const FB_R *w, const FB_R *bias, int N,
                              int C, int OC);
void FB_OPNAME(fb_matmul_bwd)(FB_R *dinp, FB_R *dw, FB_R *dbias, const FB_R *dout,
                              const FB_R *inp, const FB_R *w, int N, int C, int OC);
/* scratch: fb_ops_attn_slots() * fb_ops_attn_scratch_elems(T) elements of FB_R. */
void FB_OPNAME(fb_attention_fwd)(FB_R *out, FB_R *lse, const FB_R *q, const FB_R *k,
                                 const FB_R *v, int B, int T, int H, int KVH, int hd, int ldq,
                                 int ldkv, FB_R *scratch);
void FB_OPNAME(fb_attention_bwd)(FB_R *dq, FB_R *dk, FB_R *dv, const FB_R *dout, const FB_R *q,
                                 const FB_R *k, const FB_R *v, const FB_R *out, const FB_R *lse,
                                 int B, int T, int H, int KVH, int hd, int ldq, int ldkv,
                                 FB_R *scratch);
void FB_OPNAME(fb_rope_fwd)(FB_R *x, int B, int T, int nh, int hd, int ld, double theta);
void FB_OPNAME(fb_rope_bwd)(FB_R *dx, int B, int T, int nh, int hd, int ld, double theta);
void FB_OPNAME(fb_gelu_fwd)(FB_R *out, const FB_R *inp, size_t n);
void FB_OPNAME(fb_gelu_bwd)(FB_R *dinp, const FB_R *inp, const FB_R *dout, size_t n);
void FB_OPNAME(fb_swiglu_fwd)(FB_R *out, const FB_R *a, const FB_R *b, size_t n);
void FB_OPNAME(fb_swiglu_bwd)(FB_R *da, FB_R *db, const FB_R *dout, const FB_R *a,
                              const FB_R *b, size_t n);
void FB_OPNAME(fb_add)(FB_R *out, const FB_R *a, const FB_R *b, size_t n);
/* logits rows ld >= V apart; columns [V, ld) get a zero gradient */
void FB_OPNAME(fb_xent_fwd_bwd)(FB_R *logits, double *loss_sum, const int32_t *targets, int N,
                                int V, int ld, FB_R dscale);
void FB_OPNAME(fb_acc)(FB_R *y, const FB_R *x, size_t n);
void FB_OPNAME(fb_scale)(FB_R *y, FB_R a, size_t n);
void FB_OPNAME(fb_adamw)(FB_R *p, const FB_R *g, FB_R *m, FB_R *v, size_t n,
                         const fb_adamw_args *a);
void FB_OPNAME(fb_sgd)(FB_R *p, const FB_R *g, FB_R *mom, size_t n, const fb_sgd_args *a);
void FB_OPNAME(fb_sum_f64)(double *out, const FB_R *x, size_t n);
