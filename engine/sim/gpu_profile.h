/* Which hardware profile (models/hardware/NAME.yaml) describes a GPU, from its name (what CUDA
 * or the driver reports, "NVIDIA H100 80GB HBM3", or a table's "H100-SXM") and its memory: the
 * one table a cuda run (its "% of peak" without --hardware), `validate --dataset` (each row's
 * profile), `validate --backend cuda` and `calibrate --backend cuda` (their base profile) read.
 * A pure function of the name; it does not load the profile nor ask the GPU. */
#ifndef FB_GPU_PROFILE_H
#define FB_GPU_PROFILE_H
#include <stddef.h>

/* The profile's name ("h100", "a100-40gb", ...), or NULL when no profile describes the GPU (a
 * PCIe card, an H200 NVL, a GH200, an unknown GPU). mem_gb: the memory when the caller knows
 * it apart from the name (0 = not stated: a GPU that comes in two sizes takes the larger one's
 * profile). why (may be NULL) receives one clause on what the choice rests on, or why there is
 * none. */
const char *fb_gpu_profile_for(const char *gpu, int mem_gb, char *why, size_t n);

#endif
