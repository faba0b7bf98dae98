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

#include "../ops/cpu_kernels.h"
#include "host_pool.h"

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
};

struct fb_event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t rec_gen;  /* generation of the latest record */
  uint64_t done_gen; /* latest generation that completed */
  err_box err;       /* status of the stream at the completed record */
};

/* Timing marks: a fixed table of lazily allocated chunks, so a slot never moves and the
 * worker may write one while the host appends more. Ticket = index + 1 (0 = none). */
#define MARK_CHUNK 4096
#define MARK_NCHUNK 4096
typedef struct cpu_impl {
  fb_host_pool *pool;
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

/* ---- worker streams ---------------------------------------------------------------------- */

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
  case T_FREE: fb_host_pool_put(impl_of(s->dev)->pool, t->dst, t->n); break;
  case T_MEMSET:
    if (healthy) memset(t->dst, 0, t->n);
    break;
  case T_COPY:
    if (healthy) memcpy(t->dst, t->src, t->n);
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
  for (int i = 0; i < MARK_NCHUNK; i++) free(c->chunks[i]);
  pthread_mutex_destroy(&c->mark_mu);
  fb_host_pool_destroy(c->pool);
  free(c);
  d->impl = NULL;
}

static fb_status cpu_alloc(fb_device *d, fb_stream *s, size_t bytes, fb_mem_cat cat,
                           void **out) {
  (void)s; /* one host pool: the stream hint does not matter here */
  void *p = fb_host_pool_get(impl_of(d)->pool, bytes);
  if (!p)
    return FB_ERR(FB_ENOMEM, "rank %d: host memory exhausted allocating %.2f MiB for %s",
                  d->rank, (double)bytes / (1024.0 * 1024.0), fb_mem_cat_name(cat));
  *out = p;
  return FB_OK;
}

static void cpu_free(fb_device *d, void *p, size_t bytes, fb_mem_cat cat, fb_stream *s) {
  if (!p) return;
  fb_host_pool *pool = impl_of(d)->pool;
  if (!s || !s->worker) {
    fb_host_pool_put(pool, p, bytes);
    return;
  }
  task *t = calloc(1, sizeof *t);
  if (!t) { /* cannot defer: wait for the stream, then release */
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->n_enq;
    pthread_mutex_unlock(&s->mu);
    (void)wait_seq(s, seq);
    fb_host_pool_put(pool, p, bytes);
    return;
  }
  t->kind = T_FREE;
  t->dst = p;
  t->n = bytes;
  enqueue(s, t);
}

/* Large zero fills use the calling thread's OpenMP team (page-sized chunks: any split gives
 * the same zeros). */
static void zero_fill(void *dst, size_t n) {
  const size_t chunk = (size_t)1 << 20;
  if (n < 8 * chunk) {
    memset(dst, 0, n);
    return;
  }
  const int64_t nc = (int64_t)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nc; c++) {
    size_t off = (size_t)c * chunk, len = n - off < chunk ? n - off : chunk;
    memset((char *)dst + off, 0, len);
  }
}

static fb_status cpu_memset0(fb_device *d, fb_stream *s, void *dst, size_t n) {
  if (s && s->worker) {
    task *t = NULL;
    FB_TRY(new_task(T_MEMSET, &t));
    t->dst = dst;
    t->n = n;
    enqueue(s, t);
    return FB_OK;
  }
  if (s) FB_TRY(stream_status(s));
  zero_fill(dst, n);
  return FB_OK;
}

static fb_status cpu_copy_d2d(fb_device *d, fb_stream *s, void *dst, const void *src, size_t n) {
  if (s && s->worker) {
    task *t = NULL;
    FB_TRY(new_task(T_COPY, &t));
    t->dst = dst;
    t->src = src;
    t->n = n;
    enqueue(s, t);
    return FB_OK;
  }
  if (s) FB_TRY(stream_status(s));
  memmove(dst, src, n);
  return FB_OK;
}

/* Host <-> device copies return once the copy happened (the caller's buffer may be reused or
 * read), so on a worker stream they wait for their own task. */
static fb_status cpu_copy_sync(fb_device *d, fb_stream *s, void *dst, const void *src, size_t n) {
  if (s && s->worker) {
    task *t = NULL;
    FB_TRY(new_task(T_COPY, &t));
    t->dst = dst;
    t->src = src;
    t->n = n;
    return wait_seq(s, enqueue(s, t));
  }
  if (s) FB_TRY(stream_status(s));
  memmove(dst, src, n);
  return FB_OK;
}

static fb_status cpu_stream_create(fb_device *d, fb_stream_kind kind, fb_stream **out) {
  *out = NULL;
  fb_stream *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "cpu device: out of host memory for a stream");
  fb_status st = FB_OK;
  s->dev = d;
  s->kind = kind;
  s->worker = kind == FB_STREAM_COMM;
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
  if (!s->worker) return stream_status(s);
  pthread_mutex_lock(&s->mu);
  uint64_t seq = s->n_enq;
  pthread_mutex_unlock(&s->mu);
  return wait_seq(s, seq);
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
  pthread_mutex_lock(&e->mu);
  uint64_t gen = ++e->rec_gen;
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
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->rec_gen; /* waits for the latest record, like cudaStreamWaitEvent */
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
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->rec_gen;
  pthread_mutex_unlock(&e->mu);
  err_box eb;
  event_wait_gen(e, gen, &eb);
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

const fb_device_ops fb_cpu_device_ops = {
    .name = "cpu",
    .init = cpu_init,
    .fini = cpu_fini,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .copy_d2d = cpu_copy_d2d,
    .copy_h2d = cpu_copy_sync,
    .copy_d2h = cpu_copy_sync,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_sync = cpu_event_sync,
    .host_task = cpu_host_task,
    .now = cpu_now,
    .mark = cpu_mark,
    .mark_time = cpu_mark_time,
    .marks_reset = cpu_marks_reset,
    .account = NULL,
    .host_work = cpu_host_work,
    .model_stats = NULL,
    .kernels = &fb_cpu_kernels,
};
