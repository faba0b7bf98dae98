/* Kineto-shaped per-rank traces for HTA (kineto_trace.h). Reads the recorders of
 * fb_run_result (and, on cuda, CUPTI's records through the module's table); changes nothing. */
#include "kineto_trace.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "../engine/backends/cuda_module.h"
#include "../engine/core/json_out.h"

enum { HOST_PID_BASE = 100000, HOST_TID = 1, STREAM_BASE = 7, NAME_LEN = 160 };

/* Integer microseconds of CLOCK_REALTIME for recorder time t, the nearest one. */
static int64_t us_of(const fb_recorder *rec, double t) {
  const int64_t ns = fb_recorder_realtime_ns(rec, t);
  return ns >= 0 ? (ns + 500) / 1000 : -((-ns + 500) / 1000);
}

/* Tracks that are device streams: "compute*" and "comm*" (runner.c); "host" is the host's. */
static bool device_track(const fb_recorder *rec, int tr) {
  const char *n = fb_recorder_stream_name(rec, tr);
  return !strncmp(n, "compute", 7) || !strncmp(n, "comm", 4);
}

/* NCCL's dtype spelling in kernel names. */
static const char *nccl_dtype(fb_dtype t) {
  return t == FB_BF16 ? "bf16" : t == FB_F64 ? "f64" : "f32";
}

/* The kernel's name: a collective as NCCL names its kernel (HTA 0.5 counts a kernel matching
 * "^nccl.*Kernel" as communication, later versions "^nccl"), any other op of a compute stream
 * by its own name, and any other op of a comm stream (a staging copy) as
 * "ncclDevKernel_Stage(<op>)": the report counts all of a comm stream's time as
 * communication, and HTA must too for the two to agree. */
static const char *kernel_name(const fb_run_result *r, const fb_rank_result *rk,
                               const fb_rec_op *o, char *buf) {
  if (o->kind != FB_OP_COLL && strncmp(fb_recorder_stream_name(rk->rec, o->stream), "comm", 4))
    return o->name;
  if (o->kind != FB_OP_COLL) {
    snprintf(buf, NAME_LEN, "ncclDevKernel_Stage(%s)", o->name);
    return buf;
  }
  static const char *const coll[FB_NCOLL] = {
      [FB_COLL_ALL_GATHER] = "AllGather",   [FB_COLL_REDUCE_SCATTER] = "ReduceScatter_Sum_",
      [FB_COLL_ALL_REDUCE] = "AllReduce_Sum_", [FB_COLL_BROADCAST] = "Broadcast",
      [FB_COLL_REDUCE] = "Reduce_Sum_",    [FB_COLL_BARRIER] = "AllReduce_Sum_",
      [FB_COLL_ALL_TO_ALL] = "SendRecv"}; /* NCCL runs all-to-all as grouped send/recv */
  const char *c = o->coll >= 0 && o->coll < FB_NCOLL && coll[o->coll] ? coll[o->coll] : "SendRecv";
  const bool typed = c[strlen(c) - 1] == '_';
  snprintf(buf, NAME_LEN, "ncclDevKernel_%s%s_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
           c, typed ? nccl_dtype(r->cfg.reduce_dtype) : "");
  return buf;
}

static void sep(FILE *f, bool *first) {
  fputs(*first ? "\n" : ",\n", f);
  *first = false;
}

static void put_x(FILE *f, bool *first, const char *name, const char *cat, int pid, int tid,
                  int64_t ts, int64_t dur) {
  sep(f, first);
  fputs("{\"ph\":\"X\",\"cat\":", f);
  fb_json_str(f, cat);
  fputs(",\"name\":", f);
  fb_json_str(f, name);
  fprintf(f, ",\"pid\":%d,\"tid\":%d,\"ts\":%lld,\"dur\":%lld,\"args\":{", pid, tid,
          (long long)ts, (long long)(dur < 0 ? 0 : dur));
}

