/* The cuda softmax cross-entropy: logits become their gradient in place, one block per row
 * (online max and sum, then the gradient: two reads of a row), row losses summed in row order
 * (fp64). Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"
#include "xent_rows.cuh"

fb_status fb_cuda_xent_fwd_bwd(const fb_kctx *k, void *logits, double *loss_sum,
                               const int32_t *targets, int N, int V, int ld, float dscale) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "xent_fwd_bwd");
  double *rows = (double *)k->s->scratch;
  const int chunk = (int)(FB_CUDA_SCRATCH_BYTES / sizeof(double));
  for (int r0 = 0; r0 < N; r0 += chunk) {
    int nr = N - r0 < chunk ? N - r0 : chunk;
    if (k->act == FB_F32)
      xent_rows_k<float><<<nr, XENT_THREADS, 0, k->s->s>>>((float *)logits, rows, targets, r0,
                                                            V, ld, dscale);
    else
      xent_rows_k<bf16><<<nr, XENT_THREADS, 0, k->s->s>>>((bf16 *)logits, rows, targets, r0, V,
                                                           ld, dscale);
    fb_cuda_sum_rows_in_order(k->s->s, loss_sum, rows, nr);
    FB_TRY(launch_check(k, "xent_fwd_bwd"));
  }
  return FB_OK;
}
