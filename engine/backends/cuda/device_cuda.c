/* The cuda device: one GPU per rank.
 * Memory: ONE stream-ordered CUDA memory pool per device for every category (parameters,
 * gradients, optimizer state, activations, temporaries). One pool rather than one per category
 * because reserved memory then follows the peak of the SUM of live bytes (what the ledger's
 * peak_total and PyTorch's caching allocator report), whereas a pool per category reserves the
 * sum of each category's own peak, which never shrinks and can exceed the GPU even when the
 * ledger fits. The release threshold is unlimited (after warm-up no allocation reaches the
 * driver), and the pool is trimmed with cudaMemPoolTrimTo at stream_sync (the host waits
 * there anyway) down to a bound of the ledger's peak_total + 1/8 + 64 MiB: what a step needs
 * stays, fragmentation from cross-stream reuse goes back to the driver.
 * Allocations are made on a private stream that every stream of the device then waits for (an
 * event, no host stall): a block the pool hands out again while another stream's work on it
 * is still queued is safe, because the pool orders the allocation after that free
 * (cudaMemPoolReuseFollowEventDependencies / AllowInternalDependencies) and every user after
 * the allocation. Frees are cudaFreeAsync on the stream given to free; with none, on the
 * allocation stream after it waited for every stream of the device (never a device-wide sync).
 * Host copies: copy_h2d goes through a ring of pinned staging slots (the host copies src into
 * a slot and returns; the DMA runs in stream order), copy_d2h through the same slots and waits
 * only for its own copy's event; host_alloc / copy_async give callers pinned memory and
 * stream-ordered copies without any wait.
 * Streams are non-blocking cudaStream_t (the communication stream at the highest priority);
 * events are cudaEvent_t without timing; host tasks run on a worker thread per stream behind a
 * gate kernel (host_tasks.c); timing marks are
 * timing events resolved against an epoch event recorded at init, shifted onto the host clock
 * (fb_cpu_clock), so device and host times share one axis.
 * Nothing is cached in statics: every fb_device_open creates its own pool, handles and
 * staging, and fb_device_close releases them.
 * Every CUDA failure returns FB_EDEVICE naming the call, CUDA's message and the rank.
 * It does not run kernels (kernels*.cu), choose the rank's GPU (gpu_select.c) nor
 * talk to other GPUs (comm_nccl.c). */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_impl.h"
#include "gemm_lt.h"
#include "../cpu/device_cpu.h"
#include "device_cuda.h"

#define CU_ERR(d, call, e)                                                                     \
  FB_ERR(FB_EDEVICE, "rank %d: %s failed: %s (%s)", (d)->rank, call, cudaGetErrorString(e),    \
         cudaGetErrorName(e))
