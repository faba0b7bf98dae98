/* Which profile of models/hardware/ describes a GPU, by the name a table or the driver gives it
 * ("H100-SXM", "NVIDIA H100 80GB HBM3", "A100 40GB") and its memory: the one table both
 * `validate --dataset` and `calibrate --backend cuda` (its base profile) read. */
#ifndef FB_GPU_PROFILES_H
#define FB_GPU_PROFILES_H
#include <stddef.h>

/* The profile name, or NULL with *why saying why there is none. mem_gb 0 = not stated (a GPU
 * that comes in two memory sizes then takes its larger one's profile). */
const char *fb_gpu_profile_for(const char *gpu, int mem_gb, const char **why);

/* The first GPU's model name as the NVIDIA driver reports it (/proc/driver/nvidia/gpus/ * /
 * information), "unknown NVIDIA GPU" when it cannot be read. Needs no CUDA library. */
void fb_gpu_name(char *buf, size_t n);

#endif
