/* The strategy plug-in table and the per-rank state the hooks work on.
 *
 * The executor (engine/exec/executor.c) runs, for every micro-step:
 *   pre_forward(0)  encoder forward               post_forward(0)
 *   pre_forward(u)  block u forward               post_forward(u)     u = 1..L
 *   pre_backward(0) final norm + head + loss (forward and backward, chunked)
 *   pre_backward(u) block u backward              post_backward(u)    u = L..1
 *                   encoder backward              post_backward(0)
 * and after the last micro-step optimizer_step(). Between pre_X(u) and post_X(u) the hook
 * guarantees r->view[u].params holds the full flat parameters of unit u in the compute dtype
 * (r->pdt) on the compute stream; between pre_backward(u) and post_backward(u)
 * r->view[u].grads is a full flat gradient buffer of the compute dtype, zeroed, that the
 * backward kernels accumulate into. Master parameters, gradient accumulators and optimizer
 * state are fp32 whatever pdt is (mixed precision: bf16 compute, fp32 master weights; gradients
 * reduced in r->rdt).
 * Hooks talk only to the device (r->dev) and communicator (r->comm) interfaces.
 * This header does not schedule anything itself. */
#ifndef FB_STRATEGY_H
#define FB_STRATEGY_H
#include <stdbool.h>
#include <stdint.h>

#include "../engine/comm/comm.h"
#include "../engine/config/config.h"
#include "../engine/device/kernels.h"
#include "../engine/model/model.h"

struct fb_recorder;

typedef struct fb_unit_view {
  void *params;  /* full flat unit parameters (pdt), valid between pre_* and post_* */
  void *grads;   /* full flat unit gradients (pdt), valid between pre_backward and post_backward */
} fb_unit_view;

typedef struct fb_rank fb_rank;

/* Host time the framework a strategy stands for spends in its per-unit hooks (Python in
 * PyTorch), charged through fb_host_work: the sim device advances its host clock on a GPU
 * profile; cpu and cuda do nothing (their host runs the real code). Seconds; k is the unit's
 * number of original parameters. Each strategy's table cites its sources; 0 = not modelled. */
typedef struct fb_host_costs {
  double check_per_param;    /* before a gather: per-parameter checks (FSDP1 writeback) */
  double gather_launch;      /* from deciding a gather (past any rate-limiter sync) to its launch */
  double views_per_param;    /* after a gather: the unit's parameters become views of it */
  double reshard_per_param;  /* at a free: parameters become views of the shard again */
  int max_inflight_gathers;  /* rate limiter: a gather waits (host sync) for the free of the
                                unit this many gathers back; 0 = no limiter */
} fb_host_costs;

/* A range of a unit's persistent fp32 state this rank holds, in the unit's flat canonical
 * layout (model order, what a one-rank run keeps): what checkpoints save and load. */
typedef struct fb_state_range {
  int unit;
  int64_t start, n;  /* elements [start, start + n) of the unit's flat layout (no padding) */
  float *p, *m, *v;  /* device pointers at element `start`: parameters, optimizer moments
                        (m = SGD momentum; NULL where the optimizer keeps none) */
} fb_state_range;

typedef struct fb_strategy {
  const char *name;
  const char *summary; /* one line for --help */
  fb_status (*setup)(fb_rank *r);   /* persistent state, initialised in place (shards only) */
  void (*teardown)(fb_rank *r);
  fb_status (*pre_forward)(fb_rank *r, int unit);
  fb_status (*post_forward)(fb_rank *r, int unit);
  fb_status (*pre_backward)(fb_rank *r, int unit);
  fb_status (*post_backward)(fb_rank *r, int unit);
  fb_status (*optimizer_step)(fb_rank *r);
  /* Collective: every rank calls it; on return host_full (unit numel floats) holds the unit's
   * full parameters on rank 0 (other ranks may pass NULL). */
  fb_status (*read_params)(fb_rank *r, int unit, float *host_full);
  const fb_host_costs *host; /* NULL: no host work modelled */
  /* The state this rank holds as ranges (malloc'd array, the caller frees): to save (every
   * element once over all ranks: replicas split the work) or to load (every element this
   * rank keeps). NULL: the strategy cannot checkpoint. */
  fb_status (*state_ranges)(fb_rank *r, bool save, fb_state_range **out, int *n);
  /* After a load wrote the ranges: rebuild what derives from them (zero1/2's replicas).
   * NULL: nothing derives. */
  fb_status (*state_loaded)(fb_rank *r);
  /* What the planner and the suites read instead of the name (zero = the common case). */
  bool one_rank;             /* runs one rank by definition (single): W micro-batches of the
                                others' global batch run on it one after the other */
  bool tunes_prefetch;       /* honours --prefetch-forward / --prefetch-backward */
  bool tunes_reshard;        /* honours --reshard-after-forward */
  bool shards_all;           /* parameters, gradients and optimizer state are all 1/W per rank */
  bool takes_zeropp;         /* honours --zeropp-quant-weights/-hpz/-quant-grads (zeropp);
                                the others refuse them */
  bool tunes_grad_overlap;   /* honours --overlap-grad-reduce (zero1) */
  bool param_sync;           /* honours --param-sync broadcast (zero1, zero2: replicated
                                parameters rebuilt from slices after the step) */
  bool grad_all_reduce;      /* honours --grad-reduce all-reduce (zero1, zero2: every rank
                                holds the whole gradient before it is reduced) */
  bool mesh;                 /* honours --mesh REPLICAxSHARD (strategies/mesh.h): its state
                                sharded over SHARD consecutive ranks, replicated REPLICA times;
                                gradients reduced in the shard group, then across replicas */
  bool mesh_node_default;    /* without --mesh: a node per shard group where the world spans
                                whole nodes on sim (hsdp); else 1 x W */
  unsigned accum_modes;      /* --accum modes beyond reduce that change what it does, as
                                bits (1u << FB_ACCUM_...); the others are refused in setup */
  const char *memory;        /* persistent bytes per rank, P parameters, W ranks (README) */
} fb_strategy;

