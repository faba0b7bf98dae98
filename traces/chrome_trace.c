/* Chrome-trace writer (chrome_trace.h). Times are converted to integer nanoseconds from the
 * trace origin first, so nesting repairs, spans, flow points and the printed microseconds
 * (3 decimals) are exact. It reads the recorders of fb_run_result; it does not change them,
 * and it does not merge files of several processes (apps/trace_merge.c). */
#include "chrome_trace.h"

#include "../engine/backends/cuda_module.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/core/json_out.h"

/* A kernel / collective / host span of the recorder, or (phase != NONE) a synthesized span
 * of one (unit, phase, step, micro) whose unit, step and micro are op's. */
typedef struct slice {
  int64_t t0, t1;       /* ns from origin */
  const fb_rec_op *op;
  fb_rec_phase phase;
} slice;

enum { NAME_MAX_LEN = 128 };

static int64_t to_ns(double t, double origin) { return llround((t - origin) * 1e9); }

static int cmp_slice(const void *a, const void *b) {
  const slice *x = a, *y = b;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  if (x->t1 != y->t1) return x->t1 > y->t1 ? -1 : 1; /* longer first: the parent */
  return (x->op > y->op) - (x->op < y->op);
}

/* One pass of the nesting repair over sorted slices; returns whether anything moved. */
static bool nest_pass(slice *s, int64_t n, int64_t *stack) {
  bool moved = false;
  int64_t depth = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t t0 = s[i].t0, t1 = s[i].t1;
    while (depth > 0) {
      const slice *top = &s[stack[depth - 1]];
      if (top->t1 <= t0) { depth--; continue; }
      if (t1 <= top->t1) break;       /* nested inside top */
      t0 = top->t1;                   /* partial overlap: start where top ends */
      moved = true;
      depth--;
    }
    if (t1 < t0) t1 = t0;
    s[i].t0 = t0;
    s[i].t1 = t1;
    stack[depth++] = i;
  }
  return moved;
}

/* Makes the slices of one track nest: repeated repair passes, then (if timer noise still
 * leaves partial overlaps) a strict sequence as the fallback. Leaves them sorted. */
static void make_nested(slice *s, int64_t n, int64_t *stack) {
  for (int pass = 0; pass < 8; pass++) {
    qsort(s, (size_t)n, sizeof *s, cmp_slice);
    if (!nest_pass(s, n, stack)) return;
  }
  qsort(s, (size_t)n, sizeof *s, cmp_slice);
  int64_t end = INT64_MIN;
  for (int64_t i = 0; i < n; i++) {
    if (s[i].t0 < end) s[i].t0 = end;
    if (s[i].t1 < s[i].t0) s[i].t1 = s[i].t0;
    end = s[i].t1;
  }
}

/* Whether two ops belong to the same span: same unit, phase, step and micro-step. */
static bool same_span(const fb_rec_op *a, const fb_rec_op *b) {
  return a->unit == b->unit && a->phase == b->phase && a->step == b->step && a->micro == b->micro;
}

static bool spanned(const fb_rec_op *o) { return o->unit >= 0 && o->phase != FB_PHASE_NONE; }

/* The spans of a compute track from its nested, sorted kernels k[0..m): one per run of
 * consecutive kernels with the same key, from the run's first start to its last end. A kernel
 * that starts inside the current run (nested by the repair) joins it whatever its key, so
 * spans never overlap and always contain their kernels. Returns the number written to out. */
static int64_t derive_spans(const slice *k, int64_t m, slice *out) {
  int64_t ns = 0, end = INT64_MIN;
  const fb_rec_op *key = NULL;
  for (int64_t i = 0; i < m; i++) {
    const fb_rec_op *o = k[i].op;
    if (key && (k[i].t0 < end || (same_span(o, key) && spanned(o)))) {
      if (k[i].t1 > end) end = k[i].t1;
      if (spanned(key)) out[ns - 1].t1 = end;
      continue;
    }
    key = o;
    end = k[i].t1;
    if (spanned(o)) out[ns++] = (slice){.t0 = k[i].t0, .t1 = end, .op = o, .phase = o->phase};
  }
  return ns;
}

