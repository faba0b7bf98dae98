/* The per-rank recorder (recorder.h): collects ops with their device timing tickets, host-side
 * spans and memory events; at each step end it resolves the tickets through the device, turns
 * the step's intervals into statistics (compute / comm unions, exposed communication, FLOPs,
 * the collective ledger) and keeps the events of traced steps for the Chrome trace.
 * It does not format anything and does not know about files.
 *
 * Conventions:
 *  - A track whose name starts with "compute" counts as compute, one starting with "comm" as
 *    communication; any other track (e.g. the "host" track of spans) counts as neither.
 *  - Spans (fb_recorder_span) go to a track of their own named "host", created on first use,
 *    so they never break the nesting of the device tracks; they are kept with
 *    kind == FB_OP_NKIND and never enter the statistics.
 *  - Ops recorded outside a step (before the first step_begin, or after a step_end) carry
 *    step -1: their tickets are resolved at the next step end, they are not counted and not
 *    traced.
 *  - Memory events are kept all (cfg.mem_timeline) or only inside traced steps; in the latter
 *    case each traced step opens with one "baseline" event per non-empty category (delta 0,
 *    id -1) so counters start from the right level. The recorder keeps its own copy of the
 *    last accounting it was given, so it never reads the device's stats without its lock.
 *  - Lock order: the device's allocator lock, then the recorder's (fb_alloc calls in).
 *  - Stream order: an event record remembers the last op issued on its stream; a stream wait
 *    on that event makes the stream's next op point back to it (fb_rec_op.wait) when it is a
 *    collective. Both tables are per step: cleared at each step end.
 *  - A device that models the host and the caching allocator (sim on a GPU profile) is asked
 *    for its counters at each step begin and end: the step's stats get the differences, the
 *    recorder keeps the last counters (peaks) for the report. */
#include "recorder.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/grow.h"

#define FB_REC_MAX_STREAMS 16
#define FB_REC_NAME 32

typedef struct rec_track {
  fb_stream *s;     /* NULL for the host span track */
  char name[FB_REC_NAME];
  bool compute, comm;
  int64_t last;     /* pending index of the last op issued on it this step, -1 none */
  int64_t wait_src; /* pending index of the collective its next op waits for, -1 none */
} rec_track;

typedef struct rec_event {
  const void *event;
  int64_t src;      /* pending index of the op it marks, -1 none */
} rec_event;

typedef struct rec_pending {
  fb_rec_op op;
  uint64_t k0, k1;
  bool resolved;    /* spans: times already in op.t0/op.t1 */
  int world;        /* collectives: the op's world */
  int nodes;        /* collectives: the nodes its group spans */
  int64_t count;
  fb_dtype dtype;
} rec_pending;

