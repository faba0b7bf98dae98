/* Host tasks of the cuda device: fn(arg) runs on the host when its stream reaches that point,
 * and the stream's later work waits until fn returned.
 *
 * Not cudaLaunchHostFunc: CUDA may run every host function of a process on one internal
 * thread, one after another, so a host function that blocks until another one runs (a local
 * collective whose peer rank is a thread of the same process, both on one GPU) deadlocks. Here
 * each stream has its own worker thread instead. Issuing a task records an event on the stream
 * and launches a gate kernel (host_gate.cu) that holds the stream until a counter in mapped
 * pinned memory reaches the task's sequence number; the worker waits for the event, runs fn,
 * then stores the sequence number. Tasks of one stream run in issue order; tasks of different
 * streams run independently. A failing fn poisons the stream (read by stream_sync) and still
 * opens the gate, so the stream never waits forever on a failed task.
 *
 * Not where ranks are threads of one process (--comm local, no launcher). There a
 * gate kernel of one rank waits for a task that waits for another rank's thread to issue its
 * part, and that thread can block first in a driver call that waits for the context while
 * holding the driver's lock: the first launch of a kernel (lazy loading), cuBLASLt loading a
 * kernel library during its heuristic; pinned allocations wait for that lock. Seen on an H200
 * (2026-11-29, cuda-gdb, docs/h200/2026-11-29/): zeropp's quantised paths at world 2 on one GPU
 * hung with one rank in cuLaunchKernel or cuLibraryLoadData, the other in cuMemHostAlloc, and
 * one gate kernel running; CUDA_MODULE_LOADING=EAGER did not help. So there each task runs on
 * the issuing thread after its stream drained: no gate ever waits on a thread, and the ranks
 * meet in the task itself. Their collectives do not overlap compute, which rank threads on one
 * GPU cannot show anyway; ranks of their own processes (a launcher) keep the gates.
 * It does not decide what runs in a task (comm_staged.c, the strategies). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_impl.h"

typedef struct hostq_item {
  cudaEvent_t ready;                  /* recorded on the stream where the task was issued */
  fb_status (*fn)(void *arg);
  void *arg;
  unsigned long long seq;
  struct hostq_item *next;
} hostq_item;

struct fb_cuda_hostq {
  fb_device *d;
  fb_stream *s;
  pthread_t worker;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  hostq_item *head, *tail;            /* issued, not yet run */
  hostq_item *spare;                  /* run items, their events kept for reuse */
  bool stop;
  unsigned long long *ctr;            /* cudaHostAlloc(mapped): the last sequence number run */
  unsigned long long *dctr;           /* the same word as the device addresses it */
  unsigned long long issued;          /* sequence numbers handed out (issuing thread only) */
};

