/* The CUDA module's one exported symbol (see engine/backends/cuda_module.h): the static table
 * of what the engine reaches in libfsdpbench_cuda.so, the cuda device, the nccl communicator,
 * CUPTI capture and the GPU queries. Built only into the module (every file of
 * engine/backends/cuda/ is); every other symbol of the module is hidden. It adds no behaviour
 * of its own. */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "../cuda_module.h"
#include "cupti.h"
#include "comm_nccl.h"
#include "device_cuda.h"

static int gpu_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  return n;
}

static bool gpu_name(int ordinal, char *buf, size_t n) {
  struct cudaDeviceProp p;
  if (n) buf[0] = '\0';
  if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  snprintf(buf, n, "%s", p.name);
  return true;
}

static const fb_cuda_module table = {
    .abi = FB_CUDA_MODULE_ABI,
    .size = sizeof(fb_cuda_module),
    .device_ops = &fb_cuda_device_ops,
    .present = fb_cuda_present,
    .capacity = fb_cuda_capacity,
    .gpu_count = gpu_count,
    .gpu_name = gpu_name,
    .nccl_ops = &fb_nccl_comm_ops,
    .nccl_create = fb_comm_nccl_create,
    .cupti_start = fb_cupti_start,
    .cupti_stop = fb_cupti_stop,
    .cupti_dropped = fb_cupti_dropped,
    .cupti_rank = fb_cupti_rank,
    .cupti_write_events = fb_cupti_write_events,
    .cupti_write_kineto = fb_cupti_write_kineto,
    .cupti_clear = fb_cupti_clear,
};

__attribute__((visibility("default"))) const fb_cuda_module *fb_cuda_module_v1(void);

const fb_cuda_module *fb_cuda_module_v1(void) { return &table; }
