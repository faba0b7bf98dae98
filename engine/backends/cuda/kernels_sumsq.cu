/* The cuda exact sum of squares (sumsq_bins): launches the warp-windowed kernel of
 * sumsq_bins.cuh as one wave of blocks (grid-stride; the bins' exact sum does not depend on the
 * grid). Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"
#include "sumsq_bins.cuh"

static_assert(SQ_BINS == FB_NORM_BINS, "the kernel's bins are the kernel table's");

/* One wave: the blocks the GPU holds at once (4 a multiprocessor at 64 registers a thread),
 * at most SQ_MAX_BLOCKS; the bins' exact sum does not depend on it. */
static size_t one_wave(const fb_kctx *k) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
                             fb_cuda_of(k->dev)->ordinal) != cudaSuccess || sms <= 0) {
    (void)cudaGetLastError();
    return SQ_MAX_BLOCKS;
  }
  return (size_t)sms * 4 < SQ_MAX_BLOCKS ? (size_t)sms * 4 : SQ_MAX_BLOCKS;
}

fb_status fb_cuda_sumsq_bins(const fb_kctx *k, uint64_t *bins, const float *g, size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  const size_t per_block = (size_t)SQ_CHUNK * (SQ_THREADS / 32), wave = one_wave(k);
  size_t gr = (n + per_block - 1) / per_block;
  if (gr > wave) gr = wave;
  sumsq_bins_k<<<(unsigned)gr, SQ_THREADS, 0, k->s->s>>>((u64 *)bins, g, n);
  return launch_check(k, "sumsq_bins");
}
