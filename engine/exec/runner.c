/* The runner (see runner.h): resolves the automatic choices, opens one device, recorder,
 * communicator and strategy per rank held by this process, runs the steps on one thread per
 * rank, and gathers losses, norms, step statistics, memory and the final parameter sum.
 * On sim only rank 0 is simulated: data-parallel ranks run the same program, collectives
 * are costed for the whole world. */
#define _GNU_SOURCE /* cpu_set_t, pthread_setaffinity_np */
#include "runner.h"

#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>
#include <sys/stat.h>
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../strategies/strategy.h"
#include "../comm/comm.h"
#include "../core/launcher.h"
#include "../core/progress.h"
#include "../ops/blas.h"
#include "../sim/hardware.h"
#include "../backends/cpu/device_cpu.h"
#include "../backends/cuda_module.h"
#include "../model/transformer.h"
#include "../core/startup.h"
#include "checkpoint.h"
#include "dry_run.h"
#include "safetensors.h"
#include "executor.h"
#include "fault.h"
#include "../backends/registry.h"
#include "../sim/gpu_profile.h"

typedef struct shared {
  const fb_run_config *cfg;
  fb_run_result *res;
  const fb_model *model;
  const fb_data *data;
  const fb_device_ops *dev_ops;
  const fb_hardware *hw;
  fb_local_group *group;
  int threads;      /* per rank */
  bool pin;         /* --pin-ranks applies: ranks as threads here, each on CPUs of its own */
  int node_ranks;   /* ranks per node, for the ledger's intra-/inter-node split: the profile's
                       devices_per_node, else the ranks the launch put on one machine */
  char resume[4096];   /* the resolved step directory (--resume), "" = none */
  char init_from[4096];/* the resolved step directory or .safetensors file (--init-from) */
  int start;           /* steps already done (from the checkpoint) */
  int nlocal;       /* ranks held by this process */
  int first_rank;
  struct rank_ctx *ctx;   /* [nlocal] */
  pthread_mutex_t mu;     /* guards running and ctx[].parked */
  pthread_cond_t cv;      /* signalled when a rank returns or parks */
  int running;            /* ranks started that neither returned nor parked */
  fb_tf_logits logits;    /* the head's chunking and vocabulary padding, for every rank */
} shared;

typedef struct rank_ctx {
  shared *sh;
  int index; /* 0..nlocal-1 */
  int rank;
  bool pinned;  /* keeps to cpus (--pin-ranks): set on its thread before anything starts */
  cpu_set_t cpus;
  fb_status st;
  char msg[512], where[128];
  bool parked; /* stopped forever by FSDPBENCH_FAULT: never joined */
} rank_ctx;

static void log_step(const shared *sh, int step, const fb_step_stats *ss, const fb_device *dev) {
  const fb_run_config *c = sh->cfg;
  const fb_run_result *res = sh->res;
  const double tokens = (double)res->tokens_per_step;
  const double gflops = res->model_flops_per_step / res->world / ss->wall / 1e9;
  char loss[32], gn[32];
  if (isnan(res->loss[step])) {
    snprintf(loss, sizeof loss, "-");
    snprintf(gn, sizeof gn, "-");
  } else {
    snprintf(loss, sizeof loss, "%.6f", res->loss[step]);
    snprintf(gn, sizeof gn, "%.4f", res->grad_norm[step]);
  }
  char pct[64] = ""; /* of the profile's peak (named in the header), never a measured one */
  if (res->peak_flops > 0)
    snprintf(pct, sizeof pct, " (%.1f%% of %.0f)", 100.0 * gflops * 1e9 / res->peak_flops,
             res->peak_flops / 1e9);
  printf("step %4d/%d | loss %s | gnorm %s | lr %.3e | %s%.1f ms | %.0f tok/s | %.1f %s GFLOP/s"
         "%s | mem %.1f MiB allocated\n",
         step + 1, c->steps, loss, gn, res->lr[step], res->predicted ? "pred " : "",
         ss->wall * 1e3, tokens / ss->wall, gflops, fb_dtype_name(c->param_dtype), pct,
         (double)dev->mem.peak_total / (1 << 20));
  fflush(stdout);
}

/* At the start of the first step on rank 0, once per process (the first logged run): the
 * process's start-up `ms` (exec, dynamic loading, configuration, model, data, device and
 * strategy set-up), measured (startup.h). */
static void log_startup(const fb_run_config *c, double ms) {
  static atomic_flag printed = ATOMIC_FLAG_INIT;
  fb_startup_mark(c->quiet ? "first step (of a quiet inner run)" : "first step");
  if (c->quiet || atomic_flag_test_and_set(&printed)) return;
  printf("startup: %.1f ms (exec to first step, measured)\n", ms);
  fflush(stdout);
}

static fb_status open_comm(shared *sh, int rank, fb_device *dev, fb_comm **out) {
  const fb_run_config *c = sh->cfg;
  if (!strcmp(c->comm, "local")) return fb_comm_local_create(sh->group, rank, dev, out);
  if (!strcmp(c->comm, "sim")) return fb_comm_sim_create(dev, rank, sh->res->world, out);
#ifdef FB_HAVE_MPI
  if (!strcmp(c->comm, "mpi")) return fb_comm_mpi_create(dev, c->timeout_s, out);
#endif
  if (!strcmp(c->comm, "nccl")) {
    char why[512];
    const fb_cuda_module *m = fb_cuda_module_load(why, sizeof why);
    if (!m) return FB_ERR(FB_EUNSUPPORTED, "--comm nccl: not available: %s", why);
    return m->nccl_create(dev, c->timeout_s, out);
  }
  return FB_ERR(FB_EUNSUPPORTED, "--comm: '%s' is not built into this binary", c->comm);
}

/* The sum's lanes: element j of every parameter goes to lane j % SUM_LANES, and the lanes are
 * added in lane order at the end. A fixed order (the result depends only on the parameters'
 * values, never on the strategy, world or thread count) that is not one serial chain of
 * dependent double adds: the lanes vectorise. */
#define SUM_LANES 16

static void sum_lanes(const float *x, int64_t n, double acc[SUM_LANES]) {
  int64_t j = 0;
  for (; j + SUM_LANES <= n; j += SUM_LANES)
    for (int k = 0; k < SUM_LANES; k++) acc[k] += (double)x[j + k];
  for (int k = 0; j < n; j++, k++) acc[k] += (double)x[j];
}

