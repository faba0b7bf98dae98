/* The device interface: tagged memory, streams, events, timing marks and a kernel table.
 * Three backends implement it, each in its own folder under engine/backends/: cpu (real math,
 * a stream is the caller or a worker thread), cuda (cudaStream_t / cudaEvent_t, cuBLAS; a
 * loadable module) and sim (no memory, no math; every op advances its stream's virtual clock
 * by a cost model). The registry that lists them sits above them (engine/backends/registry.h).
 * One fb_device exists per rank.
 *
 * Rules every caller relies on:
 *  - Memory is accounted in host program order (the way a stream-ordered caching allocator
 *    counts it): fb_alloc counts at the call, fb_free counts at the call, while the physical
 *    release waits until the given stream has finished the work issued before the free.
 *  - Device pointers are never dereferenced by host code; use copy_d2h. On sim, pointers are
 *    opaque non-NULL tokens (nothing is allocated).
 *  - Kernels run in issue order on their stream; events order streams.
 * This header does not define the kernels: see kernels.h. */
#ifndef FB_DEVICE_H
#define FB_DEVICE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"
#include "../core/types.h"

typedef struct fb_device fb_device;
typedef struct fb_stream fb_stream; /* backend-defined */
typedef struct fb_event fb_event;   /* backend-defined */
struct fb_kernels;
struct fb_recorder;
struct fb_hardware;

typedef enum fb_stream_kind { FB_STREAM_COMPUTE = 0, FB_STREAM_COMM = 1 } fb_stream_kind;

/* What an op costs; filled by the kernel and collective wrappers, consumed by the sim device's
 * cost model and by the recorder. */
typedef enum fb_op_kind {
  FB_OP_GEMM = 0,   /* dense matrix product: m, n, k, batch set */
  FB_OP_ATTN,       /* attention core: flops of its products + bytes */
  FB_OP_MEM,        /* memory-bound elementwise / reduction / copy */
  FB_OP_OPTIM,      /* optimizer update (memory-bound) */
  FB_OP_COLL,       /* a collective: coll, count, dtype, world set */
  FB_OP_NKIND
} fb_op_kind;

typedef enum fb_coll {
  FB_COLL_ALL_GATHER = 0, FB_COLL_REDUCE_SCATTER, FB_COLL_ALL_REDUCE, FB_COLL_BROADCAST,
  FB_COLL_REDUCE, FB_COLL_BARRIER, FB_COLL_ALL_TO_ALL, FB_NCOLL
} fb_coll;
const char *fb_coll_name(fb_coll c);

/* What the sim device models beyond the exact ledger, on a GPU profile (host_runs_ahead): the
 * host thread's clock and PyTorch's CUDA caching allocator (engine/sim/caching_allocator.h).
 * Seconds and bytes, cumulative since the device opened; peaks over the same span. */
typedef struct fb_dev_model {
  bool host_model;            /* the host clock is modelled (host_runs_ahead profile) */
  bool alloc_model;           /* the caching allocator is modelled */
  double host_busy_s;         /* host time issuing ops (host_op_s each) and in host_work */
  double host_work_s;         /* of which host_work (framework hooks) */
  double host_wait_s;         /* host blocked in event syncs (e.g. a rate limiter) */
  double host_drain_s;        /* host blocked in stream syncs and device-to-host copies */
  double alloc_s;             /* host time in cudaMalloc of new segments (outside retries) */
  double retry_s;             /* host time in retries: device-wide sync, cudaFree, cudaMalloc */
  int64_t reserved, reserved_peak;   /* bytes of cudaMalloc'd segments */
  int64_t reserved_at_alloc_peak;    /* reserved when the (rounded) allocated bytes peaked */
  int64_t alloc_at_reserved_peak;    /* allocated (rounded) when reserved peaked */
  int64_t held_at_reserved_peak;     /* freed but held by record_stream, at that moment */
  int64_t side_at_reserved_peak;     /* segments of streams other than the compute stream */
  int64_t segments_peak;
  int64_t device_allocs, device_frees, alloc_retries, ooms;
} fb_dev_model;

/* What a backend lets the host and the communicators do with its memory, declared once per
 * backend in the registry (engine/backends/registry.c) and checked by the configuration before
 * anything starts (config.c, the runner). Nothing above the registry names a backend: callers
 * ask these fields. */
