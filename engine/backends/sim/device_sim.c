/* The sim device: no memory and no math. Streams are virtual clocks (seconds), events hold a
 * time, every op advances its stream by the cost model's duration (engine/sim/cost_model.h).
 *  - The host has a clock too. Issuing an op costs the host hw->host_op_s; host work
 *    (fb_host_work: a framework's hooks) advances it; host waits (event/stream syncs, device
 *    copies) move it to the awaited time. An op starts at max(stream clock, the host time at
 *    which it was issued). When the profile says the host thread is the compute stream (cpu
 *    executor, host_runs_ahead false) the host time is also at least the compute stream's
 *    clock, and host work is not modelled (the executor's own host has no framework hooks).
 *  - Compute ops that overlap busy intervals of a comm stream (comm is issued ahead, so its
 *    intervals are known when compute is accounted) run slower over the overlapped part: on a
 *    GPU profile with nccl_contention, by their own cost on the SMs and HBM bandwidth NCCL's
 *    kernel leaves (engine/sim/contention.h), else hw->overlap_slowdown times. Comm issued
 *    after a compute op does not slow it (documented limit).
 *  - Compute ops of a world of N ranks take fb_straggler_factor(hw, N) times their cost: every
 *    collective waits for the slowest rank (rank_speed_sigma; 1 without it).
 *  - Ranks whose compute between meeting points varies afresh each interval (rank_jitter: a
 *    CPU the ranks share with the OS) drift apart by that compute times the jitter; a
 *    collective waits for the latest rank: it lasts E[max of N normals] * rank_jitter * the
 *    compute issued since the ranks last met, less what earlier collectives already waited.
 *    They meet where a compute stream (or the host) actually waits for a collective's end, and
 *    at a collective on a compute stream. The wait is part of the collective, as a trace of
 *    the executed run shows it (a rank's collective spans its wait for its peers).
 *  - Allocations return distinct opaque tokens (increasing addresses, never dereferenced);
 *    fb_alloc in device.c does the counting, exactly as on cpu. On a profile whose host runs
 *    ahead (a GPU), every allocation and free is also replayed on a model of PyTorch's CUDA
 *    caching allocator (engine/sim/caching_allocator.h): reserved memory, cudaMalloc of new
 *    segments (host time hw->cuda_malloc_s) and, near capacity, retries that cost a
 *    device-wide sync plus cudaFree of every cached segment (the host loses its run-ahead).
 *  - Marks carry their time in the ticket itself, so nothing grows with the number of ops. A
 *    mark taken right after an op on its stream stamps that op's end; any other mark stamps
 *    when an op issued now would start (after the host's dispatch time).
 * Host work, host waits and allocator calls are recorded as spans on the recorder's "host"
 * track. It does not record ops (the kernel / collective wrappers do) and holds no data. */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../device/recorder.h"
#include "../../sim/caching_allocator.h"
#include "../../sim/contention.h"
#include "../../sim/cost_model.h"
#include "../../sim/hardware.h"
#include "../../device/device.h"
#include "../../device/kernels.h"

/* Host time of a cudaMalloc of a new segment and of a cudaFree, when the profile leaves
 * cuda_malloc_us / cuda_free_us out. ESTIMATES, not measurements: a cudaMalloc costs about
 * 50 us up to 512 KB and more above (University of Virginia, "CUDA memory management
 * overhead", cs.virginia.edu/~mwb7w/cuda_support/memory_management_overhead.html, an older
 * GPU); a whole cache freed and re-allocated costs ~14 ms per cycle in a PyTorch forum report
 * (discuss.pytorch.org/t/about-torch-cuda-empty-cache/34232: +100 s over ~7000 batches), a few
 * hundred us per segment for some tens of segments. The device-wide sync a cudaFree implies
 * (pytorch PR #19222: "cudaFree ... waits for all operations on the GPU to finish") is not in
 * these figures: the timeline models it. */
#define SIM_CUDA_MALLOC_EST_S 300e-6
#define SIM_CUDA_FREE_EST_S 300e-6