static fb_status final_param_sum(fb_rank *r, double *sum) {
  const fb_model *m = r->model;
  float *host = r->rank == 0 ? malloc((size_t)m->max_unit_numel * sizeof *host) : NULL;
  if (r->rank == 0 && !host) return FB_ERR(FB_ENOMEM, "out of host memory (param readback)");
  double acc[SUM_LANES] = {0}, s = 0;
  fb_status st = FB_OK;
  for (int u = 0; u < m->nunits && st == FB_OK; u++) {
    st = r->strategy->read_params(r, u, host);
    if (st != FB_OK || !host) continue;
    const fb_unit *un = &m->units[u];
    for (int i = un->first; i < un->first + un->count; i++)
      sum_lanes(host + m->params[i].offset, m->params[i].numel, acc);
  }
  free(host);
  for (int k = 0; k < SUM_LANES; k++) s += acc[k];
  *sum = s;
  return st;
}

/* Sums the loss over ranks through a device buffer and the communicator, on the comm stream
 * (a metric: outside the ledger, the recorder and the cost model). */
static fb_status reduce_loss(fb_rank *r, double v[2]) {
  fb_device *d = r->dev;
  void *buf = NULL;
  const size_t bytes = 2 * sizeof *v;
  FB_TRY(d->ops->alloc(d, r->commst, bytes, FB_MEM_TEMP, &buf));
  fb_status st = fb_copy_h2d(d, r->commst, buf, v, bytes);
  if (st == FB_OK) st = fb_comm_unrecorded(r->comm, r->commst, FB_COLL_ALL_REDUCE, buf, buf, 2, FB_F64, 0);
  if (st == FB_OK) st = fb_copy_d2h(d, r->commst, v, buf, bytes);
  d->ops->free(d, buf, bytes, FB_MEM_TEMP, r->commst);
  return st;
}

/* SIGINT / SIGTERM: the run stops after the step in progress (every rank the same step: the
 * flag travels with the loss all-reduce), with a final checkpoint when --ckpt is set. */
static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

/* --resume / --init-from: the state from a checkpoint (or parameters from a .safetensors
 * file), resharded to this strategy and world. */
static fb_status restore(shared *sh, fb_rank *r) {
  int done = 0;
  if (sh->resume[0]) return fb_ckpt_load(r, sh->resume, false, &done);
  if (!sh->init_from[0]) return FB_OK;
  if (fb_is_safetensors(sh->init_from)) return fb_safetensors_load(r, sh->init_from);
  return fb_ckpt_load(r, sh->init_from, true, &done);
}

/* A checkpoint that cannot be written (disk full, permissions) is reported and the run goes
 * on: the earlier checkpoints stay valid. Other failures stop the run. */
static fb_status save(fb_rank *r, const char *dir, int steps_done) {
  fb_status st = fb_ckpt_save(r, dir, steps_done);
  if (st != FB_EIO) return st;
  if (r->rank == 0) fprintf(stderr, "fsdpbench: warning: %s\n", fb_error_msg());
  return FB_OK;
}

/* Starts or stops the device's kernel capture (CUPTI in CUDA builds). */
static fb_status kernel_trace(int rank, bool on, bool *state) {
  const fb_cuda_module *m = fb_cuda_module_loaded(); /* a kernel-tracing device loaded it */
  if (m) FB_TRY(on ? m->cupti_start(rank, 0 /* 1,000,000 records at most */) : m->cupti_stop());
  *state = on;
  return FB_OK;
}

static fb_status rank_run(rank_ctx *ctx) {
  shared *sh = ctx->sh;
  const fb_run_config *c = sh->cfg;
  fb_run_result *res = sh->res;
  fb_rank_result *rr = &res->ranks[ctx->index];
  fb_device *dev = NULL;
  fb_recorder *rec = NULL;
  fb_comm *comm = NULL;
  fb_stream *compute = NULL, *commst = NULL;
  fb_rank r = {0};
  fb_exec e = {0};
  bool setup_done = false;
  fb_progress prog = {0}; /* on a terminal, when the steps are not each logged */
  fb_status st;
  omp_set_num_threads(sh->threads);

  FB_CHECK_GOTO(st, fb_device_open(sh->dev_ops, ctx->rank, res->world, sh->threads, c->mem_limit,
                                   sh->hw, &dev), out);
  fb_rec_config rc = {.trace = c->trace, .trace_wait = c->trace_wait,
                      .trace_warmup = c->trace_warmup, .trace_active = c->trace_active,
                      .mem_timeline = c->mem_snapshot || c->trace};
  FB_CHECK_GOTO(st, fb_recorder_create(dev, &rc, &rec), out);
  dev->rec = rec;
  rr->rec = rec;
  rr->rank = ctx->rank;
  FB_CHECK_GOTO(st, dev->ops->stream_create(dev, FB_STREAM_COMPUTE, &compute), out);
  FB_CHECK_GOTO(st, dev->ops->stream_create(dev, FB_STREAM_COMM, &commst), out);
  fb_recorder_stream(rec, compute, "compute");
  fb_recorder_stream(rec, commst, "comm");
  FB_CHECK_GOTO(st, open_comm(sh, ctx->rank, dev, &comm), out);
  fb_comm_place(comm, 0, sh->node_ranks);
  if (ctx->rank == 0) fb_startup_mark("device, streams and communicator opened");

  r.cfg = c;
  r.model = sh->model;
  r.rank = ctx->rank;
  r.world = res->world;
  r.pdt = c->param_dtype;
  r.rdt = c->reduce_dtype;
  r.logits = &sh->logits;
  r.dev = dev;
  r.comm = comm;
  r.compute = compute;
  r.commst = commst;
  r.rec = rec;
  r.strategy = fb_strategy_lookup(c->strategy);
  r.zero3_imbalance = 1.0;
  r.view = calloc((size_t)sh->model->nunits, sizeof *r.view);
  if (!r.view) {
    st = FB_ERR(FB_ENOMEM, "out of host memory (unit views)");
    goto out;
  }
  FB_CHECK_GOTO(st, r.strategy->setup(&r), out);
  setup_done = true;
  FB_CHECK_GOTO(st, fb_stream_sync(dev, compute), out);
  if (ctx->rank == 0) fb_startup_mark("strategy set up (parameters initialised)");
  rr->persistent_bytes = dev->mem.cur[FB_MEM_PARAM_SHARD] + dev->mem.cur[FB_MEM_GRAD_SHARD] +
                         dev->mem.cur[FB_MEM_OPTIM];
  rr->zero3_imbalance = r.zero3_imbalance;
  FB_CHECK_GOTO(st, fb_exec_init(&e, &r, sh->data), out);
  FB_CHECK_GOTO(st, restore(sh, &r), out);
  rr->mem_setup = dev->mem;
  /* kernel capture (CUPTI) only during the traced steps (warm-up and active), on the first
   * rank of this process */
  const bool cupti = c->trace && fb_device_caps_of(dev)->kernel_trace && ctx->index == 0;
  const int cupti_first = c->trace_wait;
  const int cupti_last = c->trace_active > 0 ? c->trace_wait + c->trace_warmup + c->trace_active - 1
                                             : c->steps - 1;
  bool cupti_on = false;

  fb_progress_start(&prog, "train: step", c->steps - sh->start,
                    ctx->rank == 0 && !c->quiet && c->log_every > 1 && fb_progress_tty());
  for (int step = sh->start; step < c->steps; step++) {
    double loss = 0;
    if (step == sh->start && ctx->index == 0) { /* this process's first rank: one reading */
      res->startup_ms = fb_startup_ms();
      res->first_step_unix_s = fb_unix_time_s();
      if (ctx->rank == 0) log_startup(c, res->startup_ms);
    }
    if (cupti && step == cupti_first) FB_CHECK_GOTO(st, kernel_trace(ctx->rank, true, &cupti_on), out);
    FB_CHECK_GOTO(st, fb_exec_step(&e, step, &loss), out);
    double v[2] = {loss, stop_signal ? 1.0 : 0.0};
    if (!dev->simulated && res->world > 1) FB_CHECK_GOTO(st, reduce_loss(&r, v), out);
    loss = v[0];
    const bool stop = v[1] > 0 && step + 1 < c->steps;
    FB_CHECK_GOTO(st, fb_recorder_step_end(rec, &rr->steps[step]), out);
    /* after the step's end: stopping the capture flushes its records (27 ms of gpt2's 22 ms
     * step on an H200), host time no step may carry */
    if (cupti_on && step == cupti_last) FB_CHECK_GOTO(st, kernel_trace(ctx->rank, false, &cupti_on), out);
    if (c->ckpt[0] && ((c->save_every > 0 && (step + 1) % c->save_every == 0) ||
                       step == c->steps - 1 || stop))
      FB_CHECK_GOTO(st, save(&r, c->ckpt, step + 1), out);
    if (stop) {
      st = FB_ERR(FB_EINTERRUPTED, "stopped by signal %d after step %d of %d%s%s", (int)stop_signal,
                  step + 1, c->steps, c->ckpt[0] ? "; resume with --resume " : "",
                  c->ckpt[0] ? c->ckpt : "");
      goto out;
    }
    if (ctx->rank == 0) {
      res->loss[step] = dev->simulated ? NAN : loss / ((double)c->batch * c->seq);
      res->grad_norm[step] = dev->simulated ? NAN : r.grad_norm;
      res->lr[step] = r.lr;
      if (!c->quiet && (step % c->log_every == 0 || step == c->steps - 1)) {
        fb_progress_clear(&prog);
        log_step(sh, step, &rr->steps[step], dev);
      }
      fb_progress_update(&prog, step + 1 - sh->start, NULL);
    }
  }
  if (cupti_on) FB_CHECK_GOTO(st, kernel_trace(ctx->rank, false, &cupti_on), out);
  /* the run's memory figures are those of the training steps, not of the readback below */
  rr->mem = dev->mem;
  if (!dev->simulated) {
    double sum = 0;
    FB_CHECK_GOTO(st, final_param_sum(&r, &sum), out);
    if (ctx->rank == 0) res->param_sum = sum;
  }
  FB_CHECK_GOTO(st, fb_stream_sync(dev, commst), out);
  FB_CHECK_GOTO(st, fb_stream_sync(dev, compute), out);
out:
  fb_progress_end(&prog);
  fb_exec_fini(&e);
  if (setup_done) r.strategy->teardown(&r);
  free(r.view);
  if (dev && st != FB_OK) rr->mem = dev->mem;
  if (comm) fb_comm_destroy(comm);
  if (commst) dev->ops->stream_destroy(dev, commst);
  if (compute) dev->ops->stream_destroy(dev, compute);
  if (dev) {
    dev->rec = NULL;
    fb_device_close(dev);
  }
  /* the recorder outlives its device only as a container of resolved events */
  return st;
}

