/* The sim device: no memory and no math. Streams are virtual clocks (seconds), events hold a
 * time, every op advances its stream by the cost model's duration (engine/sim/cost_model.h).
 *  - An op starts at max(stream clock, host time). The host time is the compute stream's clock
 *    when the profile says the host thread is the compute stream (cpu executor); with
 *    host_runs_ahead (GPUs) it is the time of the last host wait (event/stream sync).
 *  - Compute ops that overlap busy intervals of a comm stream (comm is issued ahead, so its
 *    intervals are known when compute is accounted) run hw->overlap_slowdown times slower over
 *    the overlapped part. Comm issued after a compute op does not slow it (documented limit).
 *  - Allocations return distinct opaque tokens (increasing addresses, never dereferenced);
 *    fb_alloc in device.c does the counting, exactly as on cpu.
 *  - Marks carry their time in the ticket itself, so nothing grows with the number of ops.
 * It does not record ops (the kernel / collective wrappers do) and holds no tensor data. */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../sim/cost_model.h"
#include "../sim/hardware.h"
#include "device.h"
#include "kernels.h"

struct fb_stream {
  double clock;          /* time at which the last issued op ends */
  fb_stream_kind kind;
  struct fb_stream *next;
};

struct fb_event {
  double t;
};

typedef struct sim_busy {
  double a, b;
} sim_busy;

typedef struct sim_dev {
  fb_stream *streams;    /* all streams of the device */
  fb_stream *compute;    /* primary compute stream: the host's program point */
  int ncompute;
  double host;           /* latest time the host waited for */
  uintptr_t next_addr;   /* next allocation token */
  /* Busy intervals of comm streams that compute may still overlap: sorted, disjoint,
   * live in iv[lo, lo + n). Intervals the compute streams have passed are dropped. */
  sim_busy *iv;
  size_t lo, n, cap;
} sim_dev;

#define SIM_TICKET_BIT (UINT64_C(1) << 63)
#define SIM_ALIGN 256

static sim_dev *S(fb_device *d) { return (sim_dev *)d->impl; }

static double host_time(fb_device *d) {
  sim_dev *s = S(d);
  if (!d->hw->host_runs_ahead && s->compute && s->compute->clock > s->host) return s->compute->clock;
  return s->host;
}

/* When an op issued now on stream st may start. */
static double ready(fb_device *d, fb_stream *st) { return fmax(st->clock, host_time(d)); }

static void host_wait(fb_device *d, double t) {
  sim_dev *s = S(d);
  if (t > s->host) s->host = t;
  if (s->compute && t > s->compute->clock) s->compute->clock = t;
}

/* ---- comm busy intervals ---------------------------------------------------------------- */

static fb_status iv_reserve(sim_dev *s) {
  if (s->lo > 0 && s->lo + s->n == s->cap) { /* compact to the front */
    memmove(s->iv, s->iv + s->lo, s->n * sizeof *s->iv);
    s->lo = 0;
  }
  if (s->n < s->cap) return FB_OK;
  size_t cap = s->cap ? 2 * s->cap : 64;
  sim_busy *iv = realloc(s->iv, cap * sizeof *iv);
  if (!iv) return FB_ERR(FB_ENOMEM, "sim device: out of host memory for comm intervals");
  s->iv = iv;
  s->cap = cap;
  return FB_OK;
}

/* Adds [a, b), merging with neighbours so the list stays sorted and disjoint. */
static void iv_add(sim_dev *s, double a, double b) {
  if (!(b > a)) return;
  if (iv_reserve(s) != FB_OK) return; /* without memory we only lose the overlap slowdown */
  sim_busy *v = s->iv + s->lo;
  size_t pos = s->n;
  while (pos > 0 && v[pos - 1].a > a) pos--;
  memmove(v + pos + 1, v + pos, (s->n - pos) * sizeof *v);
  v[pos] = (sim_busy){a, b};
  s->n++;
  /* merge with the left neighbour, then swallow right neighbours */
  if (pos > 0 && v[pos - 1].b >= v[pos].a) {
    v[pos - 1].b = fmax(v[pos - 1].b, v[pos].b);
    memmove(v + pos, v + pos + 1, (s->n - pos - 1) * sizeof *v);
    s->n--;
    pos--;
  }
  while (pos + 1 < s->n && v[pos + 1].a <= v[pos].b) {
    v[pos].b = fmax(v[pos].b, v[pos + 1].b);
    memmove(v + pos + 1, v + pos + 2, (s->n - pos - 2) * sizeof *v);
    s->n--;
  }
}