typedef struct fb_device_caps {
  bool host_access;     /* host code may dereference its pointers (cpu); false: only device
                           ops (kernels, copies) touch them, as on a GPU */
  bool executes;        /* runs the math (false: sim, which only prices it) */
  bool bf16;            /* executes bf16 parameters and compute from fp32 masters */
  bool gpu;             /* a GPU: --param-dtype auto picks bf16, memory is the GPU's */
  bool kernel_trace;    /* can capture device kernels into the trace (CUPTI) */
  bool checks_order;    /* checks every op's operands against the stream/event order */
  bool gemm_epilogues;  /* matmul_gelu_fwd / matmul_bwd_gelu run GELU and its gradient in the
                           GEMM's epilogue (one kernel); false: the GEMM, then the GELU pass */
  const char *comm;     /* communicator for --comm auto in one process */
  const char *comm_launched; /* --comm auto under a launcher (mpirun, torchrun, srun) */
  const char *comms;    /* every communicator that can move its buffers, space separated;
                           one that needs host memory is staged when !host_access */
} fb_device_caps;

/* How an op uses one operand (for devices that check order, caps.checks_order). */
typedef enum fb_access { FB_ACC_READ = 1, FB_ACC_WRITE = 2, FB_ACC_RW = 3 } fb_access;
#define FB_OPND_REST ((size_t)-1) /* bytes: from p to the end of its allocation */
typedef struct fb_operand {
  const void *p;      /* device pointer (may be interior to an allocation); NULL = unused */
  size_t bytes;       /* or FB_OPND_REST when the op does not know the extent */
  fb_access mode;
} fb_operand;

typedef struct fb_op_cost {
  const char *name;   /* static string: "matmul_fwd", "all_gather", ... */
  fb_op_kind kind;
  fb_dtype dtype;     /* compute / element type */
  double flops;       /* floating-point operations (multiply-add = 2) */
  double bytes;       /* bytes read + written from device memory (kernels); for collectives the
                         logical size of the full tensor, see fb_coll_bytes */
  int64_t m, n, k, batch;     /* GEMM shape (batch = number of independent products) */
  fb_coll coll; int64_t count; int world; /* collectives: elements per rank (AG/RS) or total */
  int stride;         /* collectives: ranks between the group's members (fb_comm.stride) */
  int nodes;          /* collectives: nodes the group's members sit on (fb_comm.nodes; <= 1:
                         one node, every byte intra-node) */
  bool in_place;      /* collectives: this rank's part of the result already sits where it
                         goes (all-reduce send == recv, all-gather send at its slot of recv,
                         reduce-scatter recv at its slot of send): over one rank nothing moves */
  bool causal;        /* attention: causal mask (half the T x T products) */
  int param;          /* recorder only: 1 + model id of the parameter the op applies, 0: none */
  int unit;           /* the model unit the op computes (0: root, embedding and head; blocks
                         1..L; -1 outside units): the cost model's float8 linears are blocks' */
  const char *raw;    /* a plain device memset or copy ("memset0", "copy_d2d") recorded under
                         its caller's name ("zero_grad", "flat_grad_cat"): priced at that name's
                         measured rate where the profile has one, else as `raw` (NULL: a kernel) */
} fb_op_cost;