static void *rank_thread(void *arg) {
  rank_ctx *ctx = arg;
  /* threads this one starts (its OpenMP team, its comm stream's worker) inherit the mask */
  if (ctx->pinned && pthread_setaffinity_np(pthread_self(), sizeof ctx->cpus, &ctx->cpus) != 0)
    ctx->pinned = false; /* the mask changed since the start line: the OS places this rank */
  ctx->st = rank_run(ctx);
  if (ctx->st != FB_OK) {
    snprintf(ctx->msg, sizeof ctx->msg, "%s", fb_error_msg());
    snprintf(ctx->where, sizeof ctx->where, "%s", fb_error_where());
    if (ctx->sh->group) fb_local_group_abort(ctx->sh->group);
  }
  pthread_mutex_lock(&ctx->sh->mu);
  ctx->sh->running--;
  pthread_cond_broadcast(&ctx->sh->cv);
  pthread_mutex_unlock(&ctx->sh->mu);
  return NULL;
}

/* FSDPBENCH_FAULT parked rank `rank`'s thread (a dead peer): the others go on without it. */
static void rank_parked(void *arg, int rank) {
  shared *sh = arg;
  pthread_mutex_lock(&sh->mu);
  sh->ctx[rank - sh->first_rank].parked = true;
  sh->running--;
  pthread_cond_broadcast(&sh->cv);
  pthread_mutex_unlock(&sh->mu);
}

/* Waits until every started rank returned or parked; joins the former, never the latter. */
static bool wait_ranks(shared *sh, pthread_t *th, int started) {
  pthread_mutex_lock(&sh->mu);
  while (sh->running > 0) pthread_cond_wait(&sh->cv, &sh->mu);
  pthread_mutex_unlock(&sh->mu);
  bool parked = false;
  for (int i = 0; i < started; i++) {
    if (sh->ctx[i].parked) pthread_detach(th[i]);
    else pthread_join(th[i], NULL);
    parked |= sh->ctx[i].parked;
  }
  return parked;
}

/* Which rank's failure explains the run: a timeout or an abort on one rank is usually caused
 * by another, so any other error first, then a timeout (it names the rank that did not
 * arrive), then an abort ("the group failed"). */
static int cause_weight(fb_status st) {
  return st == FB_OK ? 0 : st == FB_ECOMM ? 1 : st == FB_ETIMEOUT ? 2 : 3;
}

