/* The CUDA module: everything that needs the CUDA libraries (the cuda device and its kernels,
 * cuBLAS, the nccl communicator, CUPTI capture, the GPU capacity query) is built into a shared
 * module, libfsdpbench_cuda.so, that the engine loads with dlopen the first time a CUDA backend
 * or the nccl communicator is wanted, so a CPU or sim run never maps cudart, cuBLAS, NCCL or
 * CUPTI. The module exports one symbol, FB_CUDA_MODULE_SYMBOL, returning the table below.
 *
 * Where it is looked for: $FB_CUDA_MODULE when set (a path), else FB_CUDA_MODULE_FILE in the
 * directory of the running executable (the real path of /proc/self/exe, so ./fsdpbench, a
 * symlink to build/fsdpbench, finds build/libfsdpbench_cuda.so).
 * Whether a GPU can be there (fb_cuda_driver_present, what `--backend auto` asks first): the
 * NVIDIA driver library libcuda.so.1 must load; when it does not, the module is not loaded at
 * all. The module's symbols from the engine (fb_error_set, ...) resolve against the executable,
 * which exports them (ENABLE_EXPORTS).
 * In builds without CUDA (FB_HAVE_CUDA undefined) there is no module and every call here fails
 * with "this build has no CUDA". It does not implement any CUDA code itself. */
#ifndef FB_CUDA_MODULE_H
#define FB_CUDA_MODULE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/status.h"
#include "../device/device.h"

#define FB_CUDA_MODULE_FILE "libfsdpbench_cuda.so"
#define FB_CUDA_MODULE_SYMBOL "fb_cuda_module_v1"
#define FB_CUDA_MODULE_ABI 1u

/* The communicator types live above the device layer (engine/comm/comm.h): named by tag. */
struct fb_comm;
struct fb_comm_ops;

typedef struct fb_cuda_module {
  unsigned abi;                              /* FB_CUDA_MODULE_ABI of the module's build */
  size_t size;                               /* sizeof(fb_cuda_module) of the module's build */
  /* the cuda device (device_cuda.c, kernels*.cu, capacity.c) */
  const fb_device_ops *device_ops;
  bool (*present)(char *why, size_t n);      /* runtime works and a GPU is visible */
  int64_t (*capacity)(int ranks_here);       /* see fb_cuda_capacity; -1 unknown */
  int (*gpu_count)(void);                    /* visible GPUs, 0 when none or no driver */
  /* the name of visible GPU `ordinal` ("NVIDIA H100 80GB HBM3") into buf; false (buf "")
   * when it cannot be read */
  bool (*gpu_name)(int ordinal, char *buf, size_t n);
  /* the nccl communicator (comm_nccl.c) */
  const struct fb_comm_ops *nccl_ops;
  fb_status (*nccl_create)(fb_device *dev, double timeout_s, struct fb_comm **out);
  /* CUPTI capture (cupti.h) */
  fb_status (*cupti_start)(int rank, size_t max_records);
  fb_status (*cupti_stop)(void);
  size_t (*cupti_dropped)(void);
  int (*cupti_rank)(void);
  fb_status (*cupti_write_events)(FILE *f, int pid, int host_pid, double epoch_offset_us,
                                  bool *first);
  fb_status (*cupti_write_kineto)(FILE *f, int device_pid, int host_pid, double epoch_offset_us,
                                  bool *first);
  void (*cupti_clear)(void);
} fb_cuda_module;

/* The module's entry point (defined only inside the module). */
typedef const fb_cuda_module *(*fb_cuda_module_fn)(void);

/* Loads the module once per process (thread-safe) and returns its table; NULL with the reason
 * in why ("libfsdpbench_cuda.so: cannot open shared object file ...", the dlerror) when it
 * cannot. Later calls return the first call's outcome (and its reason). */
const fb_cuda_module *fb_cuda_module_load(char *why, size_t n);
/* The table when the module is already loaded, else NULL; never loads it. */
const fb_cuda_module *fb_cuda_module_loaded(void);
/* Opens the module at path without caching (the loader's primitive, for tests): the table, or
 * NULL with the dlerror or the ABI mismatch in why. The handle stays open. */
const fb_cuda_module *fb_cuda_module_open(const char *path, char *why, size_t n);
/* Where fb_cuda_module_load looks (see above); false when the executable's path is unknown. */
bool fb_cuda_module_path(char *buf, size_t n);
/* Cheap check that a GPU can be there at all: the NVIDIA driver library loads (dlopen of
 * libcuda.so.1; kept loaded, the CUDA runtime needs it next). No module is loaded. */
bool fb_cuda_driver_present(char *why, size_t n);

#endif