/* One recorder op on a device stream: the kernel and its launch (same correlation id). */
static void put_kernel(FILE *f, bool *first, const fb_run_result *r, const fb_rank_result *rk,
                       const fb_rec_op *o, int64_t corr, int dev) {
  char buf[NAME_LEN], module[NAME_LEN];
  const int64_t t0 = us_of(rk->rec, o->t0), t1 = us_of(rk->rec, o->t1);
  const int stream = STREAM_BASE + o->stream;
  put_x(f, first, kernel_name(r, rk, o, buf), "kernel", dev, stream, t0, t1 - t0);
  fprintf(f, "\"device\":%d,\"stream\":%d,\"correlation\":%lld,\"External id\":%lld,\"op\":", dev,
          stream, (long long)corr, (long long)corr);
  fb_json_str(f, o->name);
  fputs(",\"module\":", f);
  fb_json_str(f, fb_model_op_name(&r->model, o->unit, o->param, o->name, o->kind == FB_OP_COLL,
                                  module, NAME_LEN));
  fputs(",\"bytes\":", f);
  fb_json_num(f, o->bytes);
  fputs(",\"flops\":", f);
  fb_json_num(f, o->flops);
  fprintf(f, ",\"step\":%d}}", fb_step_number(o->step));
  put_x(f, first, "cudaLaunchKernel", "cuda_runtime", HOST_PID_BASE + rk->rank, HOST_TID, t0, 0);
  fprintf(f, "\"correlation\":%lld,\"External id\":%lld}}", (long long)corr, (long long)corr);
}

/* The host side: ProfilerStep#N per traced step, the recorder's host spans. */
static void put_host(FILE *f, bool *first, const fb_run_result *r, const fb_rank_result *rk) {
  int64_t n;
  const fb_rec_op *ops = fb_recorder_ops(rk->rec, &n);
  const int pid = HOST_PID_BASE + rk->rank;
  int last = -1;
  int64_t end = 0;
  char name[48];
  for (int k = 0; k < r->nsteps && rk->steps; k++) {
    const int step = r->first_step + k;
    bool kept = false;
    for (int64_t i = 0; i < n && !kept; i++) kept = ops[i].step == step;
    if (!kept) continue;
    snprintf(name, sizeof name, "ProfilerStep#%d", fb_step_number(step));
    const int64_t t0 = us_of(rk->rec, rk->steps[k].t_start);
    end = us_of(rk->rec, rk->steps[k].t_end);
    put_x(f, first, name, "cpu_op", pid, HOST_TID, t0, end - t0);
    fputs("\"External id\":0}}", f);
    last = step;
  }
  /* PyTorch's profiler opens the step after the last active one before it stops, and HTA
   * leaves that last, partial step out of its analyses. An empty ProfilerStep#N+1 at the end
   * of the last traced step plays that part, so HTA analyses every traced step. */
  if (last >= 0) {
    snprintf(name, sizeof name, "ProfilerStep#%d", fb_step_number(last + 1));
    put_x(f, first, name, "cpu_op", pid, HOST_TID, end, 0);
    fputs("\"External id\":0,\"closes the trace\":true}}", f);
  }
  for (int64_t i = 0; i < n; i++) {
    if (device_track(rk->rec, ops[i].stream)) continue;
    const int64_t t0 = us_of(rk->rec, ops[i].t0);
    put_x(f, first, ops[i].name, "cpu_op", pid, HOST_TID, t0, us_of(rk->rec, ops[i].t1) - t0);
    fprintf(f, "\"step\":%d}}", fb_step_number(ops[i].step));
  }
}

static void put_meta(FILE *f, bool *first, const char *what, int pid, int tid, const char *name) {
  sep(f, first);
  fprintf(f, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":0,\"args\":{\"name\":",
          what, pid, tid);
  fb_json_str(f, name);
  fputs("}}", f);
}

/* The device side from the recorder (cpu, sim; cuda without CUPTI). */
static void put_device(FILE *f, bool *first, const fb_run_result *r, const fb_rank_result *rk,
                       int dev) {
  int64_t n;
  const fb_rec_op *ops = fb_recorder_ops(rk->rec, &n);
  for (int tr = 0; tr < fb_recorder_nstreams(rk->rec); tr++) {
    if (!device_track(rk->rec, tr)) continue;
    char nm[64];
    snprintf(nm, sizeof nm, "stream %d (%s)", STREAM_BASE + tr,
             fb_recorder_stream_name(rk->rec, tr));
    put_meta(f, first, "thread_name", dev, STREAM_BASE + tr, nm);
  }
  for (int64_t i = 0; i < n; i++)
    if (device_track(rk->rec, ops[i].stream)) put_kernel(f, first, r, rk, &ops[i], i + 1, dev);
}