static const char *human(double bytes, char *buf, size_t n) {
  if (bytes >= 1073741824.0) snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
  else snprintf(buf, n, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

/* Predicts the executed run's peak memory with the simulator (same allocation calls, so the
 * same bytes) and refuses, before anything is allocated, a run that would not fit. */
static fb_status precheck_memory(const fb_run_config *c, const fb_device_entry *dev,
                                 int64_t profile_capacity, bool shared_host, fb_fit *fit) {
  fb_run_config p = *c;
  snprintf(p.backend, sizeof p.backend, "sim");
  snprintf(p.comm, sizeof p.comm, "sim");
  snprintf(p.hardware, sizeof p.hardware, "h100"); /* any profile: memory does not depend on it */
  p.steps = c->steps < 2 ? c->steps : 2;
  p.quiet = true;
  p.dry_run = false;
  p.ckpt[0] = p.resume[0] = p.init_from[0] = 0; /* memory does not depend on them */
  p.trace = p.mem_snapshot = false;
  p.mem_limit = 0;
  p.out[0] = 0;
  fb_run_result pr;
  FB_TRY(fb_run(&p, &pr));
  int64_t worst = 0, sum = 0;
  int wi = 0;
  for (int i = 0; i < pr.nranks; i++) {
    int64_t pk = pr.ranks[i].mem.peak_total;
    sum += pk;
    if (pk > worst) worst = pk, wi = i;
  }
  if (pr.nranks < pr.world) sum = worst * pr.world;
  /* what this machine offers; a dry run where the device is absent checks the profile's */
  int64_t avail = dev->capacity ? dev->capacity(shared_host ? 1 : pr.nranks) : -1;
  if (avail <= 0) avail = profile_capacity;
  const bool per_rank_limit = c->mem_limit > 0;
  const int64_t need = per_rank_limit ? worst : (shared_host ? sum : worst);
  const int64_t limit = per_rank_limit ? c->mem_limit : avail;
  if (fit) {
    fit->peak = pr.ranks[wi].mem;
    fit->worst_rank = pr.ranks[wi].rank;
    fit->need = need;
    fit->limit = limit;
    fb_dev_model dm;
    fit->reserved_peak = fb_recorder_model(pr.ranks[wi].rec, &dm) ? dm.reserved_peak : -1;
  }
  fb_status st = FB_OK;
  if (limit > 0 && need > limit) {
    char cats[512], who[128], h1[32], h2[32], h3[32];
    int o = 0;
    const fb_mem_stats *ms = &pr.ranks[wi].mem;
    for (int k = 0; k < FB_MEM_NCAT && o < (int)sizeof cats; k++)
      o += snprintf(cats + o, sizeof cats - o, "%s%s %s", k ? ", " : "",
                    fb_mem_cat_name((fb_mem_cat)k), human((double)ms->at_peak[k], h1, sizeof h1));
    if (per_rank_limit)
      snprintf(who, sizeof who, "> --mem-limit %s", human((double)limit, h1, sizeof h1));
    else if (shared_host)
      snprintf(who, sizeof who, "x %d ranks = %s > %s available on this machine", pr.world,
               human((double)sum, h1, sizeof h1), human((double)limit, h2, sizeof h2));
    else
      snprintf(who, sizeof who, "> %s free on the %s", human((double)limit, h1, sizeof h1),
               dev->caps->gpu ? "GPU" : "device");
    st = FB_ERR(FB_ENOMEM, "the run does not fit: predicted peak %s per rank %s; at the peak: %s",
                human((double)worst, h3, sizeof h3), who, cats);
  }
  fb_run_result_free(&pr);
  return st;
}

/* The first registered GPU backend usable here, or NULL (reason in why). */
static const fb_device_entry *usable_gpu(char *why, size_t n) {
  snprintf(why, n, "no GPU backend in this build");
  for (int i = 0; fb_device_entry_at(i); i++) {
    const fb_device_entry *e = fb_device_entry_at(i);
    if (e->caps->gpu && fb_device_available(e->name, why, n)) return e;
  }
  return NULL;
}

/* Fills the automatic choices (backend, comm, hardware) from the device registry and checks
 * the pair: the backend's capabilities name the communicators that can move its buffers. */
static fb_status resolve_auto(fb_run_config *c, const fb_model *m, bool launched, char *why,
                              size_t why_len) {
  why[0] = 0;
  if (!strcmp(c->backend, "auto")) {
    char reason[256];
    const fb_device_entry *gpu = usable_gpu(reason, sizeof reason);
    if (gpu) {
      snprintf(c->backend, sizeof c->backend, "%s", gpu->name);
    } else {
      /* execute on this CPU when the whole run takes about a minute or less */
      int B = c->batch > 0 ? c->batch : 8, T = c->seq;
      double flops = 3.0 * fb_model_forward_flops(&m->spec, B, T) * c->steps;
      double est = flops / 100e9;
      if (est <= 60.0) {
        snprintf(c->backend, sizeof c->backend, "cpu");
      } else {
        snprintf(c->backend, sizeof c->backend, "sim");
        snprintf(why, why_len, "chosen because there is no GPU here (%s) and executing %d steps "
                 "of %s on this CPU would take about %.0f s; pass --backend cpu to execute",
                 reason, c->steps, m->spec.name, est);
      }
    }
  }
  const fb_device_entry *e = fb_device_entry_lookup(c->backend);
  if (!e) return FB_ERR(FB_EUSAGE, "--backend: '%s' is not available in this build", c->backend);
  if (!strcmp(c->comm, "auto"))
    snprintf(c->comm, sizeof c->comm, "%s", launched ? e->caps->comm_launched : e->caps->comm);
  if (!fb_word_in(c->comm, e->caps->comms))
    return FB_ERR(FB_EUSAGE, "--comm: '%s' is not allowed with --backend %s (want auto, %s)",
                  c->comm, c->backend, e->caps->comms);
  if (!c->hardware[0] && !e->caps->executes) snprintf(c->hardware, sizeof c->hardware, "h100");
  /* GPU backends pad the head's vocabulary for cuBLAS; sim predicts what it is told (the
   * memory precheck of a cuda run passes its resolved value) */
  if (c->vocab_pad <= 0) c->vocab_pad = e->caps->gpu ? 128 : 1;
  return FB_OK;
}

/* --ckpt / --resume / --init-from: checked before anything runs (exit 2 on a bad path). */
static fb_status resolve_checkpoints(const fb_run_config *c, const fb_device_entry *dev,
                                     shared *sh) {
  const bool any = c->ckpt[0] || c->resume[0] || c->init_from[0];
  if (any && !dev->caps->executes)
    return FB_ERR(FB_EUSAGE, "--%s: checkpoints need an executing backend (--backend %s holds no "
                  "data)", c->ckpt[0] ? "ckpt" : c->resume[0] ? "resume" : "init-from", c->backend);
  if (c->resume[0] && c->init_from[0])
    return FB_ERR(FB_EUSAGE, "--init-from: not allowed with --resume (a resumed run has its state)");
  if (c->resume[0]) {
    FB_TRY(fb_ckpt_resolve(c->resume, "--resume", sh->resume, sizeof sh->resume));
    fb_ckpt_info info;
    FB_TRY(fb_ckpt_read_info(sh->resume, &info));
    if (info.step >= c->steps)
      return FB_ERR(FB_EUSAGE, "--resume: %s holds %d steps, not fewer than --steps %d", sh->resume,
                    info.step, c->steps);
    sh->start = info.step;
  }
  if (c->init_from[0]) {
    if (fb_is_safetensors(c->init_from)) {
      if (access(c->init_from, R_OK))
        return FB_ERR(FB_EUSAGE, "--init-from: cannot read '%s': %s", c->init_from, strerror(errno));
      snprintf(sh->init_from, sizeof sh->init_from, "%s", c->init_from);
    } else {
      FB_TRY(fb_ckpt_resolve(c->init_from, "--init-from", sh->init_from, sizeof sh->init_from));
    }
  }
  if (c->ckpt[0]) {
    struct stat sb; /* the processes of an mpi run may all create it at once */
    if ((mkdir(c->ckpt, 0755) != 0 && errno != EEXIST) || stat(c->ckpt, &sb) != 0 ||
        !S_ISDIR(sb.st_mode) || access(c->ckpt, W_OK))
      return FB_ERR(FB_EUSAGE, "--ckpt: '%s' is not a writable directory", c->ckpt);
    FB_TRY(fb_ckpt_check_dir(c->ckpt, sh->start, c->steps, c->save_every));
  }
  return FB_OK;
}

/* A resumed run's results start at the step it resumed from: the arrays drop the steps it
 * did not run, first_step says where they begin. */
static void drop_skipped(fb_run_result *res, int start) {
  if (start <= 0) return;
  const int n = res->nsteps - start;
  memmove(res->loss, res->loss + start, (size_t)n * sizeof *res->loss);
  memmove(res->grad_norm, res->grad_norm + start, (size_t)n * sizeof *res->grad_norm);
  memmove(res->lr, res->lr + start, (size_t)n * sizeof *res->lr);
  for (int i = 0; i < res->nranks; i++)
    memmove(res->ranks[i].steps, res->ranks[i].steps + start,
            (size_t)n * sizeof *res->ranks[i].steps);
  res->nsteps = n;
  res->first_step = start;
}

bool fb_run_on_gpu(const char *backend, const fb_hardware *hw) {
  const fb_device_entry *e = fb_device_entry_lookup(backend);
  return e && (e->caps->gpu || (!e->caps->executes && hw && hw->gpu_arch != FB_ARCH_NONE));
}

fb_dtype fb_resolve_param_dtype(fb_dtype t, const char *backend, const fb_hardware *hw) {
  if (t != FB_DTYPE_AUTO) return t;
  return fb_run_on_gpu(backend, hw) ? FB_BF16 : FB_F32;
}

/* The profile a GPU backend's run takes when --hardware is not given: the one for the GPU's
 * name (gpu_profile.h), loaded into own; NULL when there is none, with what was found in
 * res->peak_src. `chosen` gets " (chosen for GPU '...': an H100 SXM 80 GB)". */
static const fb_hardware *gpu_profile(const fb_device_entry *dev, fb_hardware *own,
                                      const char **name, char *chosen, size_t n,
                                      fb_run_result *res) {
  char gpu[256] = "", why[160] = "";
  if (!dev->device_name || !dev->device_name(gpu, sizeof gpu)) {
    snprintf(res->peak_src, sizeof res->peak_src, "none (the GPU's name cannot be read: pass "
             "--hardware NAME for a %% of peak)");
    return NULL;
  }
  const char *prof = fb_gpu_profile_for(gpu, 0, why, sizeof why);
  if (!prof || fb_hardware_load(prof, own) != FB_OK) {
    snprintf(res->peak_src, sizeof res->peak_src, "none (GPU '%s': %s; pass --hardware NAME "
             "for a %% of peak)", gpu, prof ? "its profile does not load" : why);
    return NULL;
  }
  *name = prof;
  /* GPU names are short ("NVIDIA H100 80GB HBM3"); 200 characters keep the label whole */
  snprintf(chosen, n, " (chosen for GPU '%.200s': %s)", gpu, why);
  return own;
}

/* The denominator of "% of peak" on executed runs: the hardware profile's dense peak for the
 * params' dtype (--hardware, else the profile of the GPU's name on a GPU backend, else
 * models/hardware/cpu.yaml on a CPU backend), per rank: a profile whose ranks share one machine
 * (shared_host) divides it over the ranks on this node. Read, never measured, so it is the same
 * figure every run; 0 without a profile (the step line then prints no percentage, and the
 * header says why). */
static void profile_peak(const fb_run_config *c, const fb_hardware *hw, const fb_device_entry *dev,
                         int node_ranks, fb_run_result *res) {
  fb_hardware own;
  const fb_hardware *p = c->hardware[0] ? hw : NULL;
  const char *name = c->hardware;
  char chosen[400] = "";
  snprintf(res->peak_src, sizeof res->peak_src, "none (no hardware profile: pass --hardware "
           "NAME for a %% of peak)");
  if (!p && dev->caps->gpu) p = gpu_profile(dev, &own, &name, chosen, sizeof chosen, res);
  else if (!p && fb_hardware_load("cpu", &own) == FB_OK) p = &own, name = "cpu";
  res->peak_flops = 0;
  if (!p) return;
  if (fb_hardware_peak(p, c->param_dtype) <= 0) {
    snprintf(res->peak_src, sizeof res->peak_src, "none (profile %s states no %s peak: pass "
             "--hardware NAME for a %% of peak)", name, fb_dtype_name(c->param_dtype));
    return;
  }
  const double whole = fb_hardware_peak(p, c->param_dtype);
  const int share = p->shared_host && node_ranks > 1 ? node_ranks : 1;
  res->peak_flops = whole / share;
  char file[300], split[96] = "";
  if (strchr(name, '/') || strstr(name, ".yaml")) snprintf(file, sizeof file, "%s", name);
  else snprintf(file, sizeof file, "models/hardware/%s.yaml", name);
  if (share > 1)
    snprintf(split, sizeof split, " (%lld GF/s shared by %d ranks on this machine)",
             llround(whole / 1e9), share);
  snprintf(res->peak_src, sizeof res->peak_src, "%lld GF/s %s per rank from %s%s%s",
           llround(res->peak_flops / 1e9), fb_dtype_name(c->param_dtype), file, split, chosen);
}

/* One line, once per process, when the ranks on this node outnumber its CPUs: on stderr for
 * --dry-run (its stdout is YAML), else on stdout with the run's header, so that a run refused
 * later (a corrupt checkpoint, say) still says its error in exactly one stderr line. */
static void warn_oversubscribed(FILE *f, int node_ranks) {
  static atomic_flag warned = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&warned)) return;
  fprintf(f, "fsdpbench: warning: %d ranks on this node share %d CPU(s) (oversubscribed): "
          "each rank runs 1 thread and the steps will be slow\n", node_ranks,
          fb_cores_available());
}

