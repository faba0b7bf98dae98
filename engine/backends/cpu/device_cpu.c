/* The cpu device: host memory, streams, events and timing marks on the host.
 *  - A compute stream is inline: its work runs on the calling thread, at the call.
 *  - A comm stream is a worker thread with a FIFO task queue, so communication issued ahead
 *    really runs while the caller computes.
 *  - Events are generation counters under a mutex/condvar; an event carries the status of the
 *    stream it was recorded on, so a failure crosses streams through stream_wait/event_sync.
 *  - A failing host task poisons its stream: later tasks (except frees, records and stamps)
 *    are skipped, later syncs and waits return the first failure with its message.
 *  - Memory comes from a caching pool (host_pool.h): freed blocks are kept for the next
 *    request of the same size, so a step's buffers are not faulted in again every step.
 * The same code is the opaque device (cpu-opaque) when a guard (opaque.h) is attached: memory
 * is protected from the host between device ops, every op declares its operands and is
 * checked against the stream and event order, frees are checked to be stream-safe, and a
 * kernel on a worker stream first waits for that stream's earlier work (on the plain cpu
 * device too: a kernel runs on the issuing thread).
 * Kernels are fb_cpu_kernels (engine/ops). This file does no math and no accounting. */
#define _GNU_SOURCE
#include "device_cpu.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "../../ops/cpu_kernels.h"
#include "../../device/host_pool.h"
#include "opaque.h"

/* ---- clock ------------------------------------------------------------------------------ */

static _Atomic(double) clock_epoch = -1.0;

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double fb_cpu_clock(void) {
  double e = atomic_load(&clock_epoch);
  if (e < 0) {
    double now = mono_s(), expect = -1.0;
    /* the first caller sets the epoch; everyone else reads theirs */
    if (!atomic_compare_exchange_strong(&clock_epoch, &expect, now)) now = expect;
    e = now;
  }
  return mono_s() - e;
}

void fb_cpu_clock_align(void) { atomic_store(&clock_epoch, mono_s()); }

/* ---- types ------------------------------------------------------------------------------ */

typedef struct err_box {
  fb_status st;
  char msg[512];
  char where[128];
} err_box;

typedef enum task_kind {
  T_FN, T_RECORD, T_WAIT, T_STAMP, T_FREE, T_MEMSET, T_COPY
} task_kind;

typedef struct task {
  struct task *next;
  task_kind kind;
  fb_status (*fn)(void *);
  void *arg;
  fb_event *ev;
  uint64_t gen;
  _Atomic(double) *slot;
  void *dst;
  const void *src;
  size_t n;
  fb_operand opnd[2]; /* opaque: the device operands of a memset or copy */
  int nopnd;
} task;

struct fb_stream {
  fb_device *dev;
  fb_stream_kind kind;
  bool worker;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_work; /* a task was queued or stop was set */
  pthread_cond_t cv_done; /* a task finished */
  task *head, *tail;
  uint64_t n_enq, n_done;
  bool stop;
  err_box err; /* first failure; err.st == FB_OK while healthy */
  int slot;    /* opaque: the stream's slot in the guard's clocks */
};

struct fb_event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t rec_gen;  /* generation of the latest record */
  uint64_t done_gen; /* latest generation that completed */
  err_box err;       /* status of the stream at the completed record */
  fb_opq_clock vc;   /* opaque: the recording stream's clock at the latest record */
};

/* Timing marks: a fixed table of lazily allocated chunks, so a slot never moves and the
 * worker may write one while the host appends more. Ticket = index + 1 (0 = none). */
#define MARK_CHUNK 4096
#define MARK_NCHUNK 4096
typedef struct cpu_impl {
  fb_host_pool *pool;
  fb_opq *guard;        /* opaque device only */
  fb_stream *primary;   /* the first compute stream: where a free without a stream is ordered */
  pthread_mutex_t mark_mu;
  uint64_t n_marks;
  _Atomic(double) *chunks[MARK_NCHUNK];
} cpu_impl;

/* ---- helpers ---------------------------------------------------------------------------- */

static void box_set(err_box *b, fb_status st, const char *msg, const char *where) {
  b->st = st;
  snprintf(b->msg, sizeof b->msg, "%s", msg);
  snprintf(b->where, sizeof b->where, "%s", where);
}

/* Re-raises a stored failure on the calling thread. */
static fb_status box_raise(const err_box *b) {
  if (b->st != FB_OK) fb_error_copy(b->st, b->msg, b->where);
  return b->st;
}