struct fb_recorder {
  fb_device *dev;   /* not used by the accessors: the recorder may outlive its device */
  int rank;
  fb_rec_config cfg;
  pthread_mutex_t mu;
  rec_track tracks[FB_REC_MAX_STREAMS];
  int ntracks;
  int host_track;   /* -1 until the first span */
  rec_pending *pend;
  int64_t npend, cappend;
  fb_rec_op *ops;
  int64_t nops, capops;
  fb_rec_mem *mems;
  int64_t nmems, capmems;
  int64_t mem_open;     /* first kept alloc that waits for the next op to name it */
  const char *last_op;  /* the op issued last (name, unit), for frees */
  int last_unit;
  int64_t cur[FB_MEM_NCAT], cur_total; /* last accounting seen by fb_recorder_mem */
  int step, micro;  /* step -1 outside steps */
  double step_t0;
  fb_dev_model m0, last; /* device model counters at step begin, at the last step end */
  bool have_m0, have_last;
  fb_rec_phase phase;
  rec_event *evs;   /* events recorded this step */
  int64_t nevs, capevs;
  double clock_dev; /* device time and CLOCK_REALTIME ns read together at creation */
  int64_t clock_real_ns;
  /* scratch for the interval unions and for renumbering kept ops */
  double (*iv)[2];
  int64_t capiv;
  int64_t *remap;
  int64_t capremap;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static bool grow(void **p, int64_t *cap, int64_t need, size_t elt) {
  return fb_grow(p, cap, need, elt, 64);
}

static bool step_traced(const fb_rec_config *c, int step) {
  if (!c->trace || step < 0) return false;
  int first = (c->trace_wait > 0 ? c->trace_wait : 0) + (c->trace_warmup > 0 ? c->trace_warmup : 0);
  if (step < first) return false;
  return c->trace_active <= 0 || step < first + c->trace_active;
}

static int cmp_iv(const void *a, const void *b) {
  const double *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Measure of the union of n intervals (sorted in place). */
static double union_measure(double (*iv)[2], int64_t n) {
  if (n == 0) return 0;
  qsort(iv, (size_t)n, sizeof iv[0], cmp_iv);
  double total = 0, lo = iv[0][0], hi = iv[0][1];
  for (int64_t i = 1; i < n; i++) {
    if (iv[i][0] > hi) {
      total += hi - lo;
      lo = iv[i][0];
      hi = iv[i][1];
    } else if (iv[i][1] > hi) {
      hi = iv[i][1];
    }
  }
  return total + (hi - lo);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

fb_status fb_recorder_create(fb_device *dev, const fb_rec_config *cfg, fb_recorder **out) {
  assert(dev && out);
  fb_recorder *r = calloc(1, sizeof *r);
  if (!r) return FB_ERR(FB_ENOMEM, "recorder: out of host memory");
  if (pthread_mutex_init(&r->mu, NULL) != 0) {
    free(r);
    return FB_ERR(FB_EINTERNAL, "recorder: pthread_mutex_init failed");
  }
  r->dev = dev;
  r->rank = dev->rank;
  if (cfg) r->cfg = *cfg;
  r->host_track = -1;
  r->step = -1;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r->clock_dev = fb_now(dev);
  r->clock_real_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  *out = r;
  return FB_OK;
}

void fb_recorder_destroy(fb_recorder *r) {
  if (!r) return;
  pthread_mutex_destroy(&r->mu);
  free(r->pend);
  free(r->ops);
  free(r->mems);
  free(r->iv);
  free(r->evs);
  free(r->remap);
  free(r);
}

/* ---- tracks ------------------------------------------------------------------------------- */

static int add_track_locked(fb_recorder *r, fb_stream *s, const char *name) {
  assert(r->ntracks < FB_REC_MAX_STREAMS && "too many recorder tracks");
  rec_track *t = &r->tracks[r->ntracks];
  t->s = s;
  snprintf(t->name, sizeof t->name, "%s", name ? name : "stream");
  t->compute = !strncmp(t->name, "compute", 7);
  t->comm = !strncmp(t->name, "comm", 4);
  t->last = t->wait_src = -1;
  return r->ntracks++;
}

static int find_track_locked(fb_recorder *r, fb_stream *s) {
  for (int i = 0; i < r->ntracks; i++)
    if (r->tracks[i].s == s && i != r->host_track) return i;
  return -1;
}

int fb_recorder_stream(fb_recorder *r, fb_stream *s, const char *name) {
  pthread_mutex_lock(&r->mu);
  int id = find_track_locked(r, s);
  if (id < 0) id = add_track_locked(r, s, name);
  pthread_mutex_unlock(&r->mu);
  return id;
}

/* ---- events ------------------------------------------------------------------------------- */

void fb_recorder_op(fb_recorder *r, fb_stream *s, const fb_op_cost *c, int unit, uint64_t t0,
                    uint64_t t1) {
  assert(r && c);
  pthread_mutex_lock(&r->mu);
  int id = find_track_locked(r, s);
  if (id < 0) {
    char nm[FB_REC_NAME];
    snprintf(nm, sizeof nm, "stream%d", r->ntracks);
    id = add_track_locked(r, s, nm);
  }
  bool ok = grow((void **)&r->pend, &r->cappend, r->npend + 1, sizeof *r->pend);
  assert(ok && "recorder: out of host memory");
  (void)ok;
  rec_pending *p = &r->pend[r->npend++];
  memset(p, 0, sizeof *p);
  p->op = (fb_rec_op){.name = c->name ? c->name : "op", .stream = id, .unit = unit,
                      .step = r->step, .micro = r->micro, .kind = c->kind, .coll = c->coll,
                      .bytes = c->bytes, .flops = c->flops,
                      .size = c->kind == FB_OP_GEMM || c->kind == FB_OP_ATTN ? fb_op_gemm_size(c)
                                                                              : 0,
                      .m = c->m, .n = c->n, .k = c->k, .batch = c->batch, .dtype = c->dtype,
                      .param = c->param, .phase = r->phase, .wait = r->tracks[id].wait_src};
  r->tracks[id].wait_src = -1;
  r->tracks[id].last = r->npend - 1;
  for (int64_t i = r->mem_open; i < r->nmems; i++) /* allocs made for this op */
    if (r->mems[i].delta > 0 && !r->mems[i].op) {
      r->mems[i].op = p->op.name;
      r->mems[i].unit = unit;
    }
  r->mem_open = r->nmems;
  r->last_op = p->op.name;
  r->last_unit = unit;
  p->k0 = t0;
  p->k1 = t1;
  p->world = c->world;
  p->nodes = c->nodes;
  p->count = c->count;
  p->dtype = c->dtype;
  pthread_mutex_unlock(&r->mu);
}

void fb_recorder_span(fb_recorder *r, const char *name, double t0, double t1) {
  pthread_mutex_lock(&r->mu);
  if (r->host_track < 0) r->host_track = add_track_locked(r, NULL, "host");
  bool ok = grow((void **)&r->pend, &r->cappend, r->npend + 1, sizeof *r->pend);
  assert(ok && "recorder: out of host memory");
  (void)ok;
  rec_pending *p = &r->pend[r->npend++];
  memset(p, 0, sizeof *p);
  p->op = (fb_rec_op){.t0 = t0, .t1 = t1 < t0 ? t0 : t1, .name = name ? name : "span",
                      .stream = r->host_track, .unit = -1, .step = r->step, .micro = r->micro,
                      .kind = FB_OP_NKIND, .coll = FB_NCOLL, .phase = r->phase, .wait = -1};
  p->resolved = true;
  pthread_mutex_unlock(&r->mu);
}

static void push_mem_locked(fb_recorder *r, const fb_rec_mem *m) {
  bool ok = grow((void **)&r->mems, &r->capmems, r->nmems + 1, sizeof *r->mems);
  assert(ok && "recorder: out of host memory");
  (void)ok;
  r->mems[r->nmems++] = *m;
}

void fb_recorder_mem(fb_recorder *r, double t, const fb_buf *b, int64_t delta,
                     const fb_mem_stats *after) {
  assert(r && b && after);
  pthread_mutex_lock(&r->mu);
  memcpy(r->cur, after->cur, sizeof r->cur);
  r->cur_total = after->cur_total;
  if (r->cfg.mem_timeline || step_traced(&r->cfg, r->step)) {
    fb_rec_mem m = {.t = t, .id = b->id, .delta = delta, .cat = b->cat,
                    .label = b->label ? b->label : fb_mem_cat_name(b->cat),
                    .total_after = after->cur_total, .cat_after = after->cur[b->cat],
                    .step = r->step, .op = delta < 0 ? r->last_op : NULL,
                    .unit = delta < 0 && r->last_op ? r->last_unit : -1};
    push_mem_locked(r, &m);
  }
  pthread_mutex_unlock(&r->mu);
}

/* ---- steps -------------------------------------------------------------------------------- */

static bool model_of(fb_device *d, fb_dev_model *m) {
  memset(m, 0, sizeof *m);
  return d->ops->model_stats && d->ops->model_stats(d, m);
}

void fb_recorder_step_begin(fb_recorder *r, int step, int micro) {
  double now = fb_now(r->dev);
  fb_dev_model dm;
  bool have = model_of(r->dev, &dm);
  pthread_mutex_lock(&r->mu);
  r->m0 = dm;
  r->have_m0 = have;
  r->step = step;
  r->micro = micro;
  r->step_t0 = now;
  if (!r->cfg.mem_timeline && step_traced(&r->cfg, step)) {
    for (int c = 0; c < FB_MEM_NCAT; c++) {
      if (r->cur[c] == 0) continue;
      fb_rec_mem m = {.t = now, .id = -1, .delta = 0, .cat = (fb_mem_cat)c, .label = "baseline",
                      .total_after = r->cur_total, .cat_after = r->cur[c], .step = step,
                      .unit = -1};
      push_mem_locked(r, &m);
    }
  }
  pthread_mutex_unlock(&r->mu);
}

void fb_recorder_micro(fb_recorder *r, int micro) {
  pthread_mutex_lock(&r->mu);
  r->micro = micro;
  pthread_mutex_unlock(&r->mu);
}

void fb_recorder_phase(fb_recorder *r, fb_rec_phase phase) {
  assert(phase >= FB_PHASE_NONE && phase < FB_PHASE_N);
  pthread_mutex_lock(&r->mu);
  r->phase = phase;
  pthread_mutex_unlock(&r->mu);
}

const char *fb_rec_phase_name(fb_rec_phase p) {
  static const char *const name[FB_PHASE_N] = {[FB_PHASE_NONE] = "",
                                               [FB_PHASE_FORWARD] = "forward",
                                               [FB_PHASE_BACKWARD] = "backward",
                                               [FB_PHASE_OPTIMIZER] = "optimizer"};
  return p >= 0 && p < FB_PHASE_N ? name[p] : "";
}

static rec_event *find_event_locked(fb_recorder *r, const void *event) {
  for (int64_t i = r->nevs - 1; i >= 0; i--)
    if (r->evs[i].event == event) return &r->evs[i];
  return NULL;
}

void fb_recorder_event_record(fb_recorder *r, const void *event, fb_stream *s) {
  pthread_mutex_lock(&r->mu);
  int id = find_track_locked(r, s);
  rec_event *e = find_event_locked(r, event);
  if (!e && grow((void **)&r->evs, &r->capevs, r->nevs + 1, sizeof *r->evs)) {
    e = &r->evs[r->nevs++];
    e->event = event;
  }
  if (e) e->src = id >= 0 ? r->tracks[id].last : -1; /* no room: the flow is dropped */
  pthread_mutex_unlock(&r->mu);
}

void fb_recorder_stream_wait(fb_recorder *r, fb_stream *s, const void *event) {
  pthread_mutex_lock(&r->mu);
  int id = find_track_locked(r, s);
  const rec_event *e = find_event_locked(r, event);
  if (id >= 0 && e && e->src >= 0 && r->pend[e->src].op.kind == FB_OP_COLL &&
      r->pend[e->src].op.stream != id)
    r->tracks[id].wait_src = e->src;
  pthread_mutex_unlock(&r->mu);
}

/* Collects the intervals of this step's ops on tracks of one class into r->iv. */
/* The step's intervals of compute streams and/or comm streams; `coll` >= 0 keeps only that
 * collective type of the comm streams. */
static int64_t gather_iv_coll(fb_recorder *r, int step, bool want_compute, bool want_comm,
                              int coll) {
  int64_t n = 0;
  for (int64_t i = 0; i < r->npend; i++) {
    const fb_rec_op *o = &r->pend[i].op;
    if (o->step != step || o->kind == FB_OP_NKIND) continue;
    const rec_track *t = &r->tracks[o->stream];
    bool comm_ok = want_comm && t->comm && (coll < 0 || (o->kind == FB_OP_COLL && (int)o->coll == coll));
    if (!((want_compute && t->compute) || comm_ok)) continue;
    r->iv[n][0] = o->t0;
    r->iv[n][1] = o->t1;
    n++;
  }
  return n;
}

static int64_t gather_iv(fb_recorder *r, int step, bool want_compute, bool want_comm) {
  return gather_iv_coll(r, step, want_compute, want_comm, -1);
}

/* Where the step goes: exposed time per collective type, compute-stream time per op kind. */
static void breakdown(fb_recorder *r, int step, fb_step_stats *out) {
  for (int c = 0; c < FB_NCOLL; c++) {
    if (!(out->coll_time[c] > 0)) continue;
    double both = union_measure(r->iv, gather_iv_coll(r, step, true, true, c));
    double e = both - out->compute;
    out->exposed_coll[c] = e < 0 ? 0 : e;
  }
  for (int64_t i = 0; i < r->npend; i++) {
    const fb_rec_op *o = &r->pend[i].op;
    if (o->step != step || o->kind >= FB_OP_NKIND || !r->tracks[o->stream].compute) continue;
    out->kind_time[o->kind] += o->t1 - o->t0;
  }
}

/* Appends the step's pending ops to the kept ones, their wait links renumbered to kept
 * indices (a link to an op not kept is dropped). */
static fb_status keep_traced_locked(fb_recorder *r, int step) {
  if (!grow((void **)&r->ops, &r->capops, r->nops + r->npend, sizeof *r->ops) ||
      !grow((void **)&r->remap, &r->capremap, r->npend, sizeof *r->remap))
    return FB_ERR(FB_ENOMEM, "recorder: out of host memory keeping trace events");
  for (int64_t i = 0; i < r->npend; i++) {
    r->remap[i] = -1;
    if (r->pend[i].op.step != step) continue;
    fb_rec_op *o = &r->ops[r->nops];
    *o = r->pend[i].op;
    o->wait = o->wait >= 0 && o->wait < i ? r->remap[o->wait] : -1;
    r->remap[i] = r->nops++;
  }
  return FB_OK;
}

fb_status fb_recorder_step_end(fb_recorder *r, fb_step_stats *out) {
  assert(r && out);
  fb_device *d = r->dev;
  double now = fb_now(d);
  fb_dev_model m1;
  bool have_m1 = model_of(d, &m1);
  fb_status st = FB_OK;
  pthread_mutex_lock(&r->mu);
  const int step = r->step;
  memset(out, 0, sizeof *out);
  out->step = step;
  if (have_m1) {
    const fb_dev_model *a = &r->m0; /* zero when the device had no model at step begin */
    out->host_busy = m1.host_busy_s - (r->have_m0 ? a->host_busy_s : 0);
    out->host_work = m1.host_work_s - (r->have_m0 ? a->host_work_s : 0);
    out->host_wait = m1.host_wait_s - (r->have_m0 ? a->host_wait_s : 0);
    out->host_drain = m1.host_drain_s - (r->have_m0 ? a->host_drain_s : 0);
    out->alloc_time = m1.alloc_s - (r->have_m0 ? a->alloc_s : 0);
    out->retry_time = m1.retry_s - (r->have_m0 ? a->retry_s : 0);
    out->alloc_retries = m1.alloc_retries - (r->have_m0 ? a->alloc_retries : 0);
    out->device_allocs = m1.device_allocs - (r->have_m0 ? a->device_allocs : 0);
    r->last = m1;
    r->have_last = true;
  }
  out->t_start = r->step_t0;
  double t_end = now;

  /* Resolve every ticket, then let the device forget them. */
  for (int64_t i = 0; i < r->npend; i++) {
    rec_pending *p = &r->pend[i];
    if (p->resolved) continue;
    p->op.t0 = d->ops->mark_time(d, p->k0);
    p->op.t1 = d->ops->mark_time(d, p->k1);
    if (p->op.t1 < p->op.t0) p->op.t1 = p->op.t0;
    p->resolved = true;
  }
  if (d->ops->marks_reset) d->ops->marks_reset(d);

  for (int64_t i = 0; i < r->npend; i++) {
    const rec_pending *p = &r->pend[i];
    const fb_rec_op *o = &p->op;
    if (o->step != step || o->kind == FB_OP_NKIND) continue;
    if (o->t1 > t_end) t_end = o->t1;
    out->n_ops++;
    out->flops += o->flops;
    if (o->kind == FB_OP_COLL && o->coll >= 0 && o->coll < FB_NCOLL) {
      out->coll_bytes[o->coll] += fb_coll_bytes(o->coll, p->count, p->dtype, p->world);
      out->wire_bytes[o->coll] += fb_coll_wire_bytes(o->coll, p->count, p->dtype, p->world);
      double intra, inter;
      fb_coll_wire_split(o->coll, p->count, p->dtype, p->world, p->nodes, &intra, &inter);
      out->wire_intra[o->coll] += intra;
      out->wire_inter[o->coll] += inter;
      out->coll_time[o->coll] += o->t1 - o->t0;
    }
  }
  out->t_end = t_end;
  out->wall = t_end - out->t_start;
  if (out->wall < 0) out->wall = 0;

  /* Unions: exposed comm = |comm u compute| - |compute|. */
  if (!grow((void **)&r->iv, &r->capiv, r->npend, sizeof r->iv[0])) {
    st = FB_ERR(FB_ENOMEM, "recorder: out of host memory (%lld intervals)", (long long)r->npend);
    goto out;
  }
  out->compute = union_measure(r->iv, gather_iv(r, step, true, false));
  out->comm = union_measure(r->iv, gather_iv(r, step, false, true));
  double both = union_measure(r->iv, gather_iv(r, step, true, true));
  out->exposed_comm = both - out->compute;
  if (out->exposed_comm < 0) out->exposed_comm = 0;
  if (out->exposed_comm > out->comm) out->exposed_comm = out->comm;
  breakdown(r, step, out);

  /* Keep the traced events. */
  if (step_traced(&r->cfg, step)) st = keep_traced_locked(r, step);
out:
  r->npend = 0;
  r->nevs = 0;
  for (int i = 0; i < r->ntracks; i++) r->tracks[i].last = r->tracks[i].wait_src = -1;
  r->step = -1;
  r->phase = FB_PHASE_NONE;
  pthread_mutex_unlock(&r->mu);
  return st;
}

/* ---- accessors ---------------------------------------------------------------------------- */

const fb_rec_op *fb_recorder_ops(const fb_recorder *r, int64_t *n) {
  *n = r->nops;
  return r->ops;
}

const fb_rec_mem *fb_recorder_mems(const fb_recorder *r, int64_t *n) {
  *n = r->nmems;
  return r->mems;
}

const char *fb_recorder_stream_name(const fb_recorder *r, int id) {
  return (id >= 0 && id < r->ntracks) ? r->tracks[id].name : "?";
}

int fb_recorder_nstreams(const fb_recorder *r) { return r->ntracks; }

int fb_recorder_rank(const fb_recorder *r) { return r->rank; }

int64_t fb_recorder_realtime_ns(const fb_recorder *r, double t) {
  return r->clock_real_ns + llround((t - r->clock_dev) * 1e9);
}

bool fb_recorder_model(const fb_recorder *r, fb_dev_model *out) {
  if (!r || !r->have_last) return false;
  *out = r->last;
  return true;
}
