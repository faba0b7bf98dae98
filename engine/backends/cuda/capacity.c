/* How many bytes one rank may allocate for tensors on the GPU it will use, for refusing a run
 * that cannot fit before it starts. Built only with CUDA. Does not allocate device memory
 * (cudaMemGetInfo creates the primary context of each GPU it asks about, which the run would
 * create anyway) and leaves the calling thread's current device as it found it.
 * It does not decide what a run needs (the runner's precheck does, from the simulator). */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "cuda_impl.h"
#include "device_cuda.h"

/* Growth of a process's CUDA context beyond what exists when the free figure is read: modules
 * loaded lazily on first use (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) for
 * cuBLAS, NCCL and our kernels, cuBLAS's handle, the runtime's internal buffers. An estimate:
 * a few hundred MiB on Hopper; we keep 512 MiB per process. */
#define FB_CUDA_CONTEXT_BYTES ((int64_t)512 << 20)

static int64_t env_bytes(const char *name, int64_t dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long long x = strtoll(v, &end, 10);
  return *end == '\0' && x > 0 ? (int64_t)x : dflt;
}

/* NCCL's communication buffers per rank. Source: NCCL's environment-variable reference,
 * NCCL_BUFFSIZE "the size of the buffer NCCL uses to communicate data between pairs of GPUs",
 * default 4194304 (4 MiB), allocated per channel and per connected peer; NCCL_MAX_NCHANNELS
 * caps the channels (MAXCHANNELS is 32 in NCCL 2.x, the figure we assume when it is unset).
 * A ring connects each rank to 2 peers (previous and next), so 4 MiB x 32 x 2 = 256 MiB by
 * default: an upper estimate (NCCL often opens fewer channels; the LL and LL128 protocol
 * buffers are of the same order and are covered by the rounding up of the channel count). */
static int64_t nccl_buffer_bytes(void) {
  const int64_t buffsize = env_bytes("NCCL_BUFFSIZE", (int64_t)4 << 20);
  int64_t channels = env_bytes("NCCL_MAX_NCHANNELS", 0);
  if (channels <= 0) channels = env_bytes("NCCL_MAX_CTAS", 32);
  if (channels > 64) channels = 64;
  const int64_t peers = 2;
  return buffsize * channels * peers;
}

/* Device memory each rank allocates outside the tensors: per stream (compute and comm) the
 * cuBLAS workspace and the kernel scratch (cuda_impl.h), plus NCCL's buffers. */
static int64_t per_rank_overhead(void) {
  const int64_t streams = 2;
  return streams * (int64_t)(FB_CUDA_BLAS_WS_BYTES + FB_CUDA_SCRATCH_BYTES) +
         nccl_buffer_bytes();
}

/* How many of ranks 0..ranks-1 land on GPU g when rank r uses r mod count. */
static int ranks_on(int g, int ranks, int count) {
  if (g >= ranks) return 0;
  return (ranks - g + count - 1) / count;
}

int64_t fb_cuda_capacity(int ranks_here) {
  if (ranks_here < 1) ranks_here = 1;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    (void)cudaGetLastError(); /* no GPU or no driver: unknown, never an error here */
    return -1;
  }
  int prev = -1;
  const bool restore = cudaGetDevice(&prev) == cudaSuccess;
  const bool launched = fb_cuda_launched();
  int64_t best = -1;
  int first = 0, last = 0; /* GPUs this machine's ranks use */
  if (launched) {
    int ord = 0;
    if (fb_cuda_pick_ordinal(0, count, &ord, NULL, 0) != FB_OK) goto out;
    first = last = ord;
  } else {
    last = (ranks_here < count ? ranks_here : count) - 1;
  }
  for (int g = first; g <= last; g++) {
    int sharing = ranks_on(g, ranks_here, count);
    if (sharing < 1) sharing = 1;
    /* ranks as processes (a launcher) each have a context; threads of one process share one */
    const int contexts = launched ? sharing : 1;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(g) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      (void)cudaGetLastError();
      best = -1;
      goto out;
    }
    int64_t avail = (int64_t)free_b - (int64_t)contexts * FB_CUDA_CONTEXT_BYTES -
                    (int64_t)sharing * per_rank_overhead();
    int64_t per = avail > 0 ? avail / sharing : 0;
    if (best < 0 || per < best) best = per;
  }
out:
  if (restore) (void)cudaSetDevice(prev);
  return best;
}

int64_t fb_cuda_memory_capacity(void) {
  int64_t b = fb_cuda_capacity(1);
  return b > 0 ? b : 0;
}
