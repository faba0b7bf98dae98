/* The cuda device: one GPU per rank. Memory comes from one CUDA memory pool per category
 * (release threshold = unlimited, so after warm-up nothing reaches cudaMalloc), allocated on a
 * private stream that every stream of the device then waits for (an event, no host stall): a
 * block the pool hands out again while another stream's work on it is still queued is safe,
 * because the pool orders the allocation after that free and every user after the allocation.
 * Streams are
 * non-blocking cudaStream_t (the communication stream at the highest priority); events are
 * cudaEvent_t without timing; host tasks are cudaLaunchHostFunc; timing marks are timing
 * events resolved against an epoch event recorded at init, shifted onto the host clock
 * (fb_cpu_clock), so device and host times share one axis.
 * Every CUDA failure returns FB_EDEVICE naming the call, CUDA's message and the rank.
 * It does not run kernels (kernels_cuda.cu) nor talk to other GPUs (comm_nccl.c). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_impl.h"
#include "device_cpu.h"
#include "device_cuda.h"

#define CU_ERR(d, call, e)                                                                     \
  FB_ERR(FB_EDEVICE, "rank %d: %s failed: %s (%s)", (d)->rank, call, cudaGetErrorString(e),    \
         cudaGetErrorName(e))
#define CU_TRY(d, call)                                                                        \
  do {                                                                                         \
    cudaError_t cu_e_ = (call);                                                                \
    if (cu_e_ != cudaSuccess) return CU_ERR(d, #call, cu_e_);                                  \
  } while (0)

bool fb_cuda_present(char *why, size_t n) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why && n) snprintf(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    (void)cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
    return false;
  }
  if (count == 0) {
    if (why && n) snprintf(why, n, "cudaGetDeviceCount: no CUDA device is visible");
    return false;
  }
  return true;
}

fb_status fb_cuda_bind(const fb_device *d) {
  static _Thread_local int bound = -1;
  const fb_cuda_dev *c = fb_cuda_of(d);
  if (bound == c->ordinal) return FB_OK;
  cudaError_t e = cudaSetDevice(c->ordinal);
  if (e != cudaSuccess) return CU_ERR(d, "cudaSetDevice", e);
  bound = c->ordinal;
  return FB_OK;
}

/* The GPU of this rank: LOCAL_RANK (torchrun) or OMPI_COMM_WORLD_LOCAL_RANK (mpirun) when the
 * launcher set one, else the rank itself (ranks as threads of one process), modulo the count. */
static int pick_ordinal(const fb_device *d, int count) {
  const char *env[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                       "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
    const char *v = getenv(env[i]);
    if (v && *v) {
      char *end;
      long r = strtol(v, &end, 10);
      if (*end == '\0' && r >= 0) return (int)(r % count);
    }
  }
  return d->rank % count;
}