/* torchrun starts one process per rank and MPI cannot join them; a CPU backend's ranks are
 * threads of one process (local) or MPI processes: refuse, saying what to run instead. */
static fb_status torchrun_on_threads(const fb_launch *l, const fb_device_entry *dev,
                                     const fb_run_config *c) {
  if (strcmp(l->name, "torchrun") || !l->launched || !dev->caps->executes || dev->caps->gpu ||
      !fb_word_in(c->comm, "local mpi"))
    return FB_OK;
  return FB_ERR(FB_EUSAGE, "torchrun starts %d processes but the %s backend's ranks are threads "
                "of one process (or MPI processes, which torchrun cannot start): run `fsdpbench "
                "--world %d ...` once, or `mpirun -np %d fsdpbench --comm mpi ...`", l->world,
                c->backend, l->world, l->world);
}

int fb_auto_world(bool one_rank, bool executes, int devices_here, int profile_devices) {
  if (one_rank) return 1;
  if (!executes) return profile_devices > 0 ? profile_devices : 8;
  return devices_here > 0 ? devices_here : 2;
}

fb_status fb_check_own_devices(int world, const char *comm, int devices_here) {
  if (world < 2 || !fb_comm_own_device(comm) || devices_here <= 0 || world <= devices_here)
    return FB_OK;
  return FB_ERR(FB_EUSAGE, "--world %d with --comm %s: %s needs one GPU per rank and %d %s "
                "visible (it cannot put two ranks on one GPU): use --world %d, --comm local "
                "(ranks share a GPU through host memory), or a launcher with one process per GPU",
                world, comm, comm, devices_here, devices_here == 1 ? "is" : "are", devices_here);
}