typedef struct fb_device_ops {
  const char *name; /* "cpu", "cuda", "sim" */
  fb_status (*init)(fb_device *d);
  void (*fini)(fb_device *d);

  /* Raw memory. alloc never counts (the wrapper does); `s` is the stream the allocation is
   * made for (a caching allocator's pool; NULL = the primary compute stream): sim models
   * PyTorch's per-stream pools with it, cpu and cuda ignore it. free releases after `s`
   * drains. */
  fb_status (*alloc)(fb_device *d, fb_stream *s, size_t bytes, fb_mem_cat cat, void **out);
  void (*free)(fb_device *d, void *p, size_t bytes, fb_mem_cat cat, fb_stream *s);
  fb_status (*memset0)(fb_device *d, fb_stream *s, void *dst, size_t bytes);
  fb_status (*copy_d2d)(fb_device *d, fb_stream *s, void *dst, const void *src, size_t bytes);
  /* Host -> device: returns once `src` may be reused. Device -> host: returns once `dst` holds
   * the data (waits for the stream). On sim: no-ops (dst untouched). */
  fb_status (*copy_h2d)(fb_device *d, fb_stream *s, void *dst, const void *src, size_t bytes);
  fb_status (*copy_d2h)(fb_device *d, fb_stream *s, void *dst, const void *src, size_t bytes);

  fb_status (*stream_create)(fb_device *d, fb_stream_kind kind, fb_stream **out);
  void (*stream_destroy)(fb_device *d, fb_stream *s);
  fb_status (*stream_sync)(fb_device *d, fb_stream *s); /* host waits for all work on s */
  fb_status (*event_create)(fb_device *d, fb_event **out);
  void (*event_destroy)(fb_device *d, fb_event *e);
  fb_status (*event_record)(fb_device *d, fb_event *e, fb_stream *s);
  fb_status (*stream_wait)(fb_device *d, fb_stream *s, fb_event *e); /* s waits for e */
  fb_status (*event_sync)(fb_device *d, fb_event *e);                 /* host waits for e */
  /* Runs fn(arg) when the stream reaches this point, in stream order; the stream's later work
   * waits for it. fn may block until a task of another stream or rank runs (a host collective),
   * so a device must not serialize the tasks of different streams (cudaLaunchHostFunc may).
   * A failing fn poisons the stream: the next sync returns its status. May be NULL on sim. */
  fb_status (*host_task)(fb_device *d, fb_stream *s, fb_status (*fn)(void *arg), void *arg);

  /* Time. now(): seconds since the device's epoch at the host's current program point
   * (cpu/cuda: wall clock; sim: the compute stream's virtual clock). mark() returns a ticket
   * stamped when stream s reaches it; mark_time() resolves a ticket to seconds once the stream
   * has passed it (after a sync). */
  double (*now)(fb_device *d);
  uint64_t (*mark)(fb_device *d, fb_stream *s);
  double (*mark_time)(fb_device *d, uint64_t ticket);
  void (*marks_reset)(fb_device *d); /* forget resolved tickets (after the recorder flushed) */

  /* sim only: advance stream s by the modelled duration of c. NULL elsewhere. */
  void (*account)(fb_device *d, fb_stream *s, const fb_op_cost *c);
  /* Host work: the host thread is busy for `seconds` (a framework's hooks) before it issues
   * what follows; `name` (static) labels it in the trace. sim advances its host clock (on a
   * profile whose host runs ahead of the device); cpu and cuda do nothing (their host does
   * the real work). Use fb_host_work. */
  void (*host_work)(fb_device *d, double seconds, const char *name);
  /* sim only (NULL elsewhere): what the host and caching-allocator models have counted since
   * the device opened; false when the device models neither. */
  bool (*model_stats)(fb_device *d, struct fb_dev_model *out);

  /* Devices that check order (opaque; NULL elsewhere): an op named `name` on stream s is
   * about to use these operands (begin: checks them against the stream and event order,
   * waits for the stream's earlier work, makes them accessible) or has used them (end). */
  fb_status (*op_begin)(fb_device *d, fb_stream *s, const char *name, const fb_operand *v,
                        int n);
  void (*op_end)(fb_device *d, fb_stream *s, const fb_operand *v, int n);
  /* Pinned host memory for staging (cudaMallocHost on cuda, malloc elsewhere), and copies
   * between it and device memory enqueued on a stream: copy_async returns at once, the host
   * buffer must stay alive and untouched until the stream passes the copy (free it from a
   * host_task after it). */
  fb_status (*host_alloc)(fb_device *d, size_t bytes, void **out);
  void (*host_free)(fb_device *d, void *p);
  fb_status (*copy_async)(fb_device *d, fb_stream *s, void *dst, const void *src, size_t bytes,
                          bool to_host);

  const struct fb_kernels *kernels; /* all entries NULL on sim */
  /* cuda only (NULL elsewhere): copies `bytes` from src to dst `passes` times with a kernel of
   * exactly `ctas` thread blocks, each resident until the copy ends: a stand-in for NCCL's
   * kernel (one CTA per channel, streaming HBM for the whole collective) that `calibrate`
   * runs beside a GEMM and a memory-bound kernel to measure the contention model. */
  fb_status (*proxy_copy)(fb_device *d, fb_stream *s, void *dst, const void *src, size_t bytes,
                          int ctas, int passes);
} fb_device_ops;

struct fb_device {
  const fb_device_ops *ops;
  void *impl;                  /* backend state */
  int rank, world;
  int threads;                 /* CPU threads a kernel may use (cpu backend) */
  int64_t mem_limit;           /* bytes; 0 = no limit. Exceeding it fails fb_alloc */
  fb_mem_stats mem;            /* live accounting, host program order */
  struct fb_recorder *rec;     /* may be NULL */
  const struct fb_hardware *hw;/* cost model profile (sim), peak figures (all) */
  bool simulated;              /* true for sim: no data anywhere */
};

/* Whether `word` is one of the space-separated words of `list`. */
bool fb_word_in(const char *word, const char *list);

/* Creates and initialises a device for one rank. */
fb_status fb_device_open(const fb_device_ops *ops, int rank, int world, int threads,
                         int64_t mem_limit, const struct fb_hardware *hw, fb_device **out);
void fb_device_close(fb_device *d);