static void put_header(FILE *f, const fb_run_result *r, const fb_rank_result *rk, int dev) {
  fputs("{\n\"distributedInfo\": {\"backend\": ", f);
  fb_json_str(f, r->comm);
  fprintf(f, ", \"rank\": %d, \"world_size\": %d},\n\"schemaVersion\": 1,\n", rk->rank, r->world);
  fprintf(f, "\"deviceProperties\": [{\"id\": %d, \"name\": ", dev);
  fb_json_str(f, r->hardware);
  fprintf(f, ", \"totalGlobalMem\": %lld}],\n", (long long)r->mem_capacity);
  fputs("\"fsdpbench\": {\"times\": ", f);
  fb_json_str(f, r->predicted ? "predicted" : "measured");
  fputs(", \"backend\": ", f);
  fb_json_str(f, r->backend);
  fputs(", \"model\": ", f);
  fb_json_str(f, r->cfg.model);
  fputs(", \"strategy\": ", f);
  fb_json_str(f, r->cfg.strategy);
  fputs(", \"param_dtype\": ", f);
  fb_json_str(f, fb_dtype_name(r->cfg.param_dtype));
  fputs(", \"reduce_dtype\": ", f);
  fb_json_str(f, fb_dtype_name(r->cfg.reduce_dtype));
  fputs("},\n\"displayTimeUnit\": \"ms\",\n\"baseTimeNanoseconds\": 0,\n\"traceEvents\": [", f);
}

static fb_status write_rank(const char *dir, const fb_run_result *r, const fb_rank_result *rk) {
  char name[64], pname[160];
  snprintf(name, sizeof name, "rank-%d.json", rk->rank);
  const int dev = rk->rank;
  FILE *f;
  FB_TRY(fb_json_open(dir, name, &f));
  put_header(f, r, rk, dev);
  bool first = true;
  snprintf(pname, sizeof pname, "rank %d host", rk->rank);
  put_meta(f, &first, "process_name", HOST_PID_BASE + rk->rank, 0, pname);
  snprintf(pname, sizeof pname, "rank %d %s %s", rk->rank, r->hardware,
           r->predicted ? "(predicted)" : "(measured)");
  put_meta(f, &first, "process_name", dev, 0, pname);
  put_host(f, &first, r, rk);
  const fb_cuda_module *cm = fb_cuda_module_loaded();
  fb_status st = FB_OK;
  if (cm && cm->cupti_rank() == rk->rank && cm->cupti_write_kineto)
    st = cm->cupti_write_kineto(f, dev, HOST_PID_BASE + rk->rank,
                                (double)fb_recorder_realtime_ns(rk->rec, 0) * 1e-3, &first);
  else
    put_device(f, &first, r, rk, dev);
  fputs("\n]}\n", f);
  if (st != FB_OK) {
    fb_json_discard(f);
    return st;
  }
  return fb_json_close(f, name);
}

fb_status fb_kineto_write(const char *dir, const fb_run_result *r) {
  assert(r);
  bool any = false;
  for (int i = 0; i < r->nranks && !any; i++) {
    int64_t n = 0;
    if (r->ranks[i].rec) fb_recorder_ops(r->ranks[i].rec, &n);
    any = n > 0;
  }
  if (!any) return FB_OK;
  char sub[4096];
  if (snprintf(sub, sizeof sub, "%s/%s", dir, FB_KINETO_DIR) >= (int)sizeof sub)
    return FB_ERR(FB_EUSAGE, "--out: path too long: '%s/%s'", dir, FB_KINETO_DIR);
  FB_TRY(fb_mkdir_p(sub));
  for (int i = 0; i < r->nranks; i++)
    if (r->ranks[i].rec) FB_TRY(write_rank(sub, r, &r->ranks[i]));
  return FB_OK;
}