static void poison(fb_stream *s, fb_status st) {
  int expected = 0;
  if (__atomic_load_n(&s->poison, __ATOMIC_ACQUIRE) != 0) return; /* keep the first */
  snprintf(s->poison_msg, sizeof s->poison_msg, "%s", fb_error_msg());
  snprintf(s->poison_where, sizeof s->poison_where, "%s", fb_error_where());
  __atomic_compare_exchange_n(&s->poison, &expected, (int)st, false, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
}

static void run_item(fb_cuda_hostq *q, hostq_item *it) {
  fb_status st = fb_cuda_bind(q->d);
  if (st == FB_OK) {
    cudaError_t e = cudaEventSynchronize(it->ready);
    if (e != cudaSuccess)
      st = FB_ERR(FB_EDEVICE, "rank %d: cudaEventSynchronize(host task) failed: %s (%s)",
                  q->d->rank, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  if (st == FB_OK) st = it->fn(it->arg);
  if (st != FB_OK) poison(q->s, st);
  __atomic_store_n(q->ctr, it->seq, __ATOMIC_RELEASE); /* opens the gate */
}

static void *worker_main(void *p) {
  fb_cuda_hostq *q = p;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->head && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
    if (!q->head) break; /* stopping and drained */
    hostq_item *it = q->head;
    q->head = it->next;
    if (!q->head) q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    run_item(q, it);
    pthread_mutex_lock(&q->mu);
    it->next = q->spare;
    q->spare = it;
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

static fb_status hostq_start(fb_device *d, fb_stream *s, fb_cuda_hostq **out) {
  fb_status st = FB_OK;
  cudaError_t e;
  fb_cuda_hostq *q = calloc(1, sizeof *q);
  if (!q) return FB_ERR(FB_ENOMEM, "rank %d: host tasks: out of host memory", d->rank);
  q->d = d;
  q->s = s;
  if ((e = cudaHostAlloc((void **)&q->ctr, sizeof *q->ctr, cudaHostAllocMapped)) != cudaSuccess) {
    st = FB_ERR(FB_EDEVICE, "rank %d: cudaHostAlloc(host task counter) failed: %s", d->rank,
                cudaGetErrorString(e));
    goto fail_free;
  }
  *q->ctr = 0;
  if ((e = cudaHostGetDevicePointer((void **)&q->dctr, q->ctr, 0)) != cudaSuccess) {
    st = FB_ERR(FB_EDEVICE, "rank %d: cudaHostGetDevicePointer(host task counter) failed: %s",
                d->rank, cudaGetErrorString(e));
    goto fail_ctr;
  }
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  if (pthread_create(&q->worker, NULL, worker_main, q) != 0) {
    st = FB_ERR(FB_EDEVICE, "rank %d: host tasks: cannot start the worker thread", d->rank);
    goto fail_sync;
  }
  *out = q;
  return FB_OK;

fail_sync:
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
fail_ctr:
  cudaFreeHost(q->ctr);
fail_free:
  free(q);
  return st;
}

/* A run item with its event, or a new one. */
static fb_status take_item(fb_cuda_hostq *q, hostq_item **out) {
  pthread_mutex_lock(&q->mu);
  hostq_item *it = q->spare;
  if (it) q->spare = it->next;
  pthread_mutex_unlock(&q->mu);
  if (!it) {
    if (!(it = calloc(1, sizeof *it)))
      return FB_ERR(FB_ENOMEM, "rank %d: host task: out of host memory", q->d->rank);
    cudaError_t e = cudaEventCreateWithFlags(&it->ready, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      free(it);
      return FB_ERR(FB_EDEVICE, "rank %d: cudaEventCreateWithFlags(host task) failed: %s",
                    q->d->rank, cudaGetErrorString(e));
    }
  }
  *out = it;
  return FB_OK;
}

/* A host task where ranks are threads of this process: fn on this thread once s drained; a
 * failure poisons s. */
static fb_status run_inline(fb_device *d, fb_stream *s, fb_status (*fn)(void *arg), void *arg) {
  cudaError_t e = cudaStreamSynchronize(s->s);
  if (e != cudaSuccess)
    return FB_ERR(FB_EDEVICE, "rank %d: cudaStreamSynchronize(host task) failed: %s (%s)",
                  d->rank, cudaGetErrorString(e), cudaGetErrorName(e));
  fb_status st = fn(arg);
  if (st != FB_OK) poison(s, st);
  return FB_OK;
}

fb_status fb_cuda_host_task(fb_device *d, fb_stream *s, fb_status (*fn)(void *arg), void *arg) {
  FB_TRY(fb_cuda_bind(d));
  if (fb_cuda_of(d)->tasks_inline) return run_inline(d, s, fn, arg);
  if (!s->hostq) FB_TRY(hostq_start(d, s, &s->hostq));
  fb_cuda_hostq *q = s->hostq;
  hostq_item *it = NULL;
  FB_TRY(take_item(q, &it));
  cudaError_t e = cudaEventRecord(it->ready, s->s);
  unsigned long long seq = q->issued + 1;
  if (e == cudaSuccess) e = fb_cuda_gate_launch(s->s, q->dctr, seq);
  if (e != cudaSuccess) {
    pthread_mutex_lock(&q->mu);
    it->next = q->spare;
    q->spare = it;
    pthread_mutex_unlock(&q->mu);
    return FB_ERR(FB_EDEVICE, "rank %d: host task: %s", d->rank, cudaGetErrorString(e));
  }
  q->issued = seq;
  it->fn = fn;
  it->arg = arg;
  it->seq = seq;
  it->next = NULL;
  pthread_mutex_lock(&q->mu);
  if (q->tail) q->tail->next = it;
  else q->head = it;
  q->tail = it;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  return FB_OK;
}

void fb_cuda_host_tasks_stop(fb_stream *s) {
  fb_cuda_hostq *q = s->hostq;
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->stop = true; /* the worker drains what was issued, then returns */
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  pthread_join(q->worker, NULL);
  for (hostq_item *it = q->spare, *next; it; it = next) {
    next = it->next;
    cudaEventDestroy(it->ready);
    free(it);
  }
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
  cudaFreeHost(q->ctr);
  free(q);
  s->hostq = NULL;
}
