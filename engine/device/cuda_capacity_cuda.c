/* How much memory the GPU this process uses holds (for refusing a run that cannot fit before
 * it starts). Built only with CUDA. Does not allocate. */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "device_cuda.h"

int64_t fb_cuda_memory_capacity(void) {
  const char *lr = getenv("LOCAL_RANK");
  if (!lr) lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int n = 0, dev = lr ? atoi(lr) : 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) return 0;
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(dev % n) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
    return 0;
  return (int64_t)free_b;
}