/* Registry (strategies/registry.c): one table, read by --help, --list-strategies, plan,
 * compare's default set, the test suites and the plot scripts. */
const fb_strategy *fb_strategy_lookup(const char *name);
const char *fb_strategy_names(void); /* "single, ddp, ..." in table order */
int fb_strategy_count(void);
const fb_strategy *fb_strategy_at(int i);
/* Adds a strategy after the table's (tests only, before anything runs); false when the name is
 * taken or the extra slots are full. */
bool fb_strategy_register(const fb_strategy *s);
/* The run configuration finalized against every registry: fb_config_finalize (each value, the
 * model, the backend and communicator), then --strategy against this one (a registered name;
 * a one-rank strategy only with --world 1 or 0 = auto). FB_EUSAGE naming the flag otherwise.
 * What every subcommand and test calls before a run: config sits below the strategies and
 * cannot ask this registry itself. */
fb_status fb_run_config_finalize(fb_run_config *c);

/* Per-rank state shared by the executor and the hooks. */
struct fb_rank {
  const fb_run_config *cfg;
  const fb_model *model;
  int rank, world;
  fb_dtype pdt;         /* compute dtype of gathered parameters and unit gradients */
  const struct fb_tf_logits *logits; /* the head's chunking: fb_tf_logits_cpu or _gpu */
  fb_dtype rdt;         /* dtype gradients are reduced in */
  fb_device *dev;
  fb_comm *comm;
  fb_stream *compute;   /* the compute stream */
  fb_stream *commst;    /* the communication stream */
  struct fb_recorder *rec;
  fb_unit_view *view;   /* [model->nunits] */
  const fb_strategy *strategy;
  void *st;             /* the strategy's private state */
  /* schedule of the current step */
  int step;             /* 0-based */
  int micro, n_micro;   /* current micro-step of n_micro on this rank */
  /* optimizer inputs for this step (set by the executor before optimizer_step) */
  float lr;
  /* optimizer outputs (set by optimizer_step) */
  double grad_norm;     /* global norm before clipping */
  float clip_coef;      /* 1 when not clipped */
  fb_buf norm_bins;     /* exact-norm bins during optimizer_step (strategies/common.c) */
  /* persistent bytes per category after setup (params + grads + optimizer) */
  int64_t persistent_bytes;
  double zero3_imbalance; /* max/mean owned elements (zero3), 1 otherwise */
};

/* Forward/backward order helpers: the unit computed after u in the forward pass
 * (0 -> 1 -> ... -> L -> head stage which is unit 0 in pre_backward), and in backward
 * (0 (head) -> L -> ... -> 1 -> 0 (encoder)). Return -1 at the end. */
static inline int fb_next_fwd_unit(const fb_model *m, int u) {
  return (u + 1 < m->nunits) ? u + 1 : -1;
}
static inline int fb_next_bwd_unit(const fb_model *m, int u) {
  if (u == 0) return m->nunits - 1 >= 1 ? m->nunits - 1 : -1;
  return u - 1 >= 1 ? u - 1 : -1;
}

static inline fb_kctx fb_rank_kctx(const fb_rank *r, fb_stream *s, int unit) {
  fb_kctx k = {.dev = r->dev, .s = s, .act = r->pdt, .unit = unit};
  return k;
}
static inline size_t fb_psz(const fb_rank *r) { return fb_dtype_size(r->pdt); }

#endif
