/* The cpu device's table and its process-wide clock. The clock is what every cpu device's
 * now()/mark() report: CLOCK_MONOTONIC seconds since one epoch shared by all ranks of the
 * process (so per-rank traces align). It does not describe streams or kernels (device.h). */
#ifndef FB_DEVICE_CPU_H
#define FB_DEVICE_CPU_H
#include "../../device/device.h"

extern const fb_device_ops fb_cpu_device_ops;
/* The same kernels behind memory the host cannot touch and a checked stream order (opaque.h):
 * the stand-in that fails where a GPU would. */
extern const fb_device_ops fb_cpu_opaque_device_ops;

/* Seconds since the process-wide epoch (set by the first call). */
double fb_cpu_clock(void);
/* Moves the epoch to this instant. Multi-process runs (mpi) call it right after a barrier,
 * before any device is opened, so that every process's clock starts together. */
void fb_cpu_clock_align(void);
/* Bytes the cpu devices may use: the host's available memory (MemAvailable), shared by the
 * ranks of one process (the fit check sums them); -1 when unknown. */
int64_t fb_cpu_capacity(int ranks_here);

#endif