static int devices_here(const fb_device_entry *dent) {
  return dent->devices_here ? dent->devices_here() : 0;
}

int fb_auto_batch(int world) {
  return world >= 8 ? world : (8 + world - 1) / world * world;
}

/* What fb_run resolves before it opens anything: where this process sits, the backend, its
 * hardware profile and how the world splits over processes and threads. */
typedef struct run_plan {
  fb_launch L;                 /* where a launcher placed this process (engine/core/launcher.c) */
  const fb_device_entry *dent; /* the backend's registry entry */
  fb_hardware hw;              /* its profile (executing backends: for the cost-model figures) */
  char why[512];               /* why --backend auto chose sim ("" = nothing to say) */
  char absent[768];            /* why the backend cannot run here ("" = it can) */
  bool multi_process;          /* one process per rank (mpi; nccl under a launcher) */
  int node_ranks;              /* ranks sharing this node's CPUs */
  int rank_threads;            /* CPU threads per rank */
  bool warn_over;              /* the node's CPUs are oversubscribed: warn once accepted */
  int dry_shown;               /* --dry-run: 1 = the placement is printed, 2 = everything */
  fb_fault fault;              /* FSDPBENCH_FAULT */
} run_plan;

/* The launcher, the model, the automatic choices, the hardware profile and the backend. */
static fb_status plan_backend(fb_run_config *c, fb_run_result *res, run_plan *p, shared *sh) {
  FB_TRY(fb_launch_detect(&p->L));
  FB_TRY(fb_model_build(&c->spec, &res->model));
  fb_startup_mark("model built");
  FB_TRY(resolve_auto(c, &res->model, p->L.launched, p->why, sizeof p->why));
  /* executing backends need a profile only for the cost-model figures; sim needs one */
  memset(&p->hw, 0, sizeof p->hw);
  snprintf(p->hw.name, sizeof p->hw.name, "%s", c->backend);
  if (c->hardware[0]) FB_TRY(fb_hardware_load(c->hardware, &p->hw));
  FB_TRY(fb_hardware_set_network(&p->hw, c->nics_per_node, c->nic_gbps));
  p->dent = fb_device_entry_lookup(c->backend);
  if (fb_device_available(c->backend, p->absent, sizeof p->absent))
    sh->dev_ops = fb_device_lookup(c->backend); /* cuda: the CUDA module, loaded by now */
  else if (!c->dry_run)
    return FB_ERR(FB_EUSAGE, "--backend %s: not available: %s", c->backend, p->absent);
  return FB_OK;
}

/* The world (the launcher's, --mesh's, or the backend's default) and the threads per rank. */
static fb_status plan_world(fb_run_config *c, run_plan *p) {
  const fb_launch *L = &p->L;
  const fb_device_entry *dent = p->dent;
  /* mpi runs one process per rank (a singleton without a launcher); nccl too under a launcher,
   * else its ranks are threads of this process, one GPU each */
  p->multi_process = fb_comm_launched(c->comm) &&
                     (L->launched || (!strcmp(c->comm, "mpi") && !c->dry_run));
  const bool multi_process = p->multi_process;
  const int world_asked = c->world;
  if (multi_process) c->world = L->world;
  int mesh_r = 0, mesh_s = 0; /* --mesh RxS without --world: R*S ranks (checked below) */
  if (fb_config_mesh(c, c->world, &mesh_r, &mesh_s) == FB_OK && c->world <= 0 && mesh_r > 0)
    c->world = mesh_r * mesh_s;
  if (c->world <= 0)
    c->world = fb_auto_world(fb_strategy_lookup(c->strategy)->one_rank, dent->caps->executes,
                             dent->caps->executes ? devices_here(dent) : 0,
                             p->hw.devices_per_node);
  /* the ranks sharing this node's CPUs: one process each under a launcher, else this
   * process's ranks (threads). --threads (per process, split over its ranks) wins; resolved,
   * it is the process's total: per rank times its ranks */
  p->node_ranks = multi_process ? L->local_size : c->world;
  const int in_process = multi_process ? 1 : c->world;
  bool oversubscribed = false;
  const int per = c->threads / in_process, asked = c->threads > 0 ? (per > 0 ? per : 1) : 0;
  p->rank_threads = fb_threads_per_rank(asked, p->node_ranks, multi_process, &oversubscribed);
  if (c->threads <= 0) c->threads = p->rank_threads * in_process;
  /* warned once the configuration is accepted, so a refusal stays one line */
  p->warn_over = oversubscribed && dent->caps->executes && L->local_rank == 0;
  if (c->dry_run) {
    fb_dry_run_place(L, multi_process);
    p->dry_shown = 1;
  }
  if (multi_process && world_asked > 0 && world_asked != L->world)
    return FB_ERR(FB_EUSAGE, "--world: %d but the launcher (%s) started %d processes",
                  world_asked, L->name, L->world);
  FB_TRY(torchrun_on_threads(L, dent, c));
  if (!multi_process && dent->caps->executes) /* ranks as threads of this process */
    FB_TRY(fb_check_own_devices(c->world, c->comm, devices_here(dent)));
  return FB_OK;
}

/* What depends on the world, checked now that it is known: the mesh, the batch split, the
 * parameter dtype. */
