/* The cpu device's kernel table: every fb_kernels entry computed in fp32 by the CPU ops
 * (engine/ops/ops.h) on the calling thread, synchronously. Kernels never dereference
 * k->dev or k->s, so tests may call them with a context whose dev and s are NULL. */
#ifndef FB_CPU_KERNELS_H
#define FB_CPU_KERNELS_H
#include "../device/kernels.h"

extern const fb_kernels fb_cpu_kernels;

#endif
