/* CUPTI capture for the Chrome trace: GPU-side activity records (kernels including NCCL's,
 * memcpy, memset) and the runtime/driver API calls that launched them, collected only between
 * fb_cupti_start and fb_cupti_stop (the caller brackets the traced steps), and written as
 * Chrome-trace events: one track per CUDA stream ("cuda stream N"), one per host thread
 * issuing CUDA calls ("cuda api (thread T)"), and flow events (ph "s"/"f") linking each launch
 * to its kernel or copy by CUPTI correlation id.
 * CUPTI is process-wide: one rank of the process is traced (the one given to start). Device
 * records are kept only for the GPU that was current on the thread calling start (the rank's
 * GPU), so other ranks of the process on other GPUs do not leak into its track; every event
 * carries args.rank. Collection is bounded: at most max_records records are kept across all
 * start/stop windows until fb_cupti_clear; past that, records are counted as dropped
 * (fb_cupti_dropped, which also counts what CUPTI itself dropped) and the trace is partial.
 * Timestamps are on the host clock of the cpu device (fb_cpu_clock seconds): CUPTI is given a
 * CLOCK_MONOTONIC timestamp source, so GPU and host events share one axis.
 * Exists only inside the CUDA module: the engine calls it through cuda_module.h. It does not write
 * the trace file itself (chrome_trace.c does) nor choose the traced steps (the runner does). */
#ifndef FB_CUPTI_H
#define FB_CUPTI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "../../core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enables activity collection for `rank` (call on the rank's thread, with its GPU current),
 * keeping at most max_records records in total (0 = 1,000,000). Idempotent while enabled for
 * the same rank; FB_EUSAGE if enabled for another rank; FB_EDEVICE naming the CUPTI call on
 * failure. */
fb_status fb_cupti_start(int rank, size_t max_records);
/* Flushes every pending record and disables collection (records are kept for writing). */
fb_status fb_cupti_stop(void);
/* Records not kept since the last clear: over max_records, out of host memory, or dropped by
 * CUPTI. */
size_t fb_cupti_dropped(void);
/* The rank given to the last fb_cupti_start (-1 if none since the last clear): the caller
 * names the GPU track after it. */
int fb_cupti_rank(void);
/* Appends the collected records as comma-separated Chrome-trace JSON objects (a leading comma
 * unless *first; *first becomes false once something is written): kernels, copies and memsets
 * as process `pid` (the caller's pid for the traced rank's GPU track, e.g. 1000 +
 * fb_cupti_rank()), one track per stream; the CUDA API calls that launched them as process
 * `host_pid` (the traced rank's own process), one "cuda api (thread T)" track per calling
 * thread: they are host time, never GPU-busy. Every event's args carry "rank" = the rank given
 * to start. Each ts in microseconds is fb_cpu_clock seconds * 1e6 + epoch_offset_us (pass
 * -origin * 1e6 to match events written as t - origin); records that end before 0 are left
 * out. */
fb_status fb_cupti_write_events(FILE *f, int pid, int host_pid, double epoch_offset_us,
                                bool *first);
/* The same records in Kineto's shape (traces/kineto_trace.h), for HTA: device activity as
 * cat "kernel" / "gpu_memcpy" / "gpu_memset" on pid `device_pid`, tid = its CUDA stream, and
 * the launching calls as cat "cuda_runtime" on pid `host_pid`, tid 1; args device, stream,
 * correlation (CUPTI's id, shared by a launch and its activity). ts and dur are integer
 * microseconds: fb_cpu_clock seconds * 1e6 + epoch_offset_us, each end rounded to the
 * nearest. Records that end before 0 are left out. */
fb_status fb_cupti_write_kineto(FILE *f, int device_pid, int host_pid, double epoch_offset_us,
                                bool *first);
/* Forgets the collected records and the dropped count. */
void fb_cupti_clear(void);

#ifdef __cplusplus
}
#endif

#endif