struct fb_stream {
  double clock;          /* time at which the last issued op ends */
  fb_stream_kind kind;
  int id;                /* creation index: the caching allocator's pool of this stream */
  bool after_op;         /* the last call on it accounted an op: the next mark is its end */
  struct fb_stream *next;
};

struct fb_event {
  double t;
  bool comm; /* recorded on a comm stream: waiting for it can make the ranks meet */
};

typedef struct sim_busy {
  double a, b;
} sim_busy;

typedef struct sim_dev {
  fb_stream *streams;    /* all streams of the device */
  fb_stream *compute;    /* primary compute stream: the host's program point */
  int ncompute, next_id;
  double host;           /* the host's clock: issue, host work, waits */
  bool host_model;       /* the host runs ahead of the device (GPU profile) */
  uintptr_t next_addr;   /* next allocation token */
  fb_cca *cca;           /* caching-allocator model, NULL when not modelled */
  double straggle;       /* compute factor for the slowest of the world's ranks (>= 1) */
  double jitter;         /* rank_jitter * E[max of N normals]: a collective's wait per second
                            of compute since the ranks last met (0: off) */
  double drift, waited;  /* compute seconds issued since the ranks met; collectives' waits since */
  fb_hardware *cont;     /* the profile beside a resident collective (contention.h), or NULL */
  fb_dev_model m;        /* counters behind model_stats */
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

static void span(fb_device *d, const char *name, double t0, double t1) {
  if (d->rec && t1 > t0) fb_recorder_span(d->rec, name, t0, t1);
}

typedef enum wait_kind { WAIT_UNCOUNTED, WAIT_EVENT, WAIT_DRAIN } wait_kind;

/* The host waits until t: an event sync (a strategy's stall), a drain (stream sync, device
 * copy: the host waits for the device to finish) or a wait its caller counts itself. */
static void host_wait(fb_device *d, double t, wait_kind k, const char *name) {
  sim_dev *s = S(d);
  const double h0 = host_time(d);
  if (t > s->host) s->host = t;
  if (s->compute && t > s->compute->clock) s->compute->clock = t;
  if (!s->host_model || k == WAIT_UNCOUNTED || !(t > h0)) return;
  if (k == WAIT_EVENT) s->m.host_wait_s += t - h0;
  else s->m.host_drain_s += t - h0;
  span(d, name, h0, t);
}

/* The host issues one op: its dispatch time passes first. Returns the issue time. */
static double issue(fb_device *d) {
  sim_dev *s = S(d);
  const double h = host_time(d) + d->hw->host_op_s;
  s->host = h;
  if (s->host_model) s->m.host_busy_s += d->hw->host_op_s;
  return h;
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

/* ---- ranks drifting apart (rank_jitter) ------------------------------------------------- */

/* The wait a collective issued now adds for the latest rank (file comment). */
static double drift_wait(sim_dev *s) {
  const double owed = s->jitter * s->drift - s->waited;
  if (!(owed > 0)) return 0;
  s->waited += owed;
  return owed;
}

/* The ranks meet when a wait for a collective binds (it ends after the waiter's clock). */
static void meet(sim_dev *s, bool on_comm, double t, double clock) {
  if (on_comm && t > clock) s->drift = s->waited = 0;
}

/* The clock a host wait is measured against: the host's, or the compute stream's if later. */
static double host_side_clock(fb_device *d) {
  const sim_dev *s = S(d);
  return s->compute ? fmax(s->compute->clock, host_time(d)) : host_time(d);
}

/* ---- ops ---------------------------------------------------------------------------------- */

static void sim_account(fb_device *d, fb_stream *st, const fb_op_cost *c) {
  sim_dev *s = S(d);
  assert(st && c);
  double dur = fb_cost_seconds(d->hw, c, d->world);
  assert(dur >= 0 && isfinite(dur));
  double t0 = fmax(st->clock, issue(d)), t1;
  if (c->kind == FB_OP_COLL) dur += drift_wait(s);
  if (st->kind == FB_STREAM_COMM) {
    t1 = t0 + dur;
    iv_add(s, t0, t1);
  } else {
    if (s->n > 0 && s->iv[s->lo].b <= t0) iv_prune(s);
    if (c->kind == FB_OP_COLL) { /* a collective waits for no one more; the ranks meet in it */
      s->drift = s->waited = 0;
    } else {
      dur *= s->straggle;
      s->drift += dur;
    }
    const double slow =
        s->n > 0 ? fb_contention_slowdown_on(d->hw, s->cont ? s->cont : d->hw, c, d->world) : 1.0;
    t1 = slow > 1 ? stretch(s, t0, dur, slow) : t0 + dur;
  }
  st->clock = t1;
  st->after_op = true;
}

static void sim_host_work(fb_device *d, double seconds, const char *name) {
  sim_dev *s = S(d);
  if (!s->host_model || !(seconds > 0)) return;
  const double h0 = host_time(d);
  s->host = h0 + seconds;
  s->m.host_busy_s += seconds;
  s->m.host_work_s += seconds;
  span(d, name ? name : "host_work", h0, s->host);
}

static double malloc_s(const fb_device *d) {
  return d->hw->cuda_malloc_s > 0 ? d->hw->cuda_malloc_s : SIM_CUDA_MALLOC_EST_S;
}
static double free_s(const fb_device *d) {
  return d->hw->cuda_free_s > 0 ? d->hw->cuda_free_s : SIM_CUDA_FREE_EST_S;
}

/* Replays one allocation on the caching-allocator model and charges the host its device
 * calls: a cudaMalloc per new segment; on a retry, a device-wide sync (cudaFree waits for
 * every stream), a cudaFree per released segment and the cudaMalloc again. */
static fb_status cca_alloc(fb_device *d, fb_stream *st, uintptr_t token, size_t bytes) {
  sim_dev *s = S(d);
  fb_stream *as = st ? st : s->compute;
  const double h0 = host_time(d);
  fb_cca_malloc_info info;
  FB_TRY(fb_cca_malloc(s->cca, (uint64_t)token, (int64_t)bytes, as ? as->id : 0, h0, &info));
  if (info.retried) {
    double all = h0;
    for (fb_stream *o = s->streams; o; o = o->next) all = fmax(all, o->clock);
    host_wait(d, all, WAIT_UNCOUNTED, NULL);
    s->host += info.released * free_s(d) + malloc_s(d);
    s->m.retry_s += s->host - h0;
    span(d, info.oom ? "cuda_malloc_retry (oom)" : "cuda_malloc_retry", h0, s->host);
  } else if (info.segment > 0) {
    s->host = h0 + malloc_s(d);
    s->m.alloc_s += malloc_s(d);
    span(d, "cudaMalloc", h0, s->host);
  }
  return FB_OK;
}

static bool sim_model_stats(fb_device *d, fb_dev_model *out) {
  sim_dev *s = S(d);
  *out = s->m;
  out->host_model = s->host_model;
  out->alloc_model = s->cca != NULL;
  if (s->cca) {
    fb_cca_stats c;
    fb_cca_get_stats(s->cca, &c);
    out->reserved = c.reserved;
    out->reserved_peak = c.reserved_peak;
    out->reserved_at_alloc_peak = c.reserved_at_allocated_peak;
    out->alloc_at_reserved_peak = c.allocated_at_reserved_peak;
    out->held_at_reserved_peak = c.active_at_reserved_peak - c.allocated_at_reserved_peak;
    out->side_at_reserved_peak = c.side_at_reserved_peak; /* compute: the first stream, id 0 */
    out->segments_peak = c.segments_peak;
    out->device_allocs = c.num_device_alloc;
    out->device_frees = c.num_device_free;
    out->alloc_retries = c.num_alloc_retries;
    out->ooms = c.num_ooms;
  }
  return s->host_model || s->cca;
}

static fb_status sim_init(fb_device *d) {
  if (!d->hw)
    return FB_ERR(FB_EUSAGE, "the sim device needs a hardware profile (--hardware NAME, see "
                  "models/hardware/)");
  sim_dev *s = calloc(1, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "sim device: out of host memory");
  s->next_addr = (uintptr_t)1 << 20;
  s->host_model = d->hw->host_runs_ahead;
  s->straggle = fb_straggler_factor(d->hw, d->world);
  if (d->hw->rank_jitter > 0 && d->world > 1)
    s->jitter = d->hw->rank_jitter * fb_expected_max_normal(d->world);
  if (d->hw->nccl_contention && d->hw->sm_count > 0) {
    s->cont = malloc(sizeof *s->cont);
    if (!s->cont) {
      free(s);
      d->impl = NULL;
      return FB_ERR(FB_ENOMEM, "sim device: out of host memory");
    }
    fb_contention_profile(d->hw, d->world, s->cont);
  }
  d->impl = s;
  d->simulated = true;
  if (s->host_model) { /* a GPU host: model PyTorch's caching allocator too */
    int64_t cap = d->hw->mem_capacity;
    if (d->mem_limit > 0 && d->mem_limit < cap) cap = d->mem_limit;
    fb_status st = fb_cca_create(cap > 0 ? cap : INT64_MAX / 4, &s->cca);
    if (st != FB_OK) {
      free(s->cont);
      free(s);
      d->impl = NULL;
      return st;
    }
  }
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
  free(s->cont);
  fb_cca_destroy(s->cca);
  free(s);
  d->impl = NULL;
}

static fb_status sim_alloc(fb_device *d, fb_stream *st, size_t bytes, fb_mem_cat cat,
                           void **out) {
  sim_dev *s = S(d);
  size_t step = (bytes + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
  if (step == 0) step = SIM_ALIGN;
  if (s->next_addr > UINTPTR_MAX - step - SIM_ALIGN)
    s->next_addr = (uintptr_t)1 << 20; /* wrap: tokens only need to be distinct while live */
  const uintptr_t token = s->next_addr;
  if (s->cca && bytes > 0) FB_TRY(cca_alloc(d, st, token, bytes));
  *out = (void *)token;
  s->next_addr += step + SIM_ALIGN; /* a gap keeps neighbours distinct even for p + bytes */
  return FB_OK;
}

/* A free after stream `st` other than the block's own is record_stream: the block waits for
 * the event recorded on `st` now (its time is when st reaches this point). */
static void sim_free(fb_device *d, void *p, size_t bytes, fb_mem_cat cat, fb_stream *st) {
  sim_dev *s = S(d);
  if (!s->cca || !p) return;
  fb_cca_free(s->cca, (uint64_t)(uintptr_t)p, st ? st->id : -1, st ? ready(d, st) : 0);
}

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
  host_wait(d, st->clock, WAIT_DRAIN, "copy_d2h"); /* returns once dst holds the data: the host waits */
  return FB_OK;
}

static fb_status sim_stream_create(fb_device *d, fb_stream_kind kind, fb_stream **out) {
  sim_dev *s = S(d);
  fb_stream *st = calloc(1, sizeof *st);
  if (!st) return FB_ERR(FB_ENOMEM, "sim device: out of host memory for a stream");
  st->kind = kind;
  st->id = s->next_id++;
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
  meet(S(d), st->kind == FB_STREAM_COMM, st->clock, host_side_clock(d));
  host_wait(d, st->clock, WAIT_DRAIN, "stream_sync");
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
  e->comm = st->kind == FB_STREAM_COMM;
  return FB_OK;
}

static fb_status sim_stream_wait(fb_device *d, fb_stream *st, fb_event *e) {
  if (st->kind != FB_STREAM_COMM) meet(S(d), e->comm, e->t, st->clock);
  if (e->t > st->clock) st->clock = e->t;
  return FB_OK;
}

static fb_status sim_event_sync(fb_device *d, fb_event *e) {
  meet(S(d), e->comm, e->t, host_side_clock(d));
  host_wait(d, e->t, WAIT_EVENT, "event_sync");
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
  /* after an op: its end; otherwise when an op issued now would start */
  double t = st->after_op ? ready(d, st) : fmax(st->clock, host_time(d) + d->hw->host_op_s);
  st->after_op = false;
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
    .host_work = sim_host_work,
    .model_stats = sim_model_stats,
    .kernels = &sim_kernels,
};
