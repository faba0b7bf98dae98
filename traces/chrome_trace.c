/* Chrome-trace writer (chrome_trace.h). Times are converted to integer nanoseconds from the
 * run's origin first, so nesting repairs and the printed microseconds (3 decimals) are exact.
 * It reads the recorders of fb_run_result; it does not change them. */
#include "chrome_trace.h"

#ifdef FB_HAVE_CUDA
#include "../engine/device/cupti.h"
#endif

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/core/json_out.h"

typedef struct slice {
  int64_t t0, t1;       /* ns from origin */
  const fb_rec_op *op;
} slice;

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
 * leaves partial overlaps) a strict sequence as the fallback. */
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

static const char *op_cat(const fb_rec_op *o) {
  static const char *const kind[FB_OP_NKIND] = {[FB_OP_GEMM] = "gemm", [FB_OP_ATTN] = "attn",
                                                [FB_OP_MEM] = "mem", [FB_OP_OPTIM] = "optim",
                                                [FB_OP_COLL] = "collective"};
  if (o->kind == FB_OP_COLL && o->coll >= 0 && o->coll < FB_NCOLL) return fb_coll_name(o->coll);
  if (o->kind >= 0 && o->kind < FB_OP_NKIND) return kind[o->kind];
  return "span";
}

static void put_us(FILE *f, int64_t ns) {
  if (ns < 0) ns = 0;
  fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
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
  fputs(*first ? "\n" : ",\n", f);
  *first = false;
  fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":", name, pid,
          tid, key);
  if (sval) fb_json_str(f, sval);
  else fprintf(f, "%d", ival);
  fputs("}}", f);
}