static const char *op_cat(const fb_rec_op *o) {
  static const char *const kind[FB_OP_NKIND] = {[FB_OP_GEMM] = "gemm", [FB_OP_ATTN] = "attn",
                                                [FB_OP_MEM] = "mem", [FB_OP_OPTIM] = "optim",
                                                [FB_OP_COLL] = "collective"};
  if (o->kind == FB_OP_COLL && o->coll >= 0 && o->coll < FB_NCOLL) return fb_coll_name(o->coll);
  if (o->kind >= 0 && o->kind < FB_OP_NKIND) return kind[o->kind];
  return "span";
}

/* The slice's name (chrome_trace.h, fb_model_op_name). */
static const char *slice_name(const fb_run_result *r, const slice *s, char *buf) {
  const fb_rec_op *o = s->op;
  if (s->phase != FB_PHASE_NONE)
    return fb_model_op_name(&r->model, o->unit, 0, fb_rec_phase_name(s->phase), true, buf,
                            NAME_MAX_LEN);
  return fb_model_op_name(&r->model, o->unit, o->param, o->name, o->kind == FB_OP_COLL, buf,
                          NAME_MAX_LEN);
}

static void put_us(FILE *f, int64_t ns) {
  if (ns < 0) ns = 0;
  fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static void sep(FILE *f, bool *first) {
  fputs(*first ? "\n" : ",\n", f);
  *first = false;
}

/* Earliest time of the kept events (and step starts) of the given ranks. */
static double origin_of(const fb_run_result *r, int lo, int hi) {
  double o = INFINITY;
  for (int i = lo; i < hi; i++) {
    const fb_rank_result *rk = &r->ranks[i];
    if (r->nsteps > 0 && rk->steps) o = fmin(o, rk->steps[0].t_start);
    if (!rk->rec) continue;
    int64_t n;
    const fb_rec_op *ops = fb_recorder_ops(rk->rec, &n);
    for (int64_t k = 0; k < n; k++) o = fmin(o, ops[k].t0);
    const fb_rec_mem *m = fb_recorder_mems(rk->rec, &n);
    for (int64_t k = 0; k < n; k++) o = fmin(o, m[k].t);
  }
  return isfinite(o) ? o : 0;
}

static void meta(FILE *f, bool *first, const char *name, int pid, int tid, const char *key,
                 const char *sval, int ival) {
  sep(f, first);
  fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":", name, pid,
          tid, key);
  if (sval) fb_json_str(f, sval);
  else fprintf(f, "%d", ival);
  fputs("}}", f);
}

