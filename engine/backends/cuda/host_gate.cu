/* The stream gate of the cuda device's host tasks (host_tasks.c): a one-thread kernel that
 * holds its stream until a counter in mapped pinned host memory reaches a target, which the
 * host task's worker thread stores once the task ran. It does nothing else. */
#include "cuda_impl.h"

__global__ void fb_gate_k(const volatile unsigned long long *ctr, unsigned long long target) {
  while (*ctr < target) __nanosleep(500); /* a read crosses the bus: poll every ~0.5 us */
}

extern "C" cudaError_t fb_cuda_gate_launch(cudaStream_t s, const unsigned long long *ctr,
                                           unsigned long long target) {
  fb_gate_k<<<1, 1, 0, s>>>(ctr, target);
  return cudaGetLastError();
}
