/* The GPU's model name as the NVIDIA driver reports it, read without any CUDA library (so a
 * subcommand can name the GPU before it loads the CUDA module). Which profile describes it:
 * engine/sim/gpu_profile.h. */
#ifndef FB_GPU_NAME_H
#define FB_GPU_NAME_H
#include <stddef.h>

/* The first GPU's model name (/proc/driver/nvidia/gpus/ * /information), "unknown NVIDIA GPU"
 * when it cannot be read. */
void fb_gpu_name(char *buf, size_t n);

#endif
