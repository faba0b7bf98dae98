/* The GPU a rank of the cuda device uses: whether any GPU is visible (fb_cuda_present), which
 * one a rank takes (fb_cuda_pick_ordinal: the launcher's local rank, else the rank, modulo the
 * visible GPUs) and making it current on the calling thread (fb_cuda_bind). Used by the device
 * (device_cuda.c), its host tasks (host_tasks_cuda.c) and the capacity query; it calls none of
 * them. It does not open the device nor allocate. */
#include <stdio.h>
#include <string.h>

#include "../../core/launcher.h"
#include "cuda_impl.h"
#include "device_cuda.h"

bool fb_cuda_present(char *why, size_t n) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why && n) snprintf(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    (void)cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
    return false;
  }
  if (count == 0) {
    if (why && n) snprintf(why, n, "cudaGetDeviceCount: no CUDA device is visible");
    return false;
  }
  return true;
}

fb_status fb_cuda_bind(const fb_device *d) {
  const fb_cuda_dev *c = fb_cuda_of(d);
  int cur = -1;
  cudaError_t e = cudaGetDevice(&cur);
  if (e == cudaSuccess && cur == c->ordinal) return FB_OK;
  e = cudaSetDevice(c->ordinal);
  if (e != cudaSuccess)
    return FB_ERR(FB_EDEVICE, "rank %d: cudaSetDevice(%d) (chosen by %s) failed: %s (%s)", d->rank,
                  c->ordinal, c->ordinal_src, cudaGetErrorString(e), cudaGetErrorName(e));
  return FB_OK;
}

/* The launcher's local rank (engine/core/launcher.c: torchrun, Open MPI, MPICH, Slurm, in
 * that precedence, strictly parsed) picks the GPU when a launcher started this process. */
bool fb_cuda_launched(void) {
  fb_launch l;
  return fb_launch_detect(&l) == FB_OK && strcmp(l.name, "none") != 0;
}

fb_status fb_cuda_pick_ordinal(int rank, int count, int *ordinal, char *src, size_t src_len) {
  if (count <= 0)
    return FB_ERR(FB_EDEVICE, "rank %d: no CUDA device is visible", rank);
  fb_launch l;
  FB_TRY(fb_launch_detect(&l));
  if (strcmp(l.name, "none")) {
    *ordinal = l.local_rank % count;
    if (src && src_len)
      snprintf(src, src_len, "%s local rank %d mod %d GPUs", l.name, l.local_rank, count);
    return FB_OK;
  }
  if (rank < 0)
    return FB_ERR(FB_EINTERNAL, "rank %d: negative rank, cannot choose a GPU", rank);
  *ordinal = rank % count;
  if (src && src_len)
    snprintf(src, src_len, "rank %d of this process mod %d GPUs (no launcher local rank set)",
             rank, count);
  return FB_OK;
}