static fb_status plan_batch(fb_run_config *c, const run_plan *p) {
  int mesh_r = 0, mesh_s = 0;
  FB_TRY(fb_config_mesh(c, c->world, &mesh_r, &mesh_s));
  if (c->batch <= 0) c->batch = fb_auto_batch(c->world);
  if (c->batch % c->world)
    return FB_ERR(FB_EUSAGE, "--batch: %d does not divide over --world %d", c->batch, c->world);
  if (c->micro_batch <= 0) c->micro_batch = c->batch / c->world;
  if ((c->batch / c->world) % c->micro_batch)
    return FB_ERR(FB_EUSAGE, "--micro-batch: %d does not divide the per-rank batch %d",
                  c->micro_batch, c->batch / c->world);
  /* --param-dtype auto: GPUs (and GPU profiles) train in bf16 with fp32 masters, the cpu
   * backend and its calibrated profiles in fp32 */
  c->param_dtype = fb_resolve_param_dtype(c->param_dtype, c->backend, &p->hw);
  if (fb_strategy_lookup(c->strategy)->one_rank && c->world != 1)
    return FB_ERR(FB_EUSAGE, "--world: strategy %s runs one rank (got %d)", c->strategy, c->world);
  if (c->param_dtype != FB_F32 && !p->dent->caps->bf16)
    return FB_ERR(FB_EUSAGE, "--param-dtype: '%s' is not available on --backend %s (want fp32)",
                  fb_dtype_name(c->param_dtype), c->backend);
  return FB_OK;
}

/* Before anything is opened: the injected fault, the sim header, the memory precheck. */
static fb_status plan_fit(const fb_run_config *c, run_plan *p) {
  const fb_device_entry *dent = p->dent;
  if (dent->caps->executes) FB_TRY(fb_fault_from_env(c->world, &p->fault));
  if (p->fault.set && !p->multi_process && c->world < 2)
    return FB_ERR(FB_EUSAGE, "FSDPBENCH_FAULT: needs at least 2 ranks on --comm %s (got --world "
                  "%d)", c->comm, c->world);
  if (!c->quiet && !dent->caps->executes)
    printf("fsdpbench: backend sim, hardware %s, world %d, %s params: every time figure below is "
           "predicted, memory is exact%s%s\n", p->hw.name, c->world, fb_dtype_name(c->param_dtype),
           p->why[0] ? "; " : "", p->why);
  if (!dent->caps->executes) return FB_OK;
  FB_TRY(precheck_memory(c, dent, p->hw.mem_capacity, !dent->caps->gpu && !p->multi_process,
                         NULL));
  fb_startup_mark("memory precheck done (simulated steps)");
  return FB_OK;
}

/* The result's header fields and its per-step arrays. */
static fb_status result_init(const fb_run_config *c, const run_plan *p, fb_run_result *res) {
  snprintf(res->backend, sizeof res->backend, "%s", c->backend);
  snprintf(res->comm, sizeof res->comm, "%s", c->comm);
  snprintf(res->hardware, sizeof res->hardware, "%s", p->hw.name);
  res->mem_capacity = c->hardware[0] ? p->hw.mem_capacity : 0;
  res->predicted = !p->dent->caps->executes;
  res->world = c->world;
  res->nsteps = c->steps;
  res->param_sum = NAN;
  res->startup_ms = NAN;
  res->first_step_unix_s = NAN;
  res->tokens_per_step = (int64_t)c->batch * c->seq;
  res->model_flops_per_step = 3.0 * fb_model_forward_flops(&c->spec, c->batch, c->seq);
  res->loss = calloc((size_t)c->steps, sizeof *res->loss);
  res->grad_norm = calloc((size_t)c->steps, sizeof *res->grad_norm);
  res->lr = calloc((size_t)c->steps, sizeof *res->lr);
  if (!res->loss || !res->grad_norm || !res->lr)
    return FB_ERR(FB_ENOMEM, "out of host memory (results)");
  return FB_OK;
}

/* The ranks this process holds, its BLAS threads and the peak figure of "% of peak". */
static void place_ranks(const fb_run_config *c, const run_plan *p, shared *sh,
                        fb_run_result *res) {
  /* sim holds every rank while that is cheap (zero3's ranks differ in memory), else rank 0 */
  sh->nlocal = p->multi_process ? 1 : res->predicted ? (c->world <= 16 ? c->world : 1) : c->world;
  sh->first_rank = p->multi_process ? p->L.rank : 0;
  sh->threads = p->rank_threads;
  cpu_set_t probe;
  sh->pin = c->pin_ranks && !res->predicted && !p->multi_process &&
            fb_rank_cpus(0, sh->nlocal, sh->threads, &probe);
  if (p->warn_over && !c->quiet) warn_oversubscribed(stdout, p->node_ranks);
  if (res->predicted) {
    snprintf(res->blas, sizeof res->blas, "none (simulated)");
    res->peak_flops = fb_hardware_peak(&p->hw, c->param_dtype);
    snprintf(res->peak_src, sizeof res->peak_src, "%lld GF/s %s per rank from the %s profile",
             llround(res->peak_flops / 1e9), fb_dtype_name(c->param_dtype), p->hw.name);
    return;
  }
  fb_blas_set_threads(sh->threads);
  snprintf(res->blas, sizeof res->blas, "%s", fb_blas_describe());
  profile_peak(c, &p->hw, p->dent, p->node_ranks, res);
  fb_startup_mark("BLAS threads and peak figure set");
  if (!c->quiet && sh->first_rank == 0)
    printf("fsdpbench: backend %s, comm %s, world %d, %d thread(s) per rank%s, %s params; "
           "peak: %s\n", c->backend, c->comm, c->world, sh->threads,
           sh->pin ? " (each rank on CPUs of its own)" : "", fb_dtype_name(c->param_dtype),
           res->peak_src);
}

/* The per-rank results, contexts and threads, and the local communicator's group. */
static fb_status ranks_alloc(const fb_run_config *c, shared *sh, fb_run_result *res,
                             rank_ctx **ctx, pthread_t **th) {
  res->nranks = sh->nlocal;
  res->ranks = calloc((size_t)sh->nlocal, sizeof *res->ranks);
  *ctx = calloc((size_t)sh->nlocal, sizeof **ctx);
  *th = calloc((size_t)sh->nlocal, sizeof **th);
  if (!res->ranks || !*ctx || !*th) return FB_ERR(FB_ENOMEM, "out of host memory (ranks)");
  for (int i = 0; i < sh->nlocal; i++) {
    res->ranks[i].steps = calloc((size_t)c->steps, sizeof(fb_step_stats));
    if (!res->ranks[i].steps) return FB_ERR(FB_ENOMEM, "out of host memory (step stats)");
  }
  sh->ctx = *ctx;
  if (!strcmp(c->comm, "local"))
    FB_TRY(fb_local_group_create(c->world, c->timeout_s, &sh->group));
  return FB_OK;
}