static fb_status cuda_init(fb_device *d) {
  fb_status st = FB_OK;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return CU_ERR(d, "cudaGetDeviceCount", e);
  if (count == 0)
    return FB_ERR(FB_EDEVICE, "rank %d: cudaGetDeviceCount: no CUDA device is visible",
                  d->rank);
  fb_cuda_dev *c = calloc(1, sizeof *c);
  if (!c) return FB_ERR(FB_ENOMEM, "rank %d: cuda device: out of host memory", d->rank);
  c->ordinal = pick_ordinal(d, count);
  d->impl = c;
  d->simulated = false;
  if (pthread_mutex_init(&c->blas_mu, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "rank %d: pthread_mutex_init failed", d->rank);
    goto fail_free;
  }
  if (pthread_mutex_init(&c->mark_mu, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "rank %d: pthread_mutex_init failed", d->rank);
    goto fail_blas_mu;
  }
  FB_CHECK_GOTO(st, fb_cuda_bind(d), fail_mark_mu);
  struct cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, c->ordinal)) != cudaSuccess) {
    st = CU_ERR(d, "cudaGetDeviceProperties", e);
    goto fail_mark_mu;
  }
  snprintf(c->gpu_name, sizeof c->gpu_name, "%s", prop.name);
  if (prop.major < 8) {
    st = FB_ERR(FB_EUNSUPPORTED,
                "rank %d: GPU %d (%s) has compute capability %d.%d; fsdpbench needs 8.0 or newer "
                "(bf16 and the sm_80/sm_90 build)",
                d->rank, c->ordinal, prop.name, prop.major, prop.minor);
    goto fail_mark_mu;
  }
  if (pthread_mutex_init(&c->streams_mu, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "rank %d: pthread_mutex_init failed", d->rank);
    goto fail_mark_mu;
  }
  if ((e = cudaStreamCreateWithFlags(&c->alloc_stream, cudaStreamNonBlocking)) != cudaSuccess) {
    st = CU_ERR(d, "cudaStreamCreateWithFlags", e);
    goto fail_streams_mu;
  }
  if ((e = cudaEventCreateWithFlags(&c->alloc_done, cudaEventDisableTiming)) != cudaSuccess) {
    st = CU_ERR(d, "cudaEventCreateWithFlags(alloc)", e);
    goto fail_alloc_stream;
  }
  int npool = 0;
  for (; npool < FB_MEM_NCAT; npool++) {
    struct cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes = cudaMemHandleTypeNone;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = c->ordinal;
    if ((e = cudaMemPoolCreate(&c->pool[npool], &pp)) != cudaSuccess) {
      st = CU_ERR(d, "cudaMemPoolCreate", e);
      goto fail_pools;
    }
    uint64_t keep = UINT64_MAX; /* keep freed memory cached: no cudaMalloc after warm-up */
    if ((e = cudaMemPoolSetAttribute(c->pool[npool], cudaMemPoolAttrReleaseThreshold, &keep)) !=
        cudaSuccess) {
      st = CU_ERR(d, "cudaMemPoolSetAttribute(ReleaseThreshold)", e);
      npool++;
      goto fail_pools;
    }
  }
  cublasStatus_t bs = cublasCreate(&c->blas);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    st = FB_ERR(FB_EDEVICE, "rank %d: cublasCreate failed: %s", d->rank, cublasGetStatusString(bs));
    goto fail_pools;
  }
  /* fp32 products stay fp32 (no TF32) so the cuda device matches the cpu one. */
  bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    st = FB_ERR(FB_EDEVICE, "rank %d: cublasSetMathMode failed: %s", d->rank,
                cublasGetStatusString(bs));
    goto fail_blas;
  }
  if ((e = cudaEventCreate(&c->epoch)) != cudaSuccess) {
    st = CU_ERR(d, "cudaEventCreate(epoch)", e);
    goto fail_blas;
  }
  /* The epoch: record on an idle stream and wait; the host instant right after the wait is
   * within a few microseconds of the GPU timestamp. */
  if ((e = cudaEventRecord(c->epoch, c->alloc_stream)) != cudaSuccess ||
      (e = cudaEventSynchronize(c->epoch)) != cudaSuccess) {
    st = CU_ERR(d, "cudaEventRecord/Synchronize(epoch)", e);
    goto fail_epoch;
  }
  c->epoch_host = fb_cpu_clock();
  return FB_OK;

fail_epoch:
  cudaEventDestroy(c->epoch);
fail_blas:
  cublasDestroy(c->blas);
fail_pools:
  while (npool-- > 0) cudaMemPoolDestroy(c->pool[npool]);
  cudaEventDestroy(c->alloc_done);
fail_alloc_stream:
  cudaStreamDestroy(c->alloc_stream);
fail_streams_mu:
  pthread_mutex_destroy(&c->streams_mu);
fail_mark_mu:
  pthread_mutex_destroy(&c->mark_mu);
fail_blas_mu:
  pthread_mutex_destroy(&c->blas_mu);
fail_free:
  free(c);
  d->impl = NULL;
  return st;
}

static void cuda_fini(fb_device *d) {
  fb_cuda_dev *c = fb_cuda_of(d);
  if (!c) return;
  (void)fb_cuda_bind(d);
  (void)cudaDeviceSynchronize();
  for (size_t i = 0; i < c->nmarks; i++) cudaEventDestroy(c->marks[i]);
  free(c->marks);
  cudaEventDestroy(c->epoch);
  cublasDestroy(c->blas);
  for (int i = 0; i < FB_MEM_NCAT; i++) cudaMemPoolDestroy(c->pool[i]);
  cudaEventDestroy(c->alloc_done);
  cudaStreamDestroy(c->alloc_stream);
  free(c->streams);
  pthread_mutex_destroy(&c->streams_mu);
  pthread_mutex_destroy(&c->mark_mu);
  pthread_mutex_destroy(&c->blas_mu);
  free(c);
  d->impl = NULL;
}