#define CU_TRY(d, call)                                                                        \
  do {                                                                                         \
    cudaError_t cu_e_ = (call);                                                                \
    if (cu_e_ != cudaSuccess) return CU_ERR(d, #call, cu_e_);                                  \
  } while (0)

static void stage_release(fb_cuda_dev *c) {
  for (int i = 0; i < FB_CUDA_STAGE_SLOTS; i++) {
    fb_cuda_stage *sl = &c->stage[i];
    if (sl->done) {
      if (sl->busy) (void)cudaEventSynchronize(sl->done);
      cudaEventDestroy(sl->done);
    }
    if (sl->buf) cudaFreeHost(sl->buf);
    memset(sl, 0, sizeof *sl);
  }
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
  st = fb_cuda_pick_ordinal(d->rank, count, &c->ordinal, c->ordinal_src, sizeof c->ordinal_src);
  if (st != FB_OK) {
    free(c);
    return st;
  }
  if (c->ordinal < 0 || c->ordinal >= count) {
    st = FB_ERR(FB_EUSAGE, "rank %d: GPU ordinal %d (chosen by %s) is out of range: %d visible",
                d->rank, c->ordinal, c->ordinal_src, count);
    free(c);
    return st;
  }
  /* ranks as threads of this process: one driver (its locks), on one GPU one context */
  c->tasks_inline = !fb_cuda_launched() && d->world > 1;
  d->impl = c;
  d->simulated = false;
  bool blas_mu = pthread_mutex_init(&c->blas_mu, NULL) == 0;
  bool mark_mu = pthread_mutex_init(&c->mark_mu, NULL) == 0;
  bool streams_mu = pthread_mutex_init(&c->streams_mu, NULL) == 0;
  bool stage_mu = pthread_mutex_init(&c->stage_mu, NULL) == 0;
  bool host_mu = pthread_mutex_init(&c->host_mu, NULL) == 0;
  if (!blas_mu || !mark_mu || !streams_mu || !stage_mu || !host_mu) {
    st = FB_ERR(FB_EINTERNAL, "rank %d: pthread_mutex_init failed", d->rank);
    goto fail_mutexes;
  }
  FB_CHECK_GOTO(st, fb_cuda_bind(d), fail_mutexes);
  struct cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, c->ordinal)) != cudaSuccess) {
    st = CU_ERR(d, "cudaGetDeviceProperties", e);
    goto fail_mutexes;
  }
  snprintf(c->gpu_name, sizeof c->gpu_name, "%s", prop.name);
  if (prop.major < 8) {
    st = FB_ERR(FB_EUNSUPPORTED,
                "rank %d: GPU %d (%s, chosen by %s) has compute capability %d.%d; fsdpbench needs "
                "8.0 or newer (bf16 and the sm_80/sm_90 build)",
                d->rank, c->ordinal, prop.name, c->ordinal_src, prop.major, prop.minor);
    goto fail_mutexes;
  }
  if ((e = cudaStreamCreateWithFlags(&c->alloc_stream, cudaStreamNonBlocking)) != cudaSuccess) {
    st = CU_ERR(d, "cudaStreamCreateWithFlags", e);
    goto fail_mutexes;
  }
  if ((e = cudaEventCreateWithFlags(&c->alloc_done, cudaEventDisableTiming)) != cudaSuccess) {
    st = CU_ERR(d, "cudaEventCreateWithFlags(alloc)", e);
    goto fail_alloc_stream;
  }
  {
    struct cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes = cudaMemHandleTypeNone;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = c->ordinal;
    if ((e = cudaMemPoolCreate(&c->pool, &pp)) != cudaSuccess) {
      st = CU_ERR(d, "cudaMemPoolCreate", e);
      goto fail_alloc_done;
    }
    /* the driver never releases on its own at syncs; stream_sync trims to a bound instead */
    uint64_t keep = UINT64_MAX;
    if ((e = cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep)) !=
        cudaSuccess) {
      st = CU_ERR(d, "cudaMemPoolSetAttribute(ReleaseThreshold)", e);
      goto fail_pool;
    }
  }
  for (int i = 0; i < FB_CUDA_STAGE_SLOTS; i++) {
    if ((e = cudaMallocHost(&c->stage[i].buf, FB_CUDA_STAGE_BYTES)) != cudaSuccess) {
      c->stage[i].buf = NULL;
      st = CU_ERR(d, "cudaMallocHost(staging)", e);
      goto fail_stage;
    }
    if ((e = cudaEventCreateWithFlags(&c->stage[i].done, cudaEventDisableTiming)) !=
        cudaSuccess) {
      c->stage[i].done = NULL;
      st = CU_ERR(d, "cudaEventCreateWithFlags(staging)", e);
      goto fail_stage;
    }
  }
  cublasStatus_t bs = cublasCreate(&c->blas);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    st = FB_ERR(FB_EDEVICE, "rank %d: cublasCreate failed: %s", d->rank, cublasGetStatusString(bs));
    goto fail_stage;
  }
  /* fp32 products stay fp32 (no TF32) so the cuda device matches the cpu one. */
  bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    st = FB_ERR(FB_EDEVICE, "rank %d: cublasSetMathMode failed: %s", d->rank,
                cublasGetStatusString(bs));
    goto fail_blas;
  }
  if ((st = fb_lt_init(d)) != FB_OK) goto fail_blas;
  if ((e = cudaEventCreate(&c->epoch)) != cudaSuccess) {
    st = CU_ERR(d, "cudaEventCreate(epoch)", e);
    goto fail_lt;
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
fail_lt:
  fb_lt_fini(d);
fail_blas:
  cublasDestroy(c->blas);
fail_stage:
  stage_release(c);
fail_pool:
  cudaMemPoolDestroy(c->pool);
fail_alloc_done:
  cudaEventDestroy(c->alloc_done);
fail_alloc_stream:
  cudaStreamDestroy(c->alloc_stream);
fail_mutexes:
  if (host_mu) pthread_mutex_destroy(&c->host_mu);
  if (stage_mu) pthread_mutex_destroy(&c->stage_mu);
  if (streams_mu) pthread_mutex_destroy(&c->streams_mu);
  if (mark_mu) pthread_mutex_destroy(&c->mark_mu);
  if (blas_mu) pthread_mutex_destroy(&c->blas_mu);
  free(c);
  d->impl = NULL;
  return st;
}