static void put_slice(FILE *f, bool *first, const fb_run_result *r, const slice *s, int pid,
                      int tid) {
  const fb_rec_op *o = s->op;
  char name[NAME_MAX_LEN];
  sep(f, first);
  fputs("{\"name\":", f);
  fb_json_str(f, slice_name(r, s, name));
  fputs(",\"cat\":", f);
  fb_json_str(f, s->phase != FB_PHASE_NONE ? "span" : op_cat(o));
  fprintf(f, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", pid, tid);
  put_us(f, s->t0);
  fputs(",\"dur\":", f);
  put_us(f, s->t1 - s->t0);
  fputs(",\"args\":{", f);
  if (s->phase == FB_PHASE_NONE) {
    fputs("\"op\":", f);
    fb_json_str(f, o->name);
    fputs(",\"bytes\":", f);
    fb_json_num(f, o->bytes);
    fputs(",\"flops\":", f);
    fb_json_num(f, o->flops);
    fputc(',', f);
  }
  fprintf(f, "\"unit\":%d,\"step\":%d,\"micro\":%d}}", o->unit, fb_step_number(o->step),
          o->micro);
}

/* The flow events (chrome_trace.h) of one wait link, at the slices' repaired midpoints. */
static void put_flow(FILE *f, bool *first, const fb_run_result *r, const fb_rec_op *ops,
                     const int64_t *t0, const int64_t *t1, int64_t src, int64_t dst, int pid) {
  char name[NAME_MAX_LEN];
  const slice s = {.op = &ops[src]};
  const long long id = (long long)pid * 1000000000LL + (long long)dst;
  slice_name(r, &s, name);
  for (int end = 0; end < 2; end++) {
    const int64_t k = end ? dst : src;
    sep(f, first);
    fputs("{\"name\":", f);
    fb_json_str(f, name);
    fprintf(f, ",\"cat\":\"wait\",\"ph\":\"%s\",\"id\":%lld,\"pid\":%d,\"tid\":%d,\"ts\":",
            end ? "f\",\"bp\":\"e" : "s", id, pid, ops[k].stream + 1);
    put_us(f, t0[k] + (t1[k] - t0[k]) / 2);
    fputc('}', f);
  }
}

typedef struct scratch {
  slice *s;            /* [2n]: a track's kernels, then its spans */
  int64_t *stack;      /* [2n] */
  int64_t *t0, *t1;    /* [n] repaired times by op index */
} scratch;

static void scratch_free(scratch *w) {
  free(w->s);
  free(w->stack);
  free(w->t0);
  free(w->t1);
}

static fb_status scratch_alloc(scratch *w, int64_t n) {
  const size_t m = (size_t)(n ? n : 1);
  w->s = malloc(2 * m * sizeof *w->s);
  w->stack = malloc(2 * m * sizeof *w->stack);
  w->t0 = malloc(m * sizeof *w->t0);
  w->t1 = malloc(m * sizeof *w->t1);
  if (w->s && w->stack && w->t0 && w->t1) return FB_OK;
  scratch_free(w);
  return FB_ERR(FB_ENOMEM, "trace: out of host memory (%lld events)", (long long)n);
}

/* One track: its kernels nested, its spans (compute tracks), spans first. */
static void write_track(FILE *f, bool *first, const fb_run_result *r, const fb_recorder *rec,
                        int tr, int pid, double origin, scratch *w) {
  int64_t n;
  const fb_rec_op *ops = fb_recorder_ops(rec, &n);
  int64_t m = 0;
  for (int64_t k = 0; k < n; k++) {
    if (ops[k].stream != tr) continue;
    int64_t t0 = to_ns(ops[k].t0, origin), t1 = to_ns(ops[k].t1, origin);
    if (t0 < 0) t0 = 0;
    w->s[m++] = (slice){.t0 = t0, .t1 = t1 < t0 ? t0 : t1, .op = &ops[k]};
  }
  make_nested(w->s, m, w->stack);
  for (int64_t k = 0; k < m; k++) {
    w->t0[w->s[k].op - ops] = w->s[k].t0;
    w->t1[w->s[k].op - ops] = w->s[k].t1;
  }
  int64_t ns = 0;
  if (!strncmp(fb_recorder_stream_name(rec, tr), "compute", 7))
    ns = derive_spans(w->s, m, w->s + m);
  for (int64_t k = 0; k < ns; k++) put_slice(f, first, r, &w->s[m + k], pid, tr + 1);
  for (int64_t k = 0; k < m; k++) put_slice(f, first, r, &w->s[k], pid, tr + 1);
}

static fb_status write_rank_ops(FILE *f, bool *first, const fb_run_result *r,
                                const fb_rank_result *rk, int pid, double origin) {
  int64_t n;
  const fb_rec_op *ops = fb_recorder_ops(rk->rec, &n);
  scratch w;
  FB_TRY(scratch_alloc(&w, n));
  for (int tr = 0; tr < fb_recorder_nstreams(rk->rec); tr++)
    write_track(f, first, r, rk->rec, tr, pid, origin, &w);
  for (int64_t k = 0; k < n; k++) {
    const int64_t src = ops[k].wait;
    if (src < 0 || src >= n || ops[src].stream == ops[k].stream) continue;
    put_flow(f, first, r, ops, w.t0, w.t1, src, k, pid);
  }
  scratch_free(&w);
  return FB_OK;
}

/* A "steps" track (tid = tracks + 1): one ProfilerStep#N slice per traced step, from step
 * begin to end. rk->steps[k] is step index r->first_step + k. */
static void write_rank_steps(FILE *f, bool *first, const fb_run_result *r,
                             const fb_rank_result *rk, int pid, double origin) {
  int64_t n;
  const fb_rec_op *ops = fb_recorder_ops(rk->rec, &n);
  if (r->nsteps <= 0 || !rk->steps) return;
  const int tid = fb_recorder_nstreams(rk->rec) + 1;
  int64_t end = 0, o = 0;
  for (int k = 0; k < r->nsteps; k++) {
    const int step = r->first_step + k;
    while (o < n && ops[o].step < step) o++; /* kept ops are in step order */
    if (o >= n || ops[o].step != step) continue;
    int64_t t0 = to_ns(rk->steps[k].t_start, origin), t1 = to_ns(rk->steps[k].t_end, origin);
    if (t0 < end) t0 = end;
    if (t1 < t0) t1 = t0;
    end = t1;
    sep(f, first);
    fprintf(f, "{\"name\":\"ProfilerStep#%d\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":%d,"
               "\"tid\":%d,\"ts\":", fb_step_number(step), pid, tid);
    put_us(f, t0);
    fputs(",\"dur\":", f);
    put_us(f, t1 - t0);
    fprintf(f, ",\"args\":{\"step\":%d,\"ops\":%d,\"flops\":", fb_step_number(step),
            rk->steps[k].n_ops);
    fb_json_num(f, rk->steps[k].flops);
    fputs("}}", f);
  }
}

static void write_rank_counters(FILE *f, bool *first, const fb_rank_result *rk, int pid,
                                double origin) {
  int64_t n;
  const fb_rec_mem *m = fb_recorder_mems(rk->rec, &n);
  int64_t cur[FB_MEM_NCAT] = {0}, total = 0, last_ts = 0;
  for (int64_t k = 0; k < n; k++) {
    if (m[k].cat >= 0 && m[k].cat < FB_MEM_NCAT) cur[m[k].cat] = m[k].cat_after;
    total = m[k].total_after;
    int64_t ts = to_ns(m[k].t, origin);
    if (ts < last_ts) ts = last_ts; /* events from two threads may interleave slightly */
    last_ts = ts;
    /* One counter sample per distinct time: emit when the next event is later. */
    if (k + 1 < n && to_ns(m[k + 1].t, origin) <= ts) continue;
    const double mib = 1.0 / (1024.0 * 1024.0);
    sep(f, first);
    fprintf(f, "{\"name\":\"memory (MiB)\",\"ph\":\"C\",\"pid\":%d,\"ts\":", pid);
    put_us(f, ts);
    fputs(",\"args\":{", f);
    for (int c = 0; c < FB_MEM_NCAT; c++)
      fprintf(f, "%s\"%s\":%.6f", c ? "," : "", fb_mem_cat_name((fb_mem_cat)c), cur[c] * mib);
    fputs("}},\n", f);
    fprintf(f, "{\"name\":\"memory total (MiB)\",\"ph\":\"C\",\"pid\":%d,\"ts\":", pid);
    put_us(f, ts);
    fprintf(f, ",\"args\":{\"total\":%.6f}}", total * mib);
  }
}

/* CLOCK_REALTIME ns of device time `origin` on the first recorder of ranks [lo, hi); 0 if
 * none. */
static int64_t origin_unix_ns(const fb_run_result *r, int lo, int hi, double origin) {
  for (int i = lo; i < hi; i++)
    if (r->ranks[i].rec) return fb_recorder_realtime_ns(r->ranks[i].rec, origin);
  return 0;
}

static void write_other_data(FILE *f, const fb_run_result *r, int lo, int hi) {
  const fb_run_config *c = &r->cfg;
  fputs("\"otherData\":{\"model\":", f);
  fb_json_str(f, c->model);
  fputs(",\"strategy\":", f);
  fb_json_str(f, c->strategy);
  fputs(",\"backend\":", f);
  fb_json_str(f, r->backend);
  fputs(",\"comm\":", f);
  fb_json_str(f, r->comm);
  fputs(",\"hardware\":", f);
  fb_json_str(f, r->hardware);
  fprintf(f, ",\"world\":%d,\"batch\":%d,\"micro_batch\":%d,\"seq\":%d,\"steps\":%d", r->world,
          c->batch, c->micro_batch, c->seq, r->nsteps);
  fputs(",\"param_dtype\":", f);
  fb_json_str(f, fb_dtype_name(c->param_dtype));
  fputs(",\"reduce_dtype\":", f);
  fb_json_str(f, fb_dtype_name(c->reduce_dtype));
  fprintf(f, ",\"trace_wait\":%d,\"trace_warmup\":%d,\"trace_active\":%d", c->trace_wait,
          c->trace_warmup, c->trace_active);
  fputs(",\"ranks\":[", f);
  for (int i = lo; i < hi; i++) fprintf(f, "%s%d", i > lo ? "," : "", r->ranks[i].rank);
  fputs("],\"trace_origin_unix_ns\":", f);
  fb_json_int(f, origin_unix_ns(r, lo, hi, origin_of(r, lo, hi)));
  fprintf(f, ",\"predicted\":%s,\"time_unit\":\"us from trace_origin_unix_ns%s\"}",
          r->predicted ? "true" : "false",
          r->predicted ? " (the simulator's clock, anchored at the run's start)" : "");
}

/* Appends the events of ranks [lo, hi) of r: process pid = rank + pid_offset, named
 * "rank N" + suffix, times relative to r's own origin. */
static fb_status write_events(FILE *f, bool *first, const fb_run_result *r, int lo, int hi,
                              int pid_offset, const char *suffix) {
  double origin = origin_of(r, lo, hi);
  fb_status st = FB_OK;
  for (int i = lo; i < hi && st == FB_OK; i++) {
    const fb_rank_result *rk = &r->ranks[i];
    const int pid = rk->rank + pid_offset;
    char pname[64];
    snprintf(pname, sizeof pname, "rank %d%s", rk->rank, suffix);
    meta(f, first, "process_name", pid, 0, "name", pname, 0);
    meta(f, first, "process_sort_index", pid, 0, "sort_index", NULL, pid);
    if (!rk->rec) continue;
    for (int tr = 0; tr < fb_recorder_nstreams(rk->rec); tr++) {
      meta(f, first, "thread_name", pid, tr + 1, "name", fb_recorder_stream_name(rk->rec, tr), 0);
      meta(f, first, "thread_sort_index", pid, tr + 1, "sort_index", NULL, tr + 1);
    }
    int steps_tid = fb_recorder_nstreams(rk->rec) + 1;
    meta(f, first, "thread_name", pid, steps_tid, "name", "steps", 0);
    meta(f, first, "thread_sort_index", pid, steps_tid, "sort_index", NULL, 0);
    st = write_rank_ops(f, first, r, rk, pid, origin);
    if (st == FB_OK) write_rank_steps(f, first, r, rk, pid, origin);
    if (st == FB_OK) write_rank_counters(f, first, rk, pid, origin);
  }
  /* GPU-side timeline from CUPTI (in the CUDA module, loaded only if a GPU run used it), as its
   * own process beside the rank's host-side tracks; the CUDA API calls that launched its
   * kernels go on the rank's own process (host time, one track per calling thread) */
  const fb_cuda_module *cm = fb_cuda_module_loaded();
  if (st == FB_OK && cm && cm->cupti_rank() >= 0 && hi > lo) {
    const int gpid = 1000 + cm->cupti_rank() + pid_offset;
    char pname[64];
    snprintf(pname, sizeof pname, "rank %d GPU (CUPTI)%s", cm->cupti_rank(), suffix);
    meta(f, first, "process_name", gpid, 0, "name", pname, 0);
    meta(f, first, "process_sort_index", gpid, 0, "sort_index", NULL, gpid);
    st = cm->cupti_write_events(f, gpid, cm->cupti_rank() + pid_offset, -origin * 1e6, first);
  }
  return st;
}

/* Writes ranks [lo, hi) of r into dir/name. */
static fb_status write_file(const char *dir, const char *name, const fb_run_result *r, int lo,
                            int hi) {
  FILE *f;
  FB_TRY(fb_json_open(dir, name, &f));
  fputs("{\"displayTimeUnit\":\"ms\",", f);
  write_other_data(f, r, lo, hi);
  fputs(",\"traceEvents\":[", f);
  bool first = true;
  fb_status st = write_events(f, &first, r, lo, hi, 0, "");
  fputs("\n]}\n", f);
  if (st != FB_OK) fb_json_discard(f); /* no half trace left behind */
  return st != FB_OK ? st : fb_json_close(f, name);
}

fb_status fb_trace_write_pair(const char *dir, const char *name, const fb_run_result *a,
                              const char *a_suffix, const fb_run_result *b,
                              const char *b_suffix) {
  FB_TRY(fb_mkdir_p(dir));
  FILE *f;
  FB_TRY(fb_json_open(dir, name, &f));
  fputs("{\"displayTimeUnit\":\"ms\",", f);
  write_other_data(f, a, 0, a->nranks);
  fputs(",\"traceEvents\":[", f);
  bool first = true;
  fb_status st = write_events(f, &first, a, 0, a->nranks, 0, a_suffix);
  if (st == FB_OK) st = write_events(f, &first, b, 0, b->nranks, FB_TRACE_PAIR_PID_OFFSET, b_suffix);
  fputs("\n]}\n", f);
  if (st != FB_OK) fb_json_discard(f); /* no half trace left behind */
  return st != FB_OK ? st : fb_json_close(f, name);
}

/* Whether any rank of this process kept a traced step's events. */
static bool traced_any(const fb_run_result *r) {
  for (int i = 0; i < r->nranks; i++) {
    int64_t n = 0;
    if (r->ranks[i].rec) fb_recorder_ops(r->ranks[i].rec, &n);
    if (n > 0) return true;
  }
  return false;
}

static void warn_untraced(const fb_run_result *r) {
  const fb_run_config *c = &r->cfg;
  if (r->nranks <= 0 || r->ranks[0].rank != 0) return; /* one line per run */
  const int from = c->trace_wait + c->trace_warmup;
  fprintf(stderr, "fsdpbench: warning: --trace: no step was traced (--trace-steps %d,%d,%d "
                  "records steps %d..%d; this run did steps %d..%d); no trace written\n",
          c->trace_wait, c->trace_warmup, c->trace_active, fb_step_number(from),
          fb_step_number(c->trace_active > 0 ? from + c->trace_active - 1 : c->steps - 1),
          fb_step_number(r->first_step),
          fb_step_number(r->first_step + r->nsteps - 1));
}

fb_status fb_trace_write(const char *dir, const fb_run_result *r) {
  assert(r);
  if (!traced_any(r)) {
    warn_untraced(r);
    return FB_OK;
  }
  FB_TRY(fb_mkdir_p(dir));
  if (r->nranks == r->world) return write_file(dir, "trace.json", r, 0, r->nranks);
  for (int i = 0; i < r->nranks; i++) {
    char name[64];
    snprintf(name, sizeof name, "rank%d_trace.json", r->ranks[i].rank);
    FB_TRY(write_file(dir, name, r, i, i + 1));
  }
  return FB_OK;
}