static fb_status write_rank_ops(FILE *f, bool *first, const fb_rank_result *rk, int pid,
                                 double origin) {
  const fb_recorder *rec = rk->rec;
  int64_t n;
  const fb_rec_op *ops = fb_recorder_ops(rec, &n);
  int ntr = fb_recorder_nstreams(rec);
  slice *s = malloc((size_t)(n ? n : 1) * sizeof *s);
  int64_t *stack = malloc((size_t)(n ? n : 1) * sizeof *stack);
  if (!s || !stack) {
    free(s);
    free(stack);
    return FB_ERR(FB_ENOMEM, "trace: out of host memory (%lld events)", (long long)n);
  }
  for (int tr = 0; tr < ntr; tr++) {
    int64_t m = 0;
    for (int64_t k = 0; k < n; k++) {
      if (ops[k].stream != tr) continue;
      s[m].t0 = to_ns(ops[k].t0, origin);
      s[m].t1 = to_ns(ops[k].t1, origin);
      if (s[m].t0 < 0) s[m].t0 = 0;
      if (s[m].t1 < s[m].t0) s[m].t1 = s[m].t0;
      s[m].op = &ops[k];
      m++;
    }
    make_nested(s, m, stack);
    for (int64_t k = 0; k < m; k++) {
      const fb_rec_op *o = s[k].op;
      fputs(*first ? "\n" : ",\n", f);
      *first = false;
      fputs("{\"name\":", f);
      fb_json_str(f, o->name);
      fputs(",\"cat\":", f);
      fb_json_str(f, op_cat(o));
      fprintf(f, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", pid, tr + 1);
      put_us(f, s[k].t0);
      fputs(",\"dur\":", f);
      put_us(f, s[k].t1 - s[k].t0);
      fputs(",\"args\":{\"bytes\":", f);
      fb_json_num(f, o->bytes);
      fputs(",\"flops\":", f);
      fb_json_num(f, o->flops);
      fprintf(f, ",\"unit\":%d,\"step\":%d,\"micro\":%d}}", o->unit, o->step, o->micro);
    }
  }
  free(s);
  free(stack);
  return FB_OK;
}

/* A "steps" track (tid = tracks + 1): one slice per traced step, from step begin to end, like
 * torch.profiler's ProfilerStep#N. */
static fb_status write_rank_steps(FILE *f, bool *first, const fb_run_result *r,
                                  const fb_rank_result *rk, int pid, double origin) {
  int64_t n;
  const fb_rec_op *ops = fb_recorder_ops(rk->rec, &n);
  if (r->nsteps <= 0 || !rk->steps) return FB_OK;
  bool *traced = calloc((size_t)r->nsteps, sizeof *traced);
  if (!traced) return FB_ERR(FB_ENOMEM, "trace: out of host memory");
  for (int64_t k = 0; k < n; k++)
    if (ops[k].step >= 0 && ops[k].step < r->nsteps) traced[ops[k].step] = true;
  int tid = fb_recorder_nstreams(rk->rec) + 1;
  int64_t end = 0;
  for (int k = 0; k < r->nsteps; k++) {
    if (!traced[k]) continue;
    int64_t t0 = to_ns(rk->steps[k].t_start, origin), t1 = to_ns(rk->steps[k].t_end, origin);
    if (t0 < end) t0 = end;
    if (t1 < t0) t1 = t0;
    end = t1;
    fputs(*first ? "\n" : ",\n", f);
    *first = false;
    fprintf(f, "{\"name\":\"step %d\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
               "\"ts\":", k, pid, tid);
    put_us(f, t0);
    fputs(",\"dur\":", f);
    put_us(f, t1 - t0);
    fprintf(f, ",\"args\":{\"step\":%d,\"ops\":%d,\"flops\":", k, rk->steps[k].n_ops);
    fb_json_num(f, rk->steps[k].flops);
    fputs("}}", f);
  }
  free(traced);
  return FB_OK;
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
    fputs(*first ? "\n" : ",\n", f);
    *first = false;
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

static void write_other_data(FILE *f, const fb_run_result *r) {
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
  fprintf(f, ",\"predicted\":%s,\"time_unit\":\"us from the run start\"}",
          r->predicted ? "true" : "false");
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
    st = write_rank_ops(f, first, rk, pid, origin);
    if (st == FB_OK) st = write_rank_steps(f, first, r, rk, pid, origin);
    if (st == FB_OK) write_rank_counters(f, first, rk, pid, origin);
  }
#ifdef FB_HAVE_CUDA
  /* GPU-side timeline from CUPTI, as its own process beside the rank's host-side tracks */
  if (st == FB_OK && fb_cupti_rank() >= 0 && hi > lo) {
    const int gpid = 1000 + fb_cupti_rank() + pid_offset;
    char pname[64];
    snprintf(pname, sizeof pname, "rank %d GPU (CUPTI)%s", fb_cupti_rank(), suffix);
    meta(f, first, "process_name", gpid, 0, "name", pname, 0);
    st = fb_cupti_write_events(f, gpid, -origin * 1e6, first);
  }
#endif
  return st;
}

/* Writes ranks [lo, hi) of r into dir/name. */
static fb_status write_file(const char *dir, const char *name, const fb_run_result *r, int lo,
                            int hi) {
  FILE *f;
  FB_TRY(fb_json_open(dir, name, &f));
  fputs("{\"displayTimeUnit\":\"ms\",", f);
  write_other_data(f, r);
  fputs(",\"traceEvents\":[", f);
  bool first = true;
  fb_status st = write_events(f, &first, r, lo, hi, 0, "");
  fputs("\n]}\n", f);
  fb_status cst = fb_json_close(f, name);
  return st != FB_OK ? st : cst;
}

fb_status fb_trace_write_pair(const char *dir, const char *name, const fb_run_result *a,
                              const char *a_suffix, const fb_run_result *b,
                              const char *b_suffix) {
  FB_TRY(fb_mkdir_p(dir));
  FILE *f;
  FB_TRY(fb_json_open(dir, name, &f));
  fputs("{\"displayTimeUnit\":\"ms\",", f);
  write_other_data(f, a);
  fputs(",\"traceEvents\":[", f);
  bool first = true;
  fb_status st = write_events(f, &first, a, 0, a->nranks, 0, a_suffix);
  if (st == FB_OK) st = write_events(f, &first, b, 0, b->nranks, FB_TRACE_PAIR_PID_OFFSET, b_suffix);
  fputs("\n]}\n", f);
  fb_status cst = fb_json_close(f, name);
  return st != FB_OK ? st : cst;
}

fb_status fb_trace_write(const char *dir, const fb_run_result *r) {
  assert(r);
  FB_TRY(fb_mkdir_p(dir));
  if (r->nranks == r->world) return write_file(dir, "trace.json", r, 0, r->nranks);
  for (int i = 0; i < r->nranks; i++) {
    char name[64];
    snprintf(name, sizeof name, "rank%d_trace.json", r->ranks[i].rank);
    FB_TRY(write_file(dir, name, r, i, i + 1));
  }
  return FB_OK;
}