/* Waits for this device's own streams (not the whole GPU, which other ranks may share) and
 * releases everything init and the ops created. */
static void cuda_fini(fb_device *d) {
  fb_cuda_dev *c = fb_cuda_of(d);
  if (!c) return;
  (void)fb_cuda_bind(d);
  pthread_mutex_lock(&c->streams_mu);
  for (size_t i = 0; i < c->nstreams; i++) (void)cudaStreamSynchronize(c->streams[i]->s);
  pthread_mutex_unlock(&c->streams_mu);
  (void)cudaStreamSynchronize(c->alloc_stream);
  for (size_t i = 0; i < c->created; i++) cudaEventDestroy(c->marks[i]);
  free(c->marks);
  cudaEventDestroy(c->epoch);
  fb_lt_fini(d);
  cublasDestroy(c->blas);
  stage_release(c);
  for (size_t i = 0; i < c->nhost; i++) cudaFreeHost(c->host[i].p);
  free(c->host);
  /* blocks still allocated (a leak elsewhere) are released when their last free completes */
  cudaMemPoolDestroy(c->pool);
  cudaEventDestroy(c->alloc_done);
  cudaStreamDestroy(c->alloc_stream);
  free(c->streams);
  pthread_mutex_destroy(&c->host_mu);
  pthread_mutex_destroy(&c->stage_mu);
  pthread_mutex_destroy(&c->streams_mu);
  pthread_mutex_destroy(&c->mark_mu);
  pthread_mutex_destroy(&c->blas_mu);
  free(c);
  d->impl = NULL;
}

/* ---- memory ----------------------------------------------------------------------------- */
static fb_status cuda_alloc(fb_device *d, fb_stream *s, size_t bytes, fb_mem_cat cat,
                            void **out) {
  (void)s; /* one stream-ordered pool; the stream hint is for the sim model */
  fb_cuda_dev *c = fb_cuda_of(d);
  FB_TRY(fb_cuda_bind(d));
  void *p = NULL;
  cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, c->pool, c->alloc_stream);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return FB_ERR(FB_ENOMEM, "rank %d: cudaMallocFromPoolAsync: out of GPU memory allocating "
                  "%.2f MiB for %s (GPU %d)", d->rank, (double)bytes / 1048576.0,
                  fb_mem_cat_name(cat), c->ordinal);
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
    (void)cudaFreeAsync(p, c->alloc_stream);
    return st;
  }
  *out = p;
  return FB_OK;
}

/* Stream-ordered: the block returns to the pool once `s` has finished the work issued before
 * the free. With no stream, once every stream of the device has: the allocation stream waits
 * for each (events, no host wait) and the free is enqueued there. */
static void cuda_free(fb_device *d, void *p, size_t bytes, fb_mem_cat cat, fb_stream *s) {
  fb_cuda_dev *c = fb_cuda_of(d);
  if (!p) return;
  if (fb_cuda_bind(d) != FB_OK) return;
  cudaError_t e = cudaSuccess;
  if (s) {
    e = cudaFreeAsync(p, s->s);
  } else {
    pthread_mutex_lock(&c->streams_mu);
    for (size_t i = 0; e == cudaSuccess && i < c->nstreams; i++) {
      e = cudaEventRecord(c->alloc_done, c->streams[i]->s);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(c->alloc_stream, c->alloc_done, 0);
    }
    if (e == cudaSuccess) e = cudaFreeAsync(p, c->alloc_stream);
    pthread_mutex_unlock(&c->streams_mu);
  }
  if (e != cudaSuccess)
    fprintf(stderr, "fsdpbench: rank %d: cudaFreeAsync(%zu bytes, %s) failed: %s\n", d->rank,
            bytes, fb_mem_cat_name(cat), cudaGetErrorString(e));
}

/* Gives the pool's unused memory above the bound back to the driver. Called after a stream
 * sync: blocks whose frees that stream has now executed are releasable. Only unused memory is
 * released (cudaMemPoolTrimTo never touches live allocations), so this is always safe. */
static void pool_trim(fb_device *d) {
  fb_cuda_dev *c = fb_cuda_of(d);
  const uint64_t peak = d->mem.peak_total > 0 ? (uint64_t)d->mem.peak_total : 0;
  const uint64_t bound = peak + peak / 8 + ((uint64_t)64 << 20);
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReservedMemCurrent, &reserved) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (reserved > bound && cudaMemPoolTrimTo(c->pool, (size_t)bound) != cudaSuccess)
    (void)cudaGetLastError();
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