/* ---- memory ----------------------------------------------------------------------------- */
static fb_status cuda_alloc(fb_device *d, fb_stream *s, size_t bytes, fb_mem_cat cat,
                            void **out) {
  (void)s; /* stream-ordered pools per category; the stream hint is for the sim model */
  fb_cuda_dev *c = fb_cuda_of(d);
  FB_TRY(fb_cuda_bind(d));
  void *p = NULL;
  cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, c->pool[cat], c->alloc_stream);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return FB_ERR(FB_ENOMEM, "rank %d: cudaMallocFromPoolAsync: out of GPU memory allocating "
                  "%.2f MiB for %s", d->rank, (double)bytes / 1048576.0, fb_mem_cat_name(cat));
  }
  if (e != cudaSuccess) return CU_ERR(d, "cudaMallocFromPoolAsync", e);
  /* Order every stream after the allocation (the host does not wait). */
  fb_status st = FB_OK;
  pthread_mutex_lock(&c->streams_mu);
  e = cudaEventRecord(c->alloc_done, c->alloc_stream);
  if (e != cudaSuccess) st = CU_ERR(d, "cudaEventRecord(alloc)", e);
  for (size_t i = 0; st == FB_OK && i < c->nstreams; i++)
    if ((e = cudaStreamWaitEvent(c->streams[i]->s, c->alloc_done, 0)) != cudaSuccess)
      st = CU_ERR(d, "cudaStreamWaitEvent(alloc)", e);
  pthread_mutex_unlock(&c->streams_mu);
  if (st != FB_OK) {
    cudaFreeAsync(p, c->alloc_stream);
    return st;
  }
  *out = p;
  return FB_OK;
}

static void cuda_free(fb_device *d, void *p, size_t bytes, fb_mem_cat cat, fb_stream *s) {
  fb_cuda_dev *c = fb_cuda_of(d);
  if (!p) return;
  if (fb_cuda_bind(d) != FB_OK) return;
  /* Stream-ordered: the block returns to its pool once `s` has finished earlier work. With no
   * stream, once every stream of the device has (cheap insurance for teardown paths). */
  if (!s) {
    pthread_mutex_lock(&c->streams_mu);
    for (size_t i = 0; i < c->nstreams; i++)
      if (cudaEventRecord(c->alloc_done, c->streams[i]->s) == cudaSuccess)
        (void)cudaStreamWaitEvent(c->alloc_stream, c->alloc_done, 0);
    pthread_mutex_unlock(&c->streams_mu);
  }
  cudaError_t e = cudaFreeAsync(p, s ? s->s : c->alloc_stream);
  if (e != cudaSuccess)
    fprintf(stderr, "fsdpbench: rank %d: cudaFreeAsync(%zu bytes, %s) failed: %s\n", d->rank,
            bytes, fb_mem_cat_name(cat), cudaGetErrorString(e));
}

static fb_status cuda_memset0(fb_device *d, fb_stream *s, void *dst, size_t bytes) {
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaMemsetAsync(dst, 0, bytes, s->s));
  return FB_OK;
}

static fb_status cuda_copy_d2d(fb_device *d, fb_stream *s, void *dst, const void *src,
                               size_t bytes) {
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->s));
  return FB_OK;
}

static fb_status cuda_copy_h2d(fb_device *d, fb_stream *s, void *dst, const void *src,
                               size_t bytes) {
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->s));
  /* From pageable memory the call returns once src was staged; from page-locked memory the
   * DMA reads src later, so wait for it: the contract is that src is reusable on return. */
  struct cudaPointerAttributes at;
  cudaError_t e = cudaPointerGetAttributes(&at, src);
  if (e != cudaSuccess) return CU_ERR(d, "cudaPointerGetAttributes", e);
  if (at.type == cudaMemoryTypeHost) CU_TRY(d, cudaStreamSynchronize(s->s));
  return FB_OK;
}

static fb_status cuda_copy_d2h(fb_device *d, fb_stream *s, void *dst, const void *src,
                               size_t bytes) {
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->s));
  CU_TRY(d, cudaStreamSynchronize(s->s));
  return FB_OK;
}