/* Starts one thread per rank (the only rank runs on this thread) and returns how many started;
 * *st is set when a thread could not start. */
static int start_ranks(shared *sh, rank_ctx *ctx, pthread_t *th, fb_status *st) {
  int started = 0;
  for (int i = 0; i < sh->nlocal; i++) {
    ctx[i] = (rank_ctx){.sh = sh, .index = i, .rank = sh->first_rank + i};
    ctx[i].pinned = sh->pin && fb_rank_cpus(i, sh->nlocal, sh->threads, &ctx[i].cpus);
    /* under the lock: the ranks started already decrement it as they return */
    pthread_mutex_lock(&sh->mu);
    sh->running++;
    pthread_mutex_unlock(&sh->mu);
    if (sh->nlocal == 1) {
      rank_thread(&ctx[i]);
      continue;
    }
    if (pthread_create(&th[i], NULL, rank_thread, &ctx[i])) {
      pthread_mutex_lock(&sh->mu);
      sh->running--;
      pthread_mutex_unlock(&sh->mu);
      *st = FB_ERR(FB_EINTERNAL, "cannot start rank thread %d", i);
      if (sh->group) fb_local_group_abort(sh->group);
      break;
    }
    started++;
  }
  return started;
}

/* Runs the ranks to their end under the stop signals and the injected fault; returns the
 * run's status (the root cause among the ranks') and whether a rank was parked. */
static fb_status run_ranks(shared *sh, rank_ctx *ctx, pthread_t *th, run_plan *p, bool *parked) {
  fb_status st = FB_OK;
  /* a signal stops the run after its step; a second one acts as usual (SA_RESETHAND) */
  struct sigaction stop_act = {.sa_handler = on_stop, .sa_flags = SA_RESETHAND}, old_int, old_term;
  sigemptyset(&stop_act.sa_mask);
  stop_signal = 0;
  sigaction(SIGINT, &stop_act, &old_int);
  sigaction(SIGTERM, &stop_act, &old_term);
  pthread_mutex_init(&sh->mu, NULL);
  pthread_cond_init(&sh->cv, NULL);
  fb_fault_arm(&p->fault, !p->multi_process, rank_parked, sh);
  const int started = start_ranks(sh, ctx, th, &st);
  /* a rank parked by FSDPBENCH_FAULT is never joined: it holds its communicator, so the
   * group outlives the run (the process is about to exit 4) */
  *parked = wait_ranks(sh, th, started);
  fb_fault_disarm();
  pthread_cond_destroy(&sh->cv);
  pthread_mutex_destroy(&sh->mu);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (st != FB_OK) return st;
  int pick = -1; /* the root cause (cause_weight), the first rank among equals */
  for (int i = 0; i < sh->nlocal; i++)
    if (cause_weight(ctx[i].st) > (pick < 0 ? 0 : cause_weight(ctx[pick].st))) pick = i;
  if (pick >= 0) {
    fb_error_copy(ctx[pick].st, ctx[pick].msg, ctx[pick].where);
    return ctx[pick].st;
  }
  if (*parked)
    return FB_ERR(FB_ECOMM, "rank %d stopped (FSDPBENCH_FAULT) and the others finished without "
                  "it", p->fault.rank);
  return FB_OK;
}

/* Resolves the plan (refusing what cannot run before anything opens), then opens and runs
 * the ranks. A --dry-run stops after the plan, printing it. */
fb_status fb_run(const fb_run_config *cfg_in, fb_run_result *res) {
  memset(res, 0, sizeof *res);
  res->cfg = *cfg_in;
  fb_run_config *c = &res->cfg;
  fb_status st;
  fb_data data = {0};
  rank_ctx *ctx = NULL;
  pthread_t *th = NULL;
  shared sh = {0};
  run_plan *p = calloc(1, sizeof *p);
  bool parked = false;
  const double t_start = fb_cpu_clock();
  if (!p) return FB_ERR(FB_ENOMEM, "out of host memory (run plan)");

  FB_CHECK_GOTO(st, plan_backend(c, res, p, &sh), fail);
  FB_CHECK_GOTO(st, plan_world(c, p), fail);
  FB_CHECK_GOTO(st, plan_batch(c, p), fail);
  FB_CHECK_GOTO(st, resolve_checkpoints(c, p->dent, &sh), fail);
  if (c->dry_run) {
    p->dry_shown = 2;
    if (p->warn_over) warn_oversubscribed(stderr, p->node_ranks);
    st = fb_dry_run(c, p->dent, &p->hw, p->absent, p->multi_process, precheck_memory);
    goto fail; /* nothing was opened: the same cleanup */
  }
  FB_CHECK_GOTO(st, plan_fit(c, p), fail);
  FB_CHECK_GOTO(st, result_init(c, p, res), fail);
  place_ranks(c, p, &sh, res);
  FB_CHECK_GOTO(st, fb_data_open(&data, c->data, c->spec.vocab, c->seed, c->seq), fail);
  fb_startup_mark("data opened");
  sh.cfg = c;
  sh.res = res;
  sh.model = &res->model;
  sh.data = &data;
  sh.hw = &p->hw;
  sh.node_ranks = p->hw.devices_per_node > 0 ? p->hw.devices_per_node : p->node_ranks;
  sh.logits = fb_run_on_gpu(c->backend, &p->hw) ? fb_tf_logits_gpu : fb_tf_logits_cpu;
  sh.logits.vocab_multiple = c->vocab_pad;
  FB_CHECK_GOTO(st, ranks_alloc(c, &sh, res, &ctx, &th), fail);

  st = run_ranks(&sh, ctx, th, p, &parked);
  if (sh.group && !parked) fb_local_group_destroy(sh.group);
  free(ctx);
  free(th);
  free(p);
  fb_data_close(&data);
  res->wall_s = fb_cpu_clock() - t_start;
  if (st == FB_OK) drop_skipped(res, sh.start);
  if (st != FB_OK) fb_run_result_free(res);
  return st;
fail:
  if (p->dry_shown == 1) fb_dry_run_refused(c); /* the resolved world and threads, then why */
  if (sh.group) fb_local_group_destroy(sh.group);
  free(ctx);
  free(th);
  free(p);
  fb_data_close(&data);
  fb_run_result_free(res);
  return st;
}

void fb_run_result_free(fb_run_result *res) {
  for (int i = 0; i < res->nranks && res->ranks; i++) {
    free(res->ranks[i].steps);
    if (res->ranks[i].rec) fb_recorder_destroy(res->ranks[i].rec);
  }
  free(res->ranks);
  free(res->loss);
  free(res->grad_norm);
  free(res->lr);
  fb_model_free(&res->model);
  res->ranks = NULL;
  res->loss = res->grad_norm = res->lr = NULL;
  res->nranks = 0;
}
