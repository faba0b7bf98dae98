/* The cpu device's kernel table: every fb_kernels entry computed by the CPU ops on the calling
 * thread, synchronously: fp32 math (engine/ops/ops.h) on fp32 or bf16 activations (bf16:
 * engine/ops/ops_bf16.h), or fp64 for the gradient checks. Kernels never dereference
 * k->dev or k->s, so tests may call them with a context whose dev and s are NULL. */
#ifndef FB_CPU_KERNELS_H
#define FB_CPU_KERNELS_H
#include "../device/kernels.h"

extern const fb_kernels fb_cpu_kernels;

#endif