/* The NCCL stand-in (device.h proxy_copy): a fixed grid of `ctas` blocks, like NCCL's one CTA
 * per channel, streaming the buffer `passes` times. */
static fb_status cuda_proxy_copy(fb_device *d, fb_stream *s, void *dst, const void *src,
                                 size_t bytes, int ctas, int passes) {
  if (ctas < 1 || passes < 1)
    return FB_ERR(FB_EUSAGE, "proxy copy: %d CTAs x %d passes (want >= 1 each)", ctas, passes);
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, fb_cuda_proxy_copy_launch(s->s, dst, src, bytes, ctas, passes));
  return FB_OK;
}

/* The next staging slot, once the copy that last used it has completed (a wait on that one
 * copy's event, never on the device). Called with stage_mu held. */
static fb_status stage_take(fb_device *d, fb_cuda_stage **out) {
  fb_cuda_dev *c = fb_cuda_of(d);
  fb_cuda_stage *sl = &c->stage[c->stage_next];
  c->stage_next = (c->stage_next + 1) % FB_CUDA_STAGE_SLOTS;
  if (sl->busy) {
    cudaError_t e = cudaEventSynchronize(sl->done);
    if (e != cudaSuccess) return CU_ERR(d, "cudaEventSynchronize(staging)", e);
    sl->busy = false;
  }
  *out = sl;
  return FB_OK;
}

/* Host -> device through pinned staging: the host copies src into a slot and the DMA runs in
 * stream order, so src is reusable on return and the host waits for nothing but a slot's
 * previous copy (4 slots of 4 MiB in flight). */
static fb_status cuda_copy_h2d(fb_device *d, fb_stream *s, void *dst, const void *src,
                               size_t bytes) {
  fb_cuda_dev *c = fb_cuda_of(d);
  FB_TRY(fb_cuda_bind(d));
  fb_status st = FB_OK;
  pthread_mutex_lock(&c->stage_mu);
  for (size_t off = 0; off < bytes && st == FB_OK;) {
    size_t n = bytes - off < FB_CUDA_STAGE_BYTES ? bytes - off : FB_CUDA_STAGE_BYTES;
    fb_cuda_stage *sl = NULL;
    if ((st = stage_take(d, &sl)) != FB_OK) break;
    memcpy(sl->buf, (const char *)src + off, n);
    cudaError_t e = cudaMemcpyAsync((char *)dst + off, sl->buf, n, cudaMemcpyHostToDevice, s->s);
    if (e == cudaSuccess) e = cudaEventRecord(sl->done, s->s);
    if (e != cudaSuccess) {
      st = CU_ERR(d, "cudaMemcpyAsync(host to device, staged)", e);
      break;
    }
    sl->busy = true;
    off += n;
  }
  pthread_mutex_unlock(&c->stage_mu);
  return st;
}

/* Device -> host through pinned staging: up to FB_CUDA_STAGE_SLOTS chunks are enqueued, then
 * each chunk's own event is waited for and the slot copied out. Returns once dst holds the
 * data; the wait covers the stream up to this copy only (the contract of copy_d2h: use it for
 * figures the host prints, and copy_async into host_alloc memory otherwise). */
static fb_status cuda_copy_d2h(fb_device *d, fb_stream *s, void *dst, const void *src,
                               size_t bytes) {
  fb_cuda_dev *c = fb_cuda_of(d);
  FB_TRY(fb_cuda_bind(d));
  fb_status st = FB_OK;
  pthread_mutex_lock(&c->stage_mu);
  size_t off = 0;
  while (off < bytes && st == FB_OK) {
    fb_cuda_stage *batch[FB_CUDA_STAGE_SLOTS];
    size_t at[FB_CUDA_STAGE_SLOTS], len[FB_CUDA_STAGE_SLOTS];
    int nb = 0;
    for (; nb < FB_CUDA_STAGE_SLOTS && off < bytes; nb++) {
      size_t n = bytes - off < FB_CUDA_STAGE_BYTES ? bytes - off : FB_CUDA_STAGE_BYTES;
      if ((st = stage_take(d, &batch[nb])) != FB_OK) break;
      cudaError_t e = cudaMemcpyAsync(batch[nb]->buf, (const char *)src + off, n,
                                      cudaMemcpyDeviceToHost, s->s);
      if (e == cudaSuccess) e = cudaEventRecord(batch[nb]->done, s->s);
      if (e != cudaSuccess) {
        st = CU_ERR(d, "cudaMemcpyAsync(device to host, staged)", e);
        break;
      }
      batch[nb]->busy = true;
      at[nb] = off;
      len[nb] = n;
      off += n;
    }
    for (int i = 0; i < nb; i++) {
      cudaError_t e = cudaEventSynchronize(batch[i]->done);
      if (e != cudaSuccess) {
        if (st == FB_OK) st = CU_ERR(d, "cudaEventSynchronize(device to host copy)", e);
        continue;
      }
      batch[i]->busy = false;
      if (st == FB_OK) memcpy((char *)dst + at[i], batch[i]->buf, len[i]);
    }
  }
  pthread_mutex_unlock(&c->stage_mu);
  return st;
}

