/* CUPTI capture for the Chrome trace: GPU-side activity records (kernels including NCCL's,
 * memcpy, memset) and the runtime API calls that launched them, collected while enabled and
 * written as Chrome-trace events: one track per CUDA stream ("cuda stream N"), one per host
 * thread issuing CUDA calls ("cuda api (thread T)"), and flow events (ph "s"/"f") linking each
 * launch to its kernel or copy by CUPTI correlation id.
 * Timestamps are on the host clock of the cpu device (fb_cpu_clock seconds): CUPTI is given a
 * CLOCK_MONOTONIC timestamp source, so GPU and host events share one axis.
 * Exists only in builds with CUDA: callers guard with #ifdef FB_HAVE_CUDA. It does not write
 * the trace file itself (chrome_trace.c does). */
#ifndef FB_CUPTI_H
#define FB_CUPTI_H
#include <stdbool.h>
#include <stdio.h>

#include "../engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enables activity collection (idempotent). FB_EDEVICE naming the CUPTI call on failure. */
fb_status fb_cupti_start(void);
/* Flushes every pending record and disables collection (records are kept for writing). */
fb_status fb_cupti_stop(void);
/* Appends the collected records as comma-separated Chrome-trace JSON objects (a leading comma
 * unless *first; *first becomes false once something is written), process `pid`. Each ts in
 * microseconds is fb_cpu_clock seconds * 1e6 + epoch_offset_us (pass -origin * 1e6 to match
 * events written as t - origin); records that end before 0 are left out. */
fb_status fb_cupti_write_events(FILE *f, int pid, double epoch_offset_us, bool *first);
/* Forgets the collected records. */
void fb_cupti_clear(void);

#ifdef __cplusplus
}
#endif

#endif
