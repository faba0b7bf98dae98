/* The cuda block quantisation entry points (quantize, dequant_sum; kernels.h): launch the
 * kernels of quant_blocks.cuh on the context's stream, fp32 or bf16 on the float side. */
#include "kernels.cuh"
#include "quant_blocks.cuh"

static bool quant_dtype(fb_dtype t) { return t == FB_F32 || t == FB_BF16; }

fb_status fb_cuda_quantize(const fb_kctx *k, void *q, float *scales, const void *x, fb_dtype xt,
                           size_t nseg, size_t seglen, int group, int bits, int rows) {
  FB_TRY(prologue(k));
  if (!quant_dtype(xt))
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda quantize: input dtype %s is not supported "
                  "(allowed: fp32, bf16)", k->dev->rank, fb_dtype_name(xt));
  const size_t bps = (seglen + (size_t)group - 1) / (size_t)group, nblk = nseg * bps;
  if (nblk == 0) return FB_OK;
  if (nblk > 0x7fffffffu)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda quantize: %zu blocks exceed one grid",
                  k->dev->rank, nblk);
  uint8_t *qb = (uint8_t *)q;
  if (xt == FB_F32)
    quantize_blocks_k<float><<<(unsigned)nblk, QB_THREADS, 0, k->s->s>>>(
        qb, scales, (const float *)x, nseg, seglen, group, bits, rows, bps);
  else
    quantize_blocks_k<bf16><<<(unsigned)nblk, QB_THREADS, 0, k->s->s>>>(
        qb, scales, (const bf16 *)x, nseg, seglen, group, bits, rows, bps);
  return launch_check(k, "quantize");
}

fb_status fb_cuda_dequant_sum(const fb_kctx *k, void *out, fb_dtype ot, const void *q,
                              const float *scales, size_t nterm, size_t termlen, size_t seglen,
                              int group, int bits) {
  FB_TRY(prologue(k));
  if (!quant_dtype(ot))
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda dequant_sum: output dtype %s is not supported "
                  "(allowed: fp32, bf16)", k->dev->rank, fb_dtype_name(ot));
  if (termlen == 0) return FB_OK;
  const size_t bps = (seglen + (size_t)group - 1) / (size_t)group;
  const unsigned g = grid_for((int64_t)termlen, 256);
  const uint8_t *qb = (const uint8_t *)q;
  if (ot == FB_F32)
    dequant_sum_k<float><<<g, 256, 0, k->s->s>>>((float *)out, qb, scales, nterm, termlen,
                                                 seglen, group, bits, bps);
  else
    dequant_sum_k<bf16><<<g, 256, 0, k->s->s>>>((bf16 *)out, qb, scales, nterm, termlen, seglen,
                                                group, bits, bps);
  return launch_check(k, "dequant_sum");
}