/* Pinned host memory for callers that stage themselves (comm_staged.c). Freed blocks are kept
 * and handed out again (a block of the same size or up to twice as large), so a steady step
 * loop calls cudaMallocHost only while warming up. Neither host_free nor a later host_alloc
 * calls cudaFreeHost, which waits for the whole device (a stall inside a step); the blocks go
 * back when the device closes, and comm_staged.c grows by powers of two, which bounds them. */
static fb_status cuda_host_alloc(fb_device *d, size_t bytes, void **out) {
  fb_cuda_dev *c = fb_cuda_of(d);
  *out = NULL;
  if (bytes == 0) return FB_OK;
  FB_TRY(fb_cuda_bind(d));
  fb_status st = FB_OK;
  pthread_mutex_lock(&c->host_mu);
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < c->nhost; i++) {
    const fb_cuda_hostblk *b = &c->host[i];
    if (b->in_use) continue;
    if (b->bytes >= bytes && b->bytes / 2 <= bytes &&
        (best == SIZE_MAX || b->bytes < c->host[best].bytes))
      best = i;
  }
  if (best != SIZE_MAX) {
    c->host[best].in_use = true;
    *out = c->host[best].p;
    goto out;
  }
  if (c->nhost == c->cap_host) {
    size_t cap = c->cap_host ? 2 * c->cap_host : 16;
    fb_cuda_hostblk *v = realloc(c->host, cap * sizeof *v);
    if (!v) {
      st = FB_ERR(FB_ENOMEM, "rank %d: host_alloc: out of host memory", d->rank);
      goto out;
    }
    c->host = v;
    c->cap_host = cap;
  }
  void *p = NULL;
  cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    st = FB_ERR(e == cudaErrorMemoryAllocation ? FB_ENOMEM : FB_EDEVICE,
                "rank %d: cudaMallocHost(%.2f MiB of pinned staging) failed: %s", d->rank,
                (double)bytes / 1048576.0, cudaGetErrorString(e));
    goto out;
  }
  c->host[c->nhost++] = (fb_cuda_hostblk){.p = p, .bytes = bytes, .in_use = true};
  *out = p;
out:
  pthread_mutex_unlock(&c->host_mu);
  return st;
}

static void cuda_host_free(fb_device *d, void *p) {
  fb_cuda_dev *c = fb_cuda_of(d);
  if (!p || !c) return;
  pthread_mutex_lock(&c->host_mu);
  size_t i = 0;
  while (i < c->nhost && c->host[i].p != p) i++;
  if (i < c->nhost) c->host[i].in_use = false;
  pthread_mutex_unlock(&c->host_mu);
  if (i == c->nhost)
    fprintf(stderr, "fsdpbench: rank %d: host_free of %p, which host_alloc did not hand out\n",
            d->rank, p);
}

/* Enqueued on the stream, returns at once: the host buffer (host_alloc memory) must stay
 * untouched until the stream passes the copy. */
static fb_status cuda_copy_async(fb_device *d, fb_stream *s, void *dst, const void *src,
                                 size_t bytes, bool to_host) {
  if (bytes == 0) return FB_OK;
  FB_TRY(fb_cuda_bind(d));
  CU_TRY(d, cudaMemcpyAsync(dst, src, bytes,
                            to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s->s));
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
  fb_cuda_host_tasks_stop(s);
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
  pool_trim(d);
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
    .host_task = fb_cuda_host_task,
    .now = cuda_now,
    .mark = cuda_mark,
    .mark_time = cuda_mark_time,
    .marks_reset = cuda_marks_reset,
    .account = NULL,
    .host_work = cuda_host_work,
    .model_stats = NULL,
    .op_begin = NULL,
    .op_end = NULL,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy_async = cuda_copy_async,
    .kernels = &fb_cuda_kernels,
    .proxy_copy = cuda_proxy_copy,
};