/* ---- streams and events ------------------------------------------------------------------- */
static fb_status cuda_stream_create(fb_device *d, fb_stream_kind kind, fb_stream **out) {
  fb_status st = FB_OK;
  cudaError_t e;
  FB_TRY(fb_cuda_bind(d));
  fb_stream *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "rank %d: cuda stream: out of host memory", d->rank);
  s->kind = kind;
  int lo = 0, hi = 0; /* numerically lower = higher priority */
  if ((e = cudaDeviceGetStreamPriorityRange(&lo, &hi)) != cudaSuccess) {
    st = CU_ERR(d, "cudaDeviceGetStreamPriorityRange", e);
    goto fail_free;
  }
  /* Collectives at the highest priority so they are not starved by compute kernels. */
  int prio = kind == FB_STREAM_COMM ? hi : lo;
  if ((e = cudaStreamCreateWithPriority(&s->s, cudaStreamNonBlocking, prio)) != cudaSuccess) {
    st = CU_ERR(d, "cudaStreamCreateWithPriority", e);
    goto fail_free;
  }
  if ((e = cudaMalloc(&s->blas_ws, FB_CUDA_BLAS_WS_BYTES)) != cudaSuccess) {
    st = CU_ERR(d, "cudaMalloc(cuBLAS workspace)", e);
    goto fail_stream;
  }
  if ((e = cudaMalloc(&s->scratch, FB_CUDA_SCRATCH_BYTES)) != cudaSuccess) {
    st = CU_ERR(d, "cudaMalloc(kernel scratch)", e);
    goto fail_ws;
  }
  fb_cuda_dev *c = fb_cuda_of(d);
  pthread_mutex_lock(&c->streams_mu);
  if (c->nstreams == c->cap_streams) {
    size_t cap = c->cap_streams ? 2 * c->cap_streams : 8;
    fb_stream **v = realloc(c->streams, cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&c->streams_mu);
      st = FB_ERR(FB_ENOMEM, "rank %d: cuda stream: out of host memory", d->rank);
      goto fail_scratch;
    }
    c->streams = v;
    c->cap_streams = cap;
  }
  c->streams[c->nstreams++] = s;
  pthread_mutex_unlock(&c->streams_mu);
  *out = s;
  return FB_OK;

fail_scratch:
  cudaFree(s->scratch);
fail_ws:
  cudaFree(s->blas_ws);
fail_stream:
  cudaStreamDestroy(s->s);
fail_free:
  free(s);
  return st;
}

static void cuda_stream_destroy(fb_device *d, fb_stream *s) {
  if (!s) return;
  fb_cuda_dev *c = fb_cuda_of(d);
  pthread_mutex_lock(&c->streams_mu);
  for (size_t i = 0; i < c->nstreams; i++)
    if (c->streams[i] == s) {
      c->streams[i] = c->streams[--c->nstreams];
      break;
    }
  pthread_mutex_unlock(&c->streams_mu);
  (void)fb_cuda_bind(d);
  (void)cudaStreamSynchronize(s->s);
  cudaFree(s->scratch);
  cudaFree(s->blas_ws);
  cudaStreamDestroy(s->s);
  free(s);
}

static fb_status take_poison(fb_device *d, fb_stream *s) {
  int p = __atomic_load_n(&s->poison, __ATOMIC_ACQUIRE);
  if (!p) return FB_OK;
  fb_error_copy((fb_status)p, s->poison_msg, s->poison_where);
  __atomic_store_n(&s->poison, 0, __ATOMIC_RELEASE);
  return (fb_status)p;
}

static fb_status cuda_stream_sync(fb_device *d, fb_stream *s) {
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaStreamSynchronize(s->s));
  return take_poison(d, s);
}

static fb_status cuda_event_create(fb_device *d, fb_event **out) {
  FB_TRY(fb_cuda_bind(d));
  fb_event *ev = calloc(1, sizeof *ev);
  if (!ev) return FB_ERR(FB_ENOMEM, "rank %d: cuda event: out of host memory", d->rank);
  cudaError_t e = cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    free(ev);
    return CU_ERR(d, "cudaEventCreateWithFlags", e);
  }
  *out = ev;
  return FB_OK;
}

static void cuda_event_destroy(fb_device *d, fb_event *e) {
  if (!e) return;
  (void)fb_cuda_bind(d);
  cudaEventDestroy(e->e);
  free(e);
}

static fb_status cuda_event_record(fb_device *d, fb_event *e, fb_stream *s) {
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaEventRecord(e->e, s->s));
  return FB_OK;
}

static fb_status cuda_stream_wait(fb_device *d, fb_stream *s, fb_event *e) {
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaStreamWaitEvent(s->s, e->e, 0));
  return FB_OK;
}

static fb_status cuda_event_sync(fb_device *d, fb_event *e) {
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaEventSynchronize(e->e));
  return FB_OK;
}

typedef struct host_task {
  fb_status (*fn)(void *arg);
  void *arg;
  fb_stream *s;
} host_task;

