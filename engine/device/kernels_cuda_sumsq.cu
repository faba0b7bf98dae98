/* The cuda exact sum of squares (sumsq_bins): launches the warp-windowed kernel of
 * sumsq_bins.cuh over at most SQ_MAX_BLOCKS blocks (grid-stride; the bins' exact sum does not
 * depend on the grid). Helpers and conventions: kernels_cuda.cuh. */
#include "kernels_cuda.cuh"
#include "sumsq_bins.cuh"

static_assert(SQ_BINS == FB_NORM_BINS, "the kernel's bins are the kernel table's");

fb_status fb_cuda_sumsq_bins(const fb_kctx *k, uint64_t *bins, const float *g, size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  const size_t per_block = (size_t)SQ_CHUNK * (SQ_THREADS / 32);
  size_t gr = (n + per_block - 1) / per_block;
  if (gr > SQ_MAX_BLOCKS) gr = SQ_MAX_BLOCKS;
  sumsq_bins_k<<<(unsigned)gr, SQ_THREADS, 0, k->s->s>>>((u64 *)bins, g, n);
  return launch_check(k, "sumsq_bins");
}
