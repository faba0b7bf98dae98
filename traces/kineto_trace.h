/* Kineto-shaped per-rank traces: the layout PyTorch's profiler writes and Holistic Trace
 * Analysis (HTA, PyPI holistictraceanalysis) reads, for every backend, so a measured run, its
 * prediction and a user's own PyTorch profile load side by side in the same tool.
 *
 * Files: <dir>/hta/rank-<r>.json for each rank this process holds (every rank under the local
 * and sim communicators, one per process under mpi / nccl). The folder is what a user hands to
 * HTA: `TraceAnalysis(trace_dir="<out>/hta")`.
 *
 * Shape (one file per rank): "distributedInfo" {backend, rank, world_size} first (HTA finds a
 * file's rank by the first `"rank": N` in it), "deviceProperties" (the rank's device),
 * "traceEvents", "baseTimeNanoseconds". Times are integer microseconds of CLOCK_REALTIME (the
 * simulator's clock anchored at the run's start for sim), each end point rounded to the
 * nearest microsecond, so kernels that touch stay touching and ranks of several processes
 * share one axis. Events:
 *  - device kernels (cat "kernel", pid = the device, tid = the stream; args device, stream,
 *    correlation, External id): each op of a recorder track "compute*" or "comm*" (stream
 *    7 + track), named by its op ("matmul_fwd", "attention_bwd", "adamw", ...) with the module
 *    it applies in args.module; a collective is named like NCCL's kernel
 *    ("ncclDevKernel_AllGather_RING_LL(...)"), which is how HTA tells communication from
 *    computation, and so is another op of a comm stream ("ncclDevKernel_Stage(zero3.stage)",
 *    a staging copy), since the report counts the comm stream's time as communication.
 *    On cuda with CUPTI the device side is CUPTI's own records instead (real kernel names,
 *    "gpu_memcpy" / "gpu_memset", "cuda_runtime" launches).
 *  - one "cuda_runtime" cudaLaunchKernel per kernel on the rank's host thread, at the
 *    kernel's start, with the kernel's correlation id (zero length: the recorder does not
 *    keep issue times);
 *  - "cpu_op" annotations on the host thread: "ProfilerStep#N" per traced step and the host
 *    spans of the recorder's "host" track (framework hooks, waits, cudaMalloc).
 * The backend's nature is stated: "fsdpbench" {measured|predicted, backend, dtypes}.
 * It does not replace the merged Chrome trace for Perfetto (chrome_trace.h), and it captures
 * nothing itself. */
#ifndef FB_KINETO_TRACE_H
#define FB_KINETO_TRACE_H
#include "../engine/exec/runner.h"

#define FB_KINETO_DIR "hta"

/* Writes the per-rank files of the ranks r holds into dir/hta/ (created). Nothing when no
 * step was traced (chrome_trace.c says so). */
fb_status fb_kineto_write(const char *dir, const fb_run_result *r);

#endif