static void poison(fb_stream *s, fb_status st, const char *msg, const char *where) {
  if (s->err.st == FB_OK) box_set(&s->err, st, msg, where);
}

static void event_complete(fb_event *e, uint64_t gen, const err_box *err) {
  pthread_mutex_lock(&e->mu);
  if (gen > e->done_gen) {
    e->done_gen = gen;
    e->err = *err;
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

/* Blocks until generation gen of e completed; copies the event's status into *err. */
static void event_wait_gen(fb_event *e, uint64_t gen, err_box *err) {
  pthread_mutex_lock(&e->mu);
  while (e->done_gen < gen) pthread_cond_wait(&e->cv, &e->mu);
  *err = e->err;
  pthread_mutex_unlock(&e->mu);
}

static cpu_impl *impl_of(fb_device *d) { return d->impl; }

/* Gives a block back: to the host pool, or (opaque) unmaps it. */
static void release(fb_device *d, void *p, size_t bytes) {
  cpu_impl *c = impl_of(d);
  if (c->guard) fb_opq_release(c->guard, p);
  else fb_host_pool_put(c->pool, p, bytes);
}

/* ---- worker streams ---------------------------------------------------------------------- */

/* Zeroes n bytes with non-temporal stores where the CPU has them: a zero fill of megabytes
 * is never read back before something else overwrites the cache, and glibc's memset (2.36,
 * Debian 12) writes through the cache at every size: each line is first read for ownership
 * (one thread: 10 GB/s, against 23 GB/s with streaming stores on a 2-vCPU Xeon slice). The
 * unaligned head and tail go through memset; the fence orders the streamed lines before
 * whatever the caller signals next (a stream's completion, an OpenMP barrier).
 * Memory not yet faulted in is another matter: the kernel clears each page as it faults it
 * in, and that page is then in cache, where plain stores are cheaper than streaming ones (a
 * debug-model run's set-up, which zeroes fresh optimizer state: 3.5 ms slower streamed).
 * So the callers ask zeros_stream first: it streams only into memory already faulted in. */
static void zero_stream(void *dst, size_t n) {
#if defined(__AVX2__)
  char *p = dst;
  size_t head = (size_t)(-(uintptr_t)p & 63);
  if (n < head + 64) {
    memset(p, 0, n);
    return;
  }
  memset(p, 0, head);
  p += head;
  n -= head;
  const __m256i z = _mm256_setzero_si256();
  size_t body = n & ~(size_t)63;
  for (size_t i = 0; i < body; i += 64) {
    _mm256_stream_si256((__m256i *)(p + i), z);
    _mm256_stream_si256((__m256i *)(p + i + 32), z);
  }
  _mm_sfence();
  memset(p + body, 0, n - body);
#else
  memset(dst, 0, n);
#endif
}

/* Whether the page holding p is resident (one mincore call): a buffer reused from the pool is,
 * fresh memory is not (see zero_stream). A failed call answers yes: streaming is then merely
 * slower, never wrong. */
static bool page_resident(const void *p) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  unsigned char v = 1;
  if (mincore((void *)((uintptr_t)p & ~(page - 1)), 1, &v) != 0) return true;
  return v & 1;
}

#define ZERO_STREAM_MIN ((size_t)1 << 20) /* smaller fills: memset, the lines stay cached */

/* Whether a zero fill of n bytes at p should stream (see zero_stream). */
static bool zeros_stream(const void *p, size_t n) {
  return n >= ZERO_STREAM_MIN && page_resident(p);
}

/* Runs one task on the worker (s->mu not held). */
static void run_task(fb_stream *s, task *t) {
  /* s->err is only written by this thread (and by the host on inline streams, which never
   * have a worker), so reading it here without the lock is safe. */
  const bool healthy = s->err.st == FB_OK;
  switch (t->kind) {
  case T_FN:
    if (healthy) {
      fb_status st = t->fn(t->arg);
      if (st != FB_OK) {
        pthread_mutex_lock(&s->mu);
        poison(s, st, fb_error_msg(), fb_error_where());
        pthread_mutex_unlock(&s->mu);
      }
    }
    break;
  case T_RECORD: event_complete(t->ev, t->gen, &s->err); break;
  case T_WAIT: {
    err_box eb;
    event_wait_gen(t->ev, t->gen, &eb);
    if (eb.st != FB_OK) {
      pthread_mutex_lock(&s->mu);
      poison(s, eb.st, eb.msg, eb.where);
      pthread_mutex_unlock(&s->mu);
    }
    break;
  }
  case T_STAMP: atomic_store_explicit(t->slot, fb_cpu_clock(), memory_order_relaxed); break;
  case T_FREE: release(s->dev, t->dst, t->n); break;
  case T_MEMSET:
  case T_COPY:
    if (healthy) {
      cpu_impl *c = impl_of(s->dev);
      fb_status st = c->guard ? fb_opq_open(c->guard, t->opnd, t->nopnd) : FB_OK;
      if (st == FB_OK) {
        if (t->kind == T_COPY) memcpy(t->dst, t->src, t->n);
        else if (zeros_stream(t->dst, t->n)) zero_stream(t->dst, t->n);
        else memset(t->dst, 0, t->n);
        if (c->guard) fb_opq_close(c->guard, t->opnd, t->nopnd);
      } else {
        pthread_mutex_lock(&s->mu);
        poison(s, st, fb_error_msg(), fb_error_where());
        pthread_mutex_unlock(&s->mu);
      }
    }
    break;
  }
}

static void *worker_main(void *arg) {
  fb_stream *s = arg;
  omp_set_num_threads(1); /* kernels on the comm thread must not fight the compute pool */
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv_work, &s->mu);
    if (!s->head) break; /* stop requested and the queue is drained */
    task *t = s->head;
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    run_task(s, t);
    free(t);
    pthread_mutex_lock(&s->mu);
    s->n_done++;
    pthread_cond_broadcast(&s->cv_done);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Queues t on worker stream s; returns its sequence number (1-based). */
static uint64_t enqueue(fb_stream *s, task *t) {
  t->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = t;
  else s->head = t;
  s->tail = t;
  uint64_t seq = ++s->n_enq;
  pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  return seq;
}

static fb_status new_task(task_kind kind, task **out) {
  task *t = calloc(1, sizeof *t);
  if (!t) return FB_ERR(FB_ENOMEM, "cpu device: out of host memory for a stream task");
  t->kind = kind;
  *out = t;
  return FB_OK;
}

/* Host waits until the worker finished task number seq; returns the stream's status. */
static fb_status wait_seq(fb_stream *s, uint64_t seq) {
  pthread_mutex_lock(&s->mu);
  while (s->n_done < seq) pthread_cond_wait(&s->cv_done, &s->mu);
  err_box eb = s->err;
  pthread_mutex_unlock(&s->mu);
  return box_raise(&eb);
}

static fb_status stream_status(fb_stream *s) {
  pthread_mutex_lock(&s->mu);
  err_box eb = s->err;
  pthread_mutex_unlock(&s->mu);
  return box_raise(&eb);
}

/* ---- device ops ------------------------------------------------------------------------- */

static fb_status cpu_stream_sync(fb_device *d, fb_stream *s);

static fb_status cpu_init(fb_device *d) {
  fb_status st = FB_OK;
  cpu_impl *c = calloc(1, sizeof *c);
  if (!c) return FB_ERR(FB_ENOMEM, "cpu device: out of host memory");
  if (!(c->pool = fb_host_pool_create())) {
    st = FB_ERR(FB_ENOMEM, "cpu device: out of host memory for the allocator");
    goto fail_impl;
  }
  if (pthread_mutex_init(&c->mark_mu, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "cpu device: pthread_mutex_init failed");
    goto fail_pool;
  }
  (void)fb_cpu_clock(); /* fix the epoch no later than the first device */
  d->impl = c;
  return FB_OK;

fail_pool:
  fb_host_pool_destroy(c->pool);
fail_impl:
  free(c);
  return st;
}

static void cpu_fini(fb_device *d) {
  cpu_impl *c = impl_of(d);
  if (!c) return;
  fb_opq_destroy(c->guard);
  for (int i = 0; i < MARK_NCHUNK; i++) free(c->chunks[i]);
  pthread_mutex_destroy(&c->mark_mu);
  fb_host_pool_destroy(c->pool);
  free(c);
  d->impl = NULL;
}

static fb_status cpu_alloc(fb_device *d, fb_stream *s, size_t bytes, fb_mem_cat cat,
                           void **out) {
  (void)s; /* one host pool: the stream hint does not matter here */
  if (impl_of(d)->guard) return fb_opq_alloc(impl_of(d)->guard, bytes, cat, out);
  void *p = fb_host_pool_get(impl_of(d)->pool, bytes);
  if (!p)
    return FB_ERR(FB_ENOMEM, "rank %d: host memory exhausted allocating %.2f MiB for %s",
                  d->rank, (double)bytes / (1024.0 * 1024.0), fb_mem_cat_name(cat));
  *out = p;
  return FB_OK;
}

static void cpu_free(fb_device *d, void *p, size_t bytes, fb_mem_cat cat, fb_stream *s) {
  if (!p) return;
  cpu_impl *c = impl_of(d);
  if (c->guard) {
    if (!s) s = c->primary; /* no stream: ordered on the primary compute stream */
    if (!fb_opq_free_check(c->guard, p, s ? s->slot : -1)) return; /* quarantined */
  }
  if (!s || !s->worker) {
    release(d, p, bytes);
    return;
  }
  task *t = calloc(1, sizeof *t);
  if (!t) { /* cannot defer: wait for the stream, then release */
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->n_enq;
    pthread_mutex_unlock(&s->mu);
    (void)wait_seq(s, seq);
    release(d, p, bytes);
    return;
  }
  t->kind = T_FREE;
  t->dst = p;
  t->n = bytes;
  enqueue(s, t);
}

/* Large zero fills use the calling thread's OpenMP team (page-sized chunks: any split gives
 * the same zeros); under 1 MiB, or where the memory is not yet faulted in, a plain memset
 * (see zero_stream). */
static void zero_fill(void *dst, size_t n) {
  const size_t chunk = ZERO_STREAM_MIN;
  const bool stream = zeros_stream(dst, n);
  const int64_t nc = (int64_t)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (nc >= 8)
  for (int64_t c = 0; c < nc; c++) {
    size_t off = (size_t)c * chunk, len = n - off < chunk ? n - off : chunk;
    if (stream) zero_stream((char *)dst + off, len);
    else memset((char *)dst + off, 0, len);
  }
}

/* A memset (src NULL) or copy on stream s, with its device operands (what the guard checks
 * and opens: dst when dst_dev, src when src_dev). On a worker stream it is queued; `wait`
 * makes the caller wait for it. Returns the task's sequence number in *seq (0 = done). */
static fb_status mem_op(fb_device *d, fb_stream *s, const char *name, void *dst, bool dst_dev,
                        const void *src, bool src_dev, size_t n) {
  fb_opq *g = impl_of(d)->guard;
  fb_operand v[2];
  int nv = 0;
  if (dst_dev) v[nv++] = (fb_operand){.p = dst, .bytes = n, .mode = FB_ACC_WRITE};
  if (src && src_dev) v[nv++] = (fb_operand){.p = src, .bytes = n, .mode = FB_ACC_READ};
  if (g) FB_TRY(fb_opq_access(g, s ? s->slot : 0, name, v, nv));
  if (s && s->worker) {
    task *t = NULL;
    FB_TRY(new_task(src ? T_COPY : T_MEMSET, &t));
    t->dst = dst;
    t->src = src;
    t->n = n;
    memcpy(t->opnd, v, sizeof v);
    t->nopnd = nv;
    enqueue(s, t);
    return FB_OK;
  }
  if (s) FB_TRY(stream_status(s));
  if (g) FB_TRY(fb_opq_open(g, v, nv));
  if (src) memmove(dst, src, n);
  else zero_fill(dst, n);
  if (g) fb_opq_close(g, v, nv);
  return FB_OK;
}

static fb_status cpu_memset0(fb_device *d, fb_stream *s, void *dst, size_t n) {
  return mem_op(d, s, "memset", dst, true, NULL, false, n);
}

static fb_status cpu_copy_d2d(fb_device *d, fb_stream *s, void *dst, const void *src, size_t n) {
  return mem_op(d, s, "copy_d2d", dst, true, src, true, n);
}

/* Host <-> device copies return once the copy happened (the caller's buffer may be reused or
 * read), so on a worker stream they wait for the stream. A device-to-host copy tells the
 * host everything the stream did up to it. */
static fb_status cpu_copy_h2d(fb_device *d, fb_stream *s, void *dst, const void *src, size_t n) {
  FB_TRY(mem_op(d, s, "copy_h2d", dst, true, src, false, n));
  return s && s->worker ? cpu_stream_sync(d, s) : FB_OK;
}

static fb_status cpu_copy_d2h(fb_device *d, fb_stream *s, void *dst, const void *src, size_t n) {
  FB_TRY(mem_op(d, s, "copy_d2h", dst, false, src, true, n));
  return s ? cpu_stream_sync(d, s) : FB_OK;
}

/* Staging copies between pinned host memory and the device, in stream order. */
static fb_status cpu_copy_async(fb_device *d, fb_stream *s, void *dst, const void *src,
                                size_t n, bool to_host) {
  return mem_op(d, s, to_host ? "copy_d2h_async" : "copy_h2d_async", dst, !to_host, src,
                to_host, n);
}

static fb_status cpu_host_alloc(fb_device *d, size_t bytes, void **out) {
  *out = malloc(bytes ? bytes : 1);
  if (!*out) return FB_ERR(FB_ENOMEM, "rank %d: out of host memory for %zu staging bytes",
                           d->rank, bytes);
  return FB_OK;
}

static void cpu_host_free(fb_device *d, void *p) {
  (void)d;
  free(p);
}

static fb_status cpu_stream_create(fb_device *d, fb_stream_kind kind, fb_stream **out) {
  *out = NULL;
  fb_stream *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "cpu device: out of host memory for a stream");
  fb_status st = FB_OK;
  s->dev = d;
  s->kind = kind;
  s->worker = kind == FB_STREAM_COMM;
  cpu_impl *c = impl_of(d);
  if (c->guard) {
    st = fb_opq_stream_add(c->guard, kind == FB_STREAM_COMM ? "comm" : "compute", &s->slot);
    if (st != FB_OK) goto fail_free;
  }
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "cpu device: pthread_mutex_init failed");
    goto fail_free;
  }
  if (pthread_cond_init(&s->cv_work, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "cpu device: pthread_cond_init failed");
    goto fail_mu;
  }
  if (pthread_cond_init(&s->cv_done, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "cpu device: pthread_cond_init failed");
    goto fail_cv_work;
  }
  if (s->worker && pthread_create(&s->thread, NULL, worker_main, s) != 0) {
    st = FB_ERR(FB_EINTERNAL, "rank %d: cannot start the comm stream's worker thread", d->rank);
    goto fail_cv_done;
  }
  if (c->guard && kind == FB_STREAM_COMPUTE && !c->primary) c->primary = s;
  *out = s;
  return FB_OK;