/* Drops intervals every compute stream has passed. */
static void iv_prune(sim_dev *s) {
  double frontier = INFINITY;
  for (fb_stream *st = s->streams; st; st = st->next)
    if (st->kind == FB_STREAM_COMPUTE && st->clock < frontier) frontier = st->clock;
  while (s->n > 0 && s->iv[s->lo].b <= frontier) {
    s->lo++;
    s->n--;
  }
  if (s->n == 0) s->lo = 0;
}

/* End time of `work` seconds of compute starting at t0, slowed inside busy intervals. */
static double stretch(const sim_dev *s, double t0, double work, double slow) {
  double cur = t0, rem = work;
  const sim_busy *v = s->iv + s->lo;
  for (size_t i = 0; i < s->n; i++) {
    if (v[i].b <= cur) continue;
    if (v[i].a > cur) {
      double gap = v[i].a - cur;
      if (rem <= gap) return cur + rem;
      rem -= gap;
      cur = v[i].a;
    }
    double span = (v[i].b - cur) / slow; /* work that fits in the busy part */
    if (rem <= span) return cur + rem * slow;
    rem -= span;
    cur = v[i].b;
  }
  return cur + rem;
}

/* ---- ops ---------------------------------------------------------------------------------- */

static void sim_account(fb_device *d, fb_stream *st, const fb_op_cost *c) {
  sim_dev *s = S(d);
  assert(st && c);
  double dur = fb_cost_seconds(d->hw, c, d->world);
  assert(dur >= 0 && isfinite(dur));
  double t0 = ready(d, st), t1;
  if (st->kind == FB_STREAM_COMM) {
    t1 = t0 + dur;
    iv_add(s, t0, t1);
  } else {
    if (s->n > 0 && s->iv[s->lo].b <= t0) iv_prune(s);
    t1 = (s->n > 0 && d->hw->overlap_slowdown > 1) ? stretch(s, t0, dur, d->hw->overlap_slowdown)
                                                   : t0 + dur;
  }
  st->clock = t1;
}

static fb_status sim_init(fb_device *d) {
  if (!d->hw)
    return FB_ERR(FB_EUSAGE, "the sim device needs a hardware profile (--hardware NAME, see "
                  "models/hardware/)");
  sim_dev *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "sim device: out of host memory");
  s->next_addr = (uintptr_t)1 << 20;
  d->impl = s;
  d->simulated = true;
  return FB_OK;
}

static void sim_fini(fb_device *d) {
  sim_dev *s = S(d);
  if (!s) return;
  for (fb_stream *st = s->streams, *nx; st; st = nx) {
    nx = st->next;
    free(st);
  }
  free(s->iv);
  free(s);
  d->impl = NULL;
}

