/* Private state of the cuda device, shared by device_cuda.c (memory, streams, events, marks)
 * and the kernel files (kernels*.cu, the fb_kernels table). Plain C that nvcc also reads
 * as C++. Only files compiled when CUDA is found include it; nothing outside the cuda backend does.
 * It does not declare the public entry points (device_cuda.h). */
#ifndef FB_CUDA_IMPL_H
#define FB_CUDA_IMPL_H
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../../device/device.h"
#include "../../device/kernels.h"

/* Per-stream workspaces, allocated when the stream is created (never in the step loop). */
#define FB_CUDA_BLAS_WS_BYTES ((size_t)32 << 20)   /* cuBLAS workspace (Hopper: 32 MiB) */
#define FB_CUDA_SCRATCH_BYTES ((size_t)16 << 20)   /* kernel partials: column sums, row losses */

typedef struct fb_cuda_hostq fb_cuda_hostq; /* host_tasks.c */

struct fb_stream {
  cudaStream_t s;
  fb_stream_kind kind;
  void *blas_ws;        /* FB_CUDA_BLAS_WS_BYTES, device memory */
  void *scratch;        /* FB_CUDA_SCRATCH_BYTES, device memory, only touched in stream order */
  fb_cuda_hostq *hostq; /* the host-task worker, started by the first host task */
  /* First failure of a host task on this stream (a host task cannot fail the stream itself):
   * read and cleared by stream_sync. Written with __atomic builtins. */
  int poison;           /* fb_status, 0 = none */
  char poison_msg[512];
  char poison_where[128];
};

struct fb_event {
  cudaEvent_t e;        /* created with cudaEventDisableTiming */
};

/* Pinned staging for copy_h2d / copy_d2h: a ring of page-locked slots, each with an event
 * recorded after the last copy that used it (a slot is reused once its event completed). */
#define FB_CUDA_STAGE_SLOTS 4
#define FB_CUDA_STAGE_BYTES ((size_t)4 << 20)

typedef struct fb_cuda_stage {
  void *buf;                          /* FB_CUDA_STAGE_BYTES, cudaMallocHost */
  cudaEvent_t done;                   /* recorded after the copy that last used buf */
  bool busy;                          /* done was recorded and not yet observed complete */
} fb_cuda_stage;

/* A block handed out by host_alloc (cudaMallocHost), kept for reuse after host_free. */
typedef struct fb_cuda_hostblk {
  void *p;
  size_t bytes;
  bool in_use;
} fb_cuda_hostblk;

typedef struct fb_cuda_dev {
  int ordinal;                        /* CUDA device index this rank uses */
  char ordinal_src[96];               /* what chose it: "LOCAL_RANK=3", "rank 1 of this process" */
  bool tasks_inline;                  /* other ranks are threads of this process (one driver, and
                                         on one GPU one context): host tasks run inline */
  char gpu_name[256];
  cudaStream_t alloc_stream;          /* where pool allocations are made */
  cudaEvent_t alloc_done;             /* recorded after each allocation; every stream waits */
  pthread_mutex_t streams_mu;
  fb_stream **streams;                /* streams created on this device (for alloc_done) */
  size_t nstreams, cap_streams;
  cudaMemPool_t pool;                 /* one pool for every memory category (see device_cuda.c) */
  cublasHandle_t blas;
  pthread_mutex_t blas_mu;            /* the handle is bound to one stream per call; also guards
                                         the cuBLASLt calls and their algorithm cache */
  cublasLtHandle_t blaslt;            /* the GEMMs with epilogues (gemm_lt.c) */
  struct fb_lt_cache *lt_cache;       /* their algorithms by problem (gemm_lt.c) */
  /* pinned staging for the synchronous copies, and host_alloc's blocks */
  pthread_mutex_t stage_mu;
  fb_cuda_stage stage[FB_CUDA_STAGE_SLOTS];
  int stage_next;
  pthread_mutex_t host_mu;
  fb_cuda_hostblk *host;
  size_t nhost, cap_host;
  /* time: an epoch timing event recorded at init and its host time (fb_cpu_clock seconds) */
  cudaEvent_t epoch;
  double epoch_host;
  pthread_mutex_t mark_mu;
  cudaEvent_t *marks;                 /* ticket t refers to marks[t - 1] */
  size_t nmarks;                      /* tickets handed out since the last marks_reset */
  size_t created, cap_marks;          /* timing events created (reused after a reset) */
} fb_cuda_dev;

static inline fb_cuda_dev *fb_cuda_of(const fb_device *d) { return (fb_cuda_dev *)d->impl; }

#ifdef __cplusplus
extern "C" {
#endif
/* Makes the rank's GPU current on the calling thread (cudaGetDevice first: no cache that
 * another library's cudaSetDevice could make stale). */
fb_status fb_cuda_bind(const fb_device *d);
/* The GPU ordinal a rank uses, out of `count` visible devices: the launcher's local rank
 * (fb_launch_detect: torchrun, Open MPI, MPICH, Slurm) modulo count, else `rank` modulo count
 * (ranks as threads of one process). src (may be NULL) receives what chose it. FB_EUSAGE
 * naming the variable when a launcher's value is not allowed. */
fb_status fb_cuda_pick_ordinal(int rank, int count, int *ordinal, char *src, size_t src_len);
/* Whether a launcher started this process (one rank per process). */
bool fb_cuda_launched(void);
/* The device's host_task (host_tasks.c): fn(arg) on this stream's worker thread once the
 * stream reached this point; the stream's later work waits for it. Where ranks are threads of
 * one process, fn runs on the calling thread once the stream drained (host_tasks.c says why). */
fb_status fb_cuda_host_task(fb_device *d, fb_stream *s, fb_status (*fn)(void *arg), void *arg);
/* Stops the stream's worker after running what was issued (call after the stream synced). */
void fb_cuda_host_tasks_stop(fb_stream *s);
/* Launches the gate kernel that holds s until *ctr >= target (host_gate.cu; ctr: a device
 * address of mapped pinned memory). */
cudaError_t fb_cuda_gate_launch(cudaStream_t s, const unsigned long long *ctr,
                                unsigned long long target);
/* Launches the NCCL stand-in of proxy_copy (proxy_copy.cu): `ctas` blocks copy `bytes` from
 * src to dst `passes` times, grid-striding in 16-byte words. */
cudaError_t fb_cuda_proxy_copy_launch(cudaStream_t s, void *dst, const void *src, size_t bytes,
                                      int ctas, int passes);
#ifdef __cplusplus
}
#endif

#endif