/* Runs on CUDA's callback thread: no CUDA calls here. A failure poisons the stream. */
static void CUDART_CB host_task_run(void *p) {
  host_task t = *(host_task *)p;
  free(p);
  fb_status st = t.fn(t.arg);
  if (st == FB_OK) return;
  int expected = 0;
  if (__atomic_load_n(&t.s->poison, __ATOMIC_ACQUIRE) != 0) return; /* keep the first */
  snprintf(t.s->poison_msg, sizeof t.s->poison_msg, "%s", fb_error_msg());
  snprintf(t.s->poison_where, sizeof t.s->poison_where, "%s", fb_error_where());
  __atomic_compare_exchange_n(&t.s->poison, &expected, (int)st, false, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
}

static fb_status cuda_host_task(fb_device *d, fb_stream *s, fb_status (*fn)(void *arg),
                                void *arg) {
  FB_TRY(fb_cuda_bind(d));
  host_task *t = malloc(sizeof *t);
  if (!t) return FB_ERR(FB_ENOMEM, "rank %d: host task: out of host memory", d->rank);
  *t = (host_task){.fn = fn, .arg = arg, .s = s};
  cudaError_t e = cudaLaunchHostFunc(s->s, host_task_run, t);
  if (e != cudaSuccess) {
    free(t);
    return CU_ERR(d, "cudaLaunchHostFunc", e);
  }
  return FB_OK;
}

/* ---- time ----------------------------------------------------------------------------------- */
static double cuda_now(fb_device *d) { return fb_cpu_clock(); }

/* A ticket is 1 + the index of a timing event; 0 means "no mark" (recording failed, which
 * the next stream sync reports). Events are reused after marks_reset, so once the first step
 * reached its high-water mark no event is created in the step loop. */
static uint64_t cuda_mark(fb_device *d, fb_stream *s) {
  fb_cuda_dev *c = fb_cuda_of(d);
  if (fb_cuda_bind(d) != FB_OK) return 0;
  uint64_t ticket = 0;
  pthread_mutex_lock(&c->mark_mu);
  if (c->nmarks == c->created) {
    if (c->created == c->cap_marks) {
      size_t cap = c->cap_marks ? 2 * c->cap_marks : 1024;
      cudaEvent_t *m = realloc(c->marks, cap * sizeof *m);
      if (!m) goto out;
      c->marks = m;
      c->cap_marks = cap;
    }
    if (cudaEventCreate(&c->marks[c->created]) != cudaSuccess) goto out;
    c->created++;
  }
  if (cudaEventRecord(c->marks[c->nmarks], s->s) != cudaSuccess) goto out;
  ticket = ++c->nmarks;
out:
  pthread_mutex_unlock(&c->mark_mu);
  return ticket;
}

/* Seconds on the host clock: the epoch's host time plus the GPU time elapsed since it. NaN
 * for a failed or unknown ticket. Waits for the event if the stream has not passed it yet. */
static double cuda_mark_time(fb_device *d, uint64_t ticket) {
  fb_cuda_dev *c = fb_cuda_of(d);
  if (fb_cuda_bind(d) != FB_OK) return NAN;
  pthread_mutex_lock(&c->mark_mu);
  double t = NAN;
  if (ticket >= 1 && ticket <= c->nmarks) {
    cudaEvent_t ev = c->marks[ticket - 1];
    float ms = 0;
    if (cudaEventSynchronize(ev) == cudaSuccess &&
        cudaEventElapsedTime(&ms, c->epoch, ev) == cudaSuccess)
      t = c->epoch_host + (double)ms * 1e-3;
  }
  pthread_mutex_unlock(&c->mark_mu);
  return t;
}

/* Forgets the tickets and re-anchors the epoch: cudaEventElapsedTime returns float
 * milliseconds, so a fresh anchor each step keeps marks at microsecond resolution however
 * long the run is. */
static void cuda_marks_reset(fb_device *d) {
  fb_cuda_dev *c = fb_cuda_of(d);
  pthread_mutex_lock(&c->mark_mu);
  c->nmarks = 0;
  if (fb_cuda_bind(d) == FB_OK && cudaEventRecord(c->epoch, c->alloc_stream) == cudaSuccess &&
      cudaEventSynchronize(c->epoch) == cudaSuccess)
    c->epoch_host = fb_cpu_clock();
  pthread_mutex_unlock(&c->mark_mu);
}

/* The real host does the work: nothing to model. */
static void cuda_host_work(fb_device *d, double seconds, const char *name) {
  (void)d, (void)seconds, (void)name;
}

const fb_device_ops fb_cuda_device_ops = {
    .name = "cuda",
    .init = cuda_init,
    .fini = cuda_fini,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset0 = cuda_memset0,
    .copy_d2d = cuda_copy_d2d,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait = cuda_stream_wait,
    .event_sync = cuda_event_sync,
    .host_task = cuda_host_task,
    .now = cuda_now,
    .mark = cuda_mark,
    .mark_time = cuda_mark_time,
    .marks_reset = cuda_marks_reset,
    .account = NULL,
    .host_work = cuda_host_work,
    .model_stats = NULL,
    .kernels = &fb_cuda_kernels,
};
