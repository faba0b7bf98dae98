/* Which hardware profile (models/hardware/NAME.yaml) describes a GPU, from the name CUDA gives
 * it: what a cuda run uses for its "% of peak" when --hardware is not given. A pure function of
 * the name; it does not load the profile nor ask the GPU. */
#ifndef FB_GPU_PROFILE_H
#define FB_GPU_PROFILE_H
#include <stddef.h>

/* The profile's name ("h100", "a100-40gb", ...) for a GPU named gpu_name ("NVIDIA H100 80GB
 * HBM3"), or NULL when no profile describes it (an H100 PCIe, a GH200, an unknown GPU). why
 * (may be NULL) receives one clause on what the choice rests on, or why there is none. */
const char *fb_gpu_profile_for(const char *gpu_name, char *why, size_t n);

#endif