static fb_status sim_alloc(fb_device *d, size_t bytes, fb_mem_cat cat, void **out) {
  sim_dev *s = S(d);
  size_t step = (bytes + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
  if (step == 0) step = SIM_ALIGN;
  if (s->next_addr > UINTPTR_MAX - step - SIM_ALIGN)
    s->next_addr = (uintptr_t)1 << 20; /* wrap: tokens only need to be distinct while live */
  *out = (void *)s->next_addr;
  s->next_addr += step + SIM_ALIGN; /* a gap keeps neighbours distinct even for p + bytes */
  return FB_OK;
}

static void sim_free(fb_device *d, void *p, size_t bytes, fb_mem_cat cat, fb_stream *st) {}

static fb_status mem_op(fb_device *d, fb_stream *st, const char *name, double bytes) {
  fb_op_cost c = {.name = name, .kind = FB_OP_MEM, .dtype = FB_F32, .bytes = bytes};
  sim_account(d, st, &c);
  return FB_OK;
}

static fb_status sim_memset0(fb_device *d, fb_stream *st, void *dst, size_t bytes) {
  return mem_op(d, st, "memset0", (double)bytes);
}
static fb_status sim_copy_d2d(fb_device *d, fb_stream *st, void *dst, const void *src,
                              size_t bytes) {
  return mem_op(d, st, "copy_d2d", 2.0 * (double)bytes);
}
static fb_status sim_copy_h2d(fb_device *d, fb_stream *st, void *dst, const void *src,
                              size_t bytes) {
  return mem_op(d, st, "copy_h2d", (double)bytes);
}
static fb_status sim_copy_d2h(fb_device *d, fb_stream *st, void *dst, const void *src,
                              size_t bytes) {
  mem_op(d, st, "copy_d2h", (double)bytes);
  host_wait(d, st->clock); /* returns once dst holds the data: the host waits for st */
  return FB_OK;
}

static fb_status sim_stream_create(fb_device *d, fb_stream_kind kind, fb_stream **out) {
  sim_dev *s = S(d);
  fb_stream *st = calloc(1, sizeof *st);
  if (!st) return FB_ERR(FB_ENOMEM, "sim device: out of host memory for a stream");
  st->kind = kind;
  st->clock = host_time(d); /* a new stream starts idle at the host's time */
  st->next = s->streams;
  s->streams = st;
  if (kind == FB_STREAM_COMPUTE) {
    s->ncompute++;
    if (!s->compute) s->compute = st;
  }
  *out = st;
  return FB_OK;
}

static void sim_stream_destroy(fb_device *d, fb_stream *st) {
  sim_dev *s = S(d);
  if (!st) return;
  for (fb_stream **pp = &s->streams; *pp; pp = &(*pp)->next) {
    if (*pp == st) {
      *pp = st->next;
      break;
    }
  }
  if (st->kind == FB_STREAM_COMPUTE) {
    s->ncompute--;
    if (s->compute == st) {
      s->compute = NULL;
      for (fb_stream *o = s->streams; o; o = o->next)
        if (o->kind == FB_STREAM_COMPUTE) s->compute = o; /* the oldest remaining one */
    }
  }
  if (st->clock > s->host) s->host = st->clock; /* destroying drains the stream */
  free(st);
}

static fb_status sim_stream_sync(fb_device *d, fb_stream *st) {
  host_wait(d, st->clock);
  return FB_OK;
}

static fb_status sim_event_create(fb_device *d, fb_event **out) {
  fb_event *e = calloc(1, sizeof *e);
  if (!e) return FB_ERR(FB_ENOMEM, "sim device: out of host memory for an event");
  *out = e;
  return FB_OK;
}

static void sim_event_destroy(fb_device *d, fb_event *e) { free(e); }

static fb_status sim_event_record(fb_device *d, fb_event *e, fb_stream *st) {
  e->t = ready(d, st);
  return FB_OK;
}

static fb_status sim_stream_wait(fb_device *d, fb_stream *st, fb_event *e) {
  if (e->t > st->clock) st->clock = e->t;
  return FB_OK;
}

static fb_status sim_event_sync(fb_device *d, fb_event *e) {
  host_wait(d, e->t);
  return FB_OK;
}

static fb_status sim_host_task(fb_device *d, fb_stream *st, fb_status (*fn)(void *arg),
                               void *arg) {
  return fn(arg);
}

static double sim_now(fb_device *d) {
  sim_dev *s = S(d);
  double h = host_time(d);
  return s->compute ? fmax(s->compute->clock, h) : h;
}

static uint64_t sim_mark(fb_device *d, fb_stream *st) {
  double t = ready(d, st);
  uint64_t bits;
  memcpy(&bits, &t, sizeof bits);
  assert(!(bits & SIM_TICKET_BIT)); /* times are >= 0 */
  return bits | SIM_TICKET_BIT;     /* never 0, even at t = 0 */
}

static double sim_mark_time(fb_device *d, uint64_t ticket) {
  assert(ticket & SIM_TICKET_BIT);
  uint64_t bits = ticket & ~SIM_TICKET_BIT;
  double t;
  memcpy(&t, &bits, sizeof t);
  return t;
}

static void sim_marks_reset(fb_device *d) {}

static const fb_kernels sim_kernels; /* every entry NULL: sim runs no kernel */

const fb_device_ops fb_sim_device_ops = {
    .name = "sim",
    .init = sim_init,
    .fini = sim_fini,
    .alloc = sim_alloc,
    .free = sim_free,
    .memset0 = sim_memset0,
    .copy_d2d = sim_copy_d2d,
    .copy_h2d = sim_copy_h2d,
    .copy_d2h = sim_copy_d2h,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_sync = sim_stream_sync,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .stream_wait = sim_stream_wait,
    .event_sync = sim_event_sync,
    .host_task = sim_host_task,
    .now = sim_now,
    .mark = sim_mark,
    .mark_time = sim_mark_time,
    .marks_reset = sim_marks_reset,
    .account = sim_account,
    .kernels = &sim_kernels,
};