/* A tagged allocation. */
typedef struct fb_buf {
  void *ptr;
  size_t bytes;
  fb_mem_cat cat;
  int64_t id;         /* allocation id for the memory timeline / snapshot */
  const char *label;  /* static string naming the owner (e.g. "fsdp.gather") */
} fb_buf;

/* Allocates and counts `bytes` under `cat`; refuses with FB_ENOMEM (message names the category,
 * the request and the limit) when mem_limit would be exceeded. bytes == 0 gives ptr == NULL. */
fb_status fb_alloc(fb_device *d, size_t bytes, fb_mem_cat cat, const char *label, fb_buf *out);
/* The same, made for stream `s` (where the buffer is first written, e.g. the all-gather
 * stream for a gathered unit): a caching allocator keeps a pool per stream. fb_alloc is
 * fb_alloc_on the primary compute stream (s == NULL). The ledger is the same either way. */
fb_status fb_alloc_on(fb_device *d, fb_stream *s, size_t bytes, fb_mem_cat cat, const char *label,
                      fb_buf *out);
/* Uncounts now; physically releases after `after` drains (NULL = the primary compute stream,
 * the one fb_alloc allocates for), as a stream-ordered caching allocator would. Idempotent
 * on an empty buffer. */
void fb_free(fb_device *d, fb_buf *b, fb_stream *after);

/* Thin wrappers over the ops table. */
static inline fb_status fb_memset0(fb_device *d, fb_stream *s, void *p, size_t n) {
  return n ? d->ops->memset0(d, s, p, n) : FB_OK;
}
static inline fb_status fb_copy_d2d(fb_device *d, fb_stream *s, void *dst, const void *src,
                                    size_t n) {
  return n ? d->ops->copy_d2d(d, s, dst, src, n) : FB_OK;
}
static inline fb_status fb_copy_h2d(fb_device *d, fb_stream *s, void *dst, const void *src,
                                    size_t n) {
  return n ? d->ops->copy_h2d(d, s, dst, src, n) : FB_OK;
}
static inline fb_status fb_copy_d2h(fb_device *d, fb_stream *s, void *dst, const void *src,
                                    size_t n) {
  return n ? d->ops->copy_d2h(d, s, dst, src, n) : FB_OK;
}
/* Event record / stream wait, told to the recorder too (the trace's flow arrows). */
fb_status fb_event_record(fb_device *d, fb_event *e, fb_stream *s);
fb_status fb_stream_wait(fb_device *d, fb_stream *s, fb_event *e);
static inline fb_status fb_event_sync(fb_device *d, fb_event *e) { return d->ops->event_sync(d, e); }
static inline fb_status fb_stream_sync(fb_device *d, fb_stream *s) { return d->ops->stream_sync(d, s); }
static inline double fb_now(fb_device *d) { return d->ops->now(d); }
static inline void fb_host_work(fb_device *d, double seconds, const char *name) {
  if (d->ops->host_work && seconds > 0) d->ops->host_work(d, seconds, name);
}

/* Bytes a collective's logical tensor has (the ledger's unit): all-gather and reduce-scatter
 * count*world*size (the full buffer), all-reduce 2*count*size (reduce-scatter + all-gather),
 * broadcast and reduce count*size. bus bytes (what one rank sends on a ring) are
 * fb_coll_wire_bytes. */
double fb_coll_bytes(fb_coll c, int64_t count, fb_dtype t, int world);
/* The size that sets a matrix product's efficiency: cbrt(m * n * k * batch), or
 * cbrt(flops / 2) when the shape is unset. The cost model and calibration share it. */
double fb_op_gemm_size(const fb_op_cost *c);
double fb_coll_wire_bytes(fb_coll c, int64_t count, fb_dtype t, int world);
/* fb_coll_wire_bytes split by where the bytes go, for a group of `world` members on `nodes`
 * nodes (<= 1: one node): *inter the bytes that cross between nodes, *intra the rest (their
 * sum is the wire bytes). The rule is the one the cost model prices (cost_model.c): a
 * collective spanning nodes runs hierarchically, the nodes exchanging over one rail per
 * member and the members of a node among themselves, so of the world - 1 hops that reach
 * every member with every piece, nodes - 1 cross nodes:
 *   inter = wire x (nodes - 1) / (world - 1),  intra = wire - inter,
 * the same fraction for every collective (all-gather, reduce-scatter, all-reduce as both,
 * broadcast and reduce as pipelined chains). One node: all intra; every member on its own
 * node (a replica group one node or more apart): all inter. Averaged over the members, as
 * fb_coll_wire_bytes is. */
void fb_coll_wire_split(fb_coll c, int64_t count, fb_dtype t, int world, int nodes,
                        double *intra, double *inter);

#endif
