/* The cuda device's public entry points: its ops table, whether a GPU is usable, and its
 * kernel table. Declarations only; the definitions exist only inside the CUDA module
 * (libfsdpbench_cuda.so): the engine reaches them through cuda_module.h. It does not describe the
 * backend's state (cuda_impl.h, private). */
#ifndef FB_DEVICE_CUDA_H
#define FB_DEVICE_CUDA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../device/device.h"
#include "../../device/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const fb_device_ops fb_cuda_device_ops;
extern const fb_kernels fb_cuda_kernels;
/* True when the CUDA runtime works and at least one GPU is visible; otherwise false with the
 * reason ("cudaGetDeviceCount: no CUDA-capable device is detected") in why. */
bool fb_cuda_present(char *why, size_t n);
/* Bytes one rank may allocate for tensors on the GPU it will use, when ranks_here ranks run
 * on this machine (they share GPUs round-robin when there are more ranks than GPUs): the
 * GPU's free memory (cudaMemGetInfo) less the CUDA context estimate, the per-stream cuBLAS
 * workspaces and kernel scratch, and NCCL's buffers (NCCL_BUFFSIZE x channels x peers), split
 * over the ranks sharing that GPU. -1 when unknown (no GPU, no driver); never fails. */
int64_t fb_cuda_capacity(int ranks_here);
/* fb_cuda_capacity(1), 0 when unknown (older callers). */
int64_t fb_cuda_memory_capacity(void);

#ifdef __cplusplus
}
#endif

#endif
