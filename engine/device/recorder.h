/* Per-rank recorder: the timeline of ops (rank, stream, name, unit, start, end, bytes, FLOPs),
 * the memory timeline (every alloc/free with time and category) and per-step statistics.
 * The device's timing marks are resolved at step end (after the streams are synced), so the
 * same code serves cpu (wall clock), cuda (events / CUPTI) and sim (virtual clocks).
 * It does not format reports (report.h) or write the Chrome trace (traces/chrome_trace.h). */
#ifndef FB_RECORDER_H
#define FB_RECORDER_H
#include <stdbool.h>
#include <stdint.h>

#include "device.h"

typedef struct fb_recorder fb_recorder;

typedef struct fb_rec_config {
  bool trace;          /* keep op/memory events of traced steps for the Chrome trace */
  int trace_wait;      /* steps skipped before tracing (torch.profiler schedule) */
  int trace_warmup;    /* steps recorded but dropped (warm-up) */
  int trace_active;    /* steps kept; <= 0 means all remaining steps */
  bool mem_timeline;   /* keep every alloc/free (memory snapshot, counters) */
} fb_rec_config;

/* The part of a training step an op belongs to (set by the executor; the trace's per-unit
 * spans). */
typedef enum fb_rec_phase {
  FB_PHASE_NONE = 0, FB_PHASE_FORWARD, FB_PHASE_BACKWARD, FB_PHASE_OPTIMIZER, FB_PHASE_N
} fb_rec_phase;
const char *fb_rec_phase_name(fb_rec_phase p); /* "forward", "backward", "optimizer", "" */

/* One finished op, times in seconds since the device epoch. */
typedef struct fb_rec_op {
  double t0, t1;
  const char *name;     /* static */
  int stream;           /* track id from fb_recorder_stream */
  int unit;
  int step, micro;
  fb_op_kind kind;
  fb_coll coll;
  double bytes, flops;
  double size;          /* GEMM / attention: fb_op_gemm_size (what sets its efficiency) */
  int64_t m, n, k, batch; /* GEMM / attention: the op's shape (fb_op_cost), 0 otherwise */
  fb_dtype dtype;       /* the op's compute / element type */
  int param;            /* 1 + model id of the parameter it applies (fb_op_cost.param), 0 none */
  fb_rec_phase phase;
  int64_t wait;         /* kept ops: index (fb_recorder_ops) of the collective whose event this
                           op's stream waited for just before it was issued; -1 none */
} fb_rec_op;

typedef struct fb_rec_mem {
  double t;
  int64_t id;           /* allocation id */
  int64_t delta;        /* +bytes on alloc, -bytes on free */
  fb_mem_cat cat;
  const char *label;
  int64_t total_after;  /* all categories, after this event */
  int64_t cat_after;    /* this category, after this event */
  int step;             /* step in progress (-1: setup, between steps, teardown) */
  /* Who: for an alloc the next op the rank issued (the one the buffer is for), for a free the
   * last op it issued; NULL (unit -1) when there is none (memory snapshot frames). */
  const char *op;
  int unit;
} fb_rec_mem;

/* What one step cost on this rank (seconds, bytes). */
typedef struct fb_step_stats {
  int step;
  double t_start, t_end, wall;   /* step boundaries and duration */
  double compute;                /* union of compute-stream op intervals */
  double comm;                   /* union of comm-stream op intervals */
  double exposed_comm;           /* comm time not covered by compute */
  double flops;                  /* sum of op FLOPs on this rank */
  double coll_bytes[FB_NCOLL];   /* logical bytes per collective type (fb_coll_bytes) */
  double wire_bytes[FB_NCOLL];   /* bytes one rank sends per collective type */
  double wire_intra[FB_NCOLL];   /* of which between ranks of one node (fb_coll_wire_split) */
  double wire_inter[FB_NCOLL];   /* of which across nodes: intra + inter = wire_bytes */
  double coll_time[FB_NCOLL];
  double exposed_coll[FB_NCOLL]; /* exposed time of each collective type (not under compute) */
  double kind_time[FB_OP_NKIND]; /* compute-stream time by op kind (GEMM, attention, memory-
                                    bound, optimizer): where the compute time goes */
  int n_ops;
  /* Host and caching-allocator models (sim on a GPU profile; zero elsewhere), this step: */
  double host_busy;              /* host time issuing ops and in framework hooks */
  double host_work;              /* of which framework hooks (fb_host_work) */
  double host_wait;              /* host blocked in event syncs (e.g. FSDP's rate limiter) */
  double host_drain;             /* host blocked in stream syncs / device-to-host copies */
  double alloc_time;             /* host time in cudaMalloc of new segments */
  double retry_time;             /* host time in allocator retries (sync + cudaFree + cudaMalloc) */
  int64_t alloc_retries;         /* cudaMalloc retries (num_alloc_retries) */
  int64_t device_allocs;         /* cudaMalloc calls */
} fb_step_stats;

fb_status fb_recorder_create(fb_device *dev, const fb_rec_config *cfg, fb_recorder **out);
void fb_recorder_destroy(fb_recorder *r);

/* Registers a stream as a named track ("compute", "comm"); returns its id. */
int fb_recorder_stream(fb_recorder *r, fb_stream *s, const char *name);
/* Op with start/end tickets from dev->ops->mark (resolved at step end). Thread-safe. */
void fb_recorder_op(fb_recorder *r, fb_stream *s, const fb_op_cost *c, int unit, uint64_t t0,
                    uint64_t t1);
/* Memory event at host time t (called by fb_alloc/fb_free with the stats already updated). */
void fb_recorder_mem(fb_recorder *r, double t, const fb_buf *b, int64_t delta,
                     const fb_mem_stats *after);
/* A named host-side span on the "host" track (e.g. "forward", a framework hook, a host wait,
 * a cudaMalloc). */
void fb_recorder_span(fb_recorder *r, const char *name, double t0, double t1);
/* The device's host / caching-allocator model counters as of the last step end (cumulative
 * since the device opened). False when the device models neither (cpu, cuda, sim on a cpu
 * profile) or no step ended yet. */
bool fb_recorder_model(const fb_recorder *r, fb_dev_model *out);

void fb_recorder_step_begin(fb_recorder *r, int step, int micro);
void fb_recorder_micro(fb_recorder *r, int micro);
void fb_recorder_phase(fb_recorder *r, fb_rec_phase phase);
/* Stream order (called by fb_event_record / fb_stream_wait): the event marks the last op
 * issued on s; the next op issued on a stream that waited for it links back to that op when
 * it is a collective (fb_rec_op.wait). Links live within one step. */
void fb_recorder_event_record(fb_recorder *r, const void *event, fb_stream *s);
void fb_recorder_stream_wait(fb_recorder *r, fb_stream *s, const void *event);
/* Call after every stream of the rank is synced: resolves marks, fills *out. */
fb_status fb_recorder_step_end(fb_recorder *r, fb_step_stats *out);

/* Kept events of traced steps (for the trace writer). */
const fb_rec_op *fb_recorder_ops(const fb_recorder *r, int64_t *n);
const fb_rec_mem *fb_recorder_mems(const fb_recorder *r, int64_t *n);
const char *fb_recorder_stream_name(const fb_recorder *r, int id);
int fb_recorder_nstreams(const fb_recorder *r);
int fb_recorder_rank(const fb_recorder *r);
/* Wall-clock (CLOCK_REALTIME) nanoseconds of device time t, from one (device, wall) clock
 * pair read when the recorder was created (sim: its virtual clock anchored there). */
int64_t fb_recorder_realtime_ns(const fb_recorder *r, double t);

#endif