fail_cv_done:
  pthread_cond_destroy(&s->cv_done);
fail_cv_work:
  pthread_cond_destroy(&s->cv_work);
fail_mu:
  pthread_mutex_destroy(&s->mu);
fail_free:
  free(s);
  return st;
}

static void cpu_stream_destroy(fb_device *d, fb_stream *s) {
  if (!s) return;
  if (s->worker) {
    pthread_mutex_lock(&s->mu);
    s->stop = true; /* the worker drains the queue (frees included) before it exits */
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
  }
  pthread_cond_destroy(&s->cv_done);
  pthread_cond_destroy(&s->cv_work);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static fb_status cpu_stream_sync(fb_device *d, fb_stream *s) {
  fb_opq *g = impl_of(d)->guard;
  fb_status st;
  if (!s->worker) {
    st = stream_status(s);
  } else {
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->n_enq;
    pthread_mutex_unlock(&s->mu);
    st = wait_seq(s, seq);
  }
  if (g && st == FB_OK) {
    fb_opq_host_stream(g, s->slot);
    st = fb_opq_error(g);
  }
  return st;
}

static fb_status cpu_event_create(fb_device *d, fb_event **out) {
  fb_event *e = calloc(1, sizeof *e);
  if (!e) return FB_ERR(FB_ENOMEM, "cpu device: out of host memory for an event");
  if (pthread_mutex_init(&e->mu, NULL) != 0) {
    free(e);
    return FB_ERR(FB_EINTERNAL, "cpu device: pthread_mutex_init failed");
  }
  if (pthread_cond_init(&e->cv, NULL) != 0) {
    pthread_mutex_destroy(&e->mu);
    free(e);
    return FB_ERR(FB_EINTERNAL, "cpu device: pthread_cond_init failed");
  }
  *out = e;
  return FB_OK;
}

static void cpu_event_destroy(fb_device *d, fb_event *e) {
  if (!e) return;
  pthread_cond_destroy(&e->cv);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

static fb_status cpu_event_record(fb_device *d, fb_event *e, fb_stream *s) {
  fb_opq *g = impl_of(d)->guard;
  pthread_mutex_lock(&e->mu);
  uint64_t gen = ++e->rec_gen;
  if (g) fb_opq_record(g, s->slot, &e->vc);
  pthread_mutex_unlock(&e->mu);
  if (!s->worker) {
    event_complete(e, gen, &s->err);
    return FB_OK;
  }
  task *t = NULL;
  fb_status st = new_task(T_RECORD, &t);
  if (st != FB_OK) { /* never leave a generation that cannot complete */
    err_box eb = {.st = st};
    snprintf(eb.msg, sizeof eb.msg, "%s", fb_error_msg());
    event_complete(e, gen, &eb);
    return st;
  }
  t->ev = e;
  t->gen = gen;
  enqueue(s, t);
  return FB_OK;
}

static fb_status cpu_stream_wait(fb_device *d, fb_stream *s, fb_event *e) {
  fb_opq *g = impl_of(d)->guard;
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->rec_gen; /* waits for the latest record, like cudaStreamWaitEvent */
  if (g) fb_opq_wait(g, s->slot, &e->vc);
  pthread_mutex_unlock(&e->mu);
  if (!s->worker) {
    err_box eb;
    event_wait_gen(e, gen, &eb);
    if (eb.st != FB_OK) poison(s, eb.st, eb.msg, eb.where);
    return stream_status(s);
  }
  task *t = NULL;
  FB_TRY(new_task(T_WAIT, &t));
  t->ev = e;
  t->gen = gen;
  enqueue(s, t);
  return FB_OK;
}

static fb_status cpu_event_sync(fb_device *d, fb_event *e) {
  fb_opq *g = impl_of(d)->guard;
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->rec_gen;
  fb_opq_clock vc = e->vc;
  pthread_mutex_unlock(&e->mu);
  err_box eb;
  event_wait_gen(e, gen, &eb);
  if (g && eb.st == FB_OK) {
    fb_opq_host_event(g, &vc);
    return fb_opq_error(g);
  }
  return box_raise(&eb);
}

static fb_status cpu_host_task(fb_device *d, fb_stream *s, fb_status (*fn)(void *), void *arg) {
  if (!s->worker) {
    FB_TRY(stream_status(s));
    fb_status st = fn(arg);
    if (st != FB_OK) poison(s, st, fb_error_msg(), fb_error_where());
    return st;
  }
  task *t = NULL;
  FB_TRY(new_task(T_FN, &t));
  t->fn = fn;
  t->arg = arg;
  enqueue(s, t);
  return FB_OK;
}

static double cpu_now(fb_device *d) { return fb_cpu_clock(); }

/* Returns the slot of a new ticket, or NULL when the table is full. */
static _Atomic(double) *mark_slot(cpu_impl *c, uint64_t *ticket) {
  pthread_mutex_lock(&c->mark_mu);
  _Atomic(double) *slot = NULL;
  uint64_t i = c->n_marks;
  if (i < (uint64_t)MARK_CHUNK * MARK_NCHUNK) {
    _Atomic(double) **chunk = &c->chunks[i / MARK_CHUNK];
    if (!*chunk) *chunk = malloc(MARK_CHUNK * sizeof(_Atomic(double)));
    if (*chunk) {
      slot = &(*chunk)[i % MARK_CHUNK];
      atomic_store_explicit(slot, NAN, memory_order_relaxed);
      c->n_marks++;
      *ticket = i + 1;
    }
  }
  pthread_mutex_unlock(&c->mark_mu);
  return slot;
}

static uint64_t cpu_mark(fb_device *d, fb_stream *s) {
  uint64_t ticket = 0;
  _Atomic(double) *slot = mark_slot(impl_of(d), &ticket);
  if (!slot) return 0; /* table full (marks_reset not called): the op stays untimed */
  if (!s || !s->worker) {
    atomic_store_explicit(slot, fb_cpu_clock(), memory_order_relaxed);
    return ticket;
  }
  task *t = calloc(1, sizeof *t);
  if (!t) {
    atomic_store_explicit(slot, fb_cpu_clock(), memory_order_relaxed); /* the issue time */
    return ticket;
  }
  t->kind = T_STAMP;
  t->slot = slot;
  enqueue(s, t);
  return ticket;
}

static double cpu_mark_time(fb_device *d, uint64_t ticket) {
  cpu_impl *c = impl_of(d);
  double v = NAN;
  pthread_mutex_lock(&c->mark_mu);
  if (ticket >= 1 && ticket <= c->n_marks) {
    uint64_t i = ticket - 1;
    v = atomic_load_explicit(&c->chunks[i / MARK_CHUNK][i % MARK_CHUNK], memory_order_relaxed);
  }
  pthread_mutex_unlock(&c->mark_mu);
  return v;
}

static void cpu_marks_reset(fb_device *d) {
  cpu_impl *c = impl_of(d);
  pthread_mutex_lock(&c->mark_mu);
  c->n_marks = 0;
  pthread_mutex_unlock(&c->mark_mu);
}

/* The executor's own host does the work: nothing to model. */
static void cpu_host_work(fb_device *d, double seconds, const char *name) {
  (void)d, (void)seconds, (void)name;
}

/* ---- the opaque device ---------------------------------------------------------------------- */

static fb_status opaque_init(fb_device *d) {
  FB_TRY(cpu_init(d));
  fb_status st = fb_opq_create(d->rank, &impl_of(d)->guard);
  if (st != FB_OK) cpu_fini(d);
  return st;
}

/* A kernel runs on the issuing thread: on a worker stream it first waits for the stream's
 * earlier work (zeropp dequantises what the stream's all-gather brought), as the opaque
 * device does; on the inline compute stream there is nothing to wait for. */
static fb_status cpu_op_begin(fb_device *d, fb_stream *s, const char *name, const fb_operand *v,
                              int n) {
  (void)d, (void)name, (void)v, (void)n;
  if (!s->worker) return FB_OK;
  pthread_mutex_lock(&s->mu);
  uint64_t seq = s->n_enq;
  pthread_mutex_unlock(&s->mu);
  return wait_seq(s, seq);
}

/* Checks the operands, waits for the stream's earlier work (a kernel runs on the issuing
 * thread), then opens them for the kernel. */
static fb_status opaque_op_begin(fb_device *d, fb_stream *s, const char *name,
                                 const fb_operand *v, int n) {
  fb_opq *g = impl_of(d)->guard;
  FB_TRY(fb_opq_access(g, s->slot, name, v, n));
  if (s->worker) {
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->n_enq;
    pthread_mutex_unlock(&s->mu);
    FB_TRY(wait_seq(s, seq));
  } else {
    FB_TRY(stream_status(s));
  }
  return fb_opq_open(g, v, n);
}

static void opaque_op_end(fb_device *d, fb_stream *s, const fb_operand *v, int n) {
  (void)s;
  fb_opq_close(impl_of(d)->guard, v, n);
}

#define CPU_OPS_COMMON                                                                         \
  .fini = cpu_fini, .alloc = cpu_alloc, .free = cpu_free, .memset0 = cpu_memset0,             \
  .copy_d2d = cpu_copy_d2d, .copy_h2d = cpu_copy_h2d, .copy_d2h = cpu_copy_d2h,               \
  .stream_create = cpu_stream_create, .stream_destroy = cpu_stream_destroy,                   \
  .stream_sync = cpu_stream_sync, .event_create = cpu_event_create,                           \
  .event_destroy = cpu_event_destroy, .event_record = cpu_event_record,                       \
  .stream_wait = cpu_stream_wait, .event_sync = cpu_event_sync, .host_task = cpu_host_task,   \
  .now = cpu_now, .mark = cpu_mark, .mark_time = cpu_mark_time,                               \
  .marks_reset = cpu_marks_reset, .account = NULL, .host_work = cpu_host_work,                \
  .model_stats = NULL, .host_alloc = cpu_host_alloc, .host_free = cpu_host_free,              \
  .copy_async = cpu_copy_async, .kernels = &fb_cpu_kernels

const fb_device_ops fb_cpu_device_ops = {
    .name = "cpu",
    .init = cpu_init,
    .op_begin = cpu_op_begin,
    .op_end = NULL,
    CPU_OPS_COMMON,
};

const fb_device_ops fb_cpu_opaque_device_ops = {
    .name = "cpu-opaque",
    .init = opaque_init,
    .op_begin = opaque_op_begin,
    .op_end = opaque_op_end,
    CPU_OPS_COMMON,
};

/* Available host memory (MemAvailable), the cpu devices' capacity. */
int64_t fb_cpu_capacity(int ranks_here) {
  (void)ranks_here; /* ranks of one process share it: the fit check sums them */
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb > 0 ? (int64_t)kb * 1024 : -1;
}
