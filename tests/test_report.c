/* Report, CSV/JSON records, Chrome trace and memory snapshot on a hand-made run result:
 * 2 ranks x 3 steps whose timelines come from real recorders on a fake device (tickets this
 * test controls). Checks the table's header and units rows, the medians and derived rates,
 * the 17-digit parameter sum, the predicted labels, the files and their documented header
 * lines, and (with python3) the trace and snapshot structure through tests/check_trace.py,
 * including the repair of partially overlapping slices on one track. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "apps/report.h"
#include "traces/chrome_trace.h"
#include "traces/memory_snapshot.h"

static double fake_now;
static double fake_ticket[4096];
static uint64_t next_ticket;
static double f_now(fb_device *d) { (void)d; return fake_now; }
static uint64_t f_mark(fb_device *d, fb_stream *s) { (void)d; (void)s; return 0; }
static double f_mark_time(fb_device *d, uint64_t t) { (void)d; return fake_ticket[t]; }
static void f_marks_reset(fb_device *d) { (void)d; }
static const fb_device_ops fake_ops = {.name = "fake", .now = f_now, .mark = f_mark,
                                       .mark_time = f_mark_time, .marks_reset = f_marks_reset};
static char s_compute_obj[2], s_comm_obj[2];

enum { NRANK = 2, NSTEP = 3 };
static fb_device devs[NRANK];
static const double walls_ms[NSTEP] = {10, 2, 4};

static void op(fb_recorder *r, fb_stream *s, const char *name, fb_op_kind kind, fb_coll cl,
               double t0, double t1) {
  uint64_t k0 = next_ticket++, k1 = next_ticket++;
  fake_ticket[k0] = t0;
  fake_ticket[k1] = t1;
  fb_op_cost c = {.name = name, .kind = kind, .coll = cl, .dtype = FB_F32, .count = 250,
                  .world = NRANK, .flops = kind == FB_OP_GEMM ? 1e6 : 0, .bytes = 1000};
  fb_recorder_op(r, s, &c, 1, k0, k1);
}

static void mem(fb_recorder *r, fb_mem_stats *ms, int64_t id, fb_mem_cat cat, int64_t delta,
                const char *label) {
  fb_buf b = {.bytes = (size_t)llabs(delta), .cat = cat, .id = id, .label = label};
  ms->cur[cat] += delta;
  ms->cur_total += delta;
  if (ms->cur[cat] > ms->peak[cat]) ms->peak[cat] = ms->cur[cat];
  if (ms->cur_total > ms->peak_total) {
    ms->peak_total = ms->cur_total;
    memcpy(ms->at_peak, ms->cur, sizeof ms->at_peak);
  }
  fb_recorder_mem(r, fake_now, &b, delta, ms);
}

/* Builds the result: every step has compute [T, T+0.75w] (split in two ops that partially
 * overlap in step 2: timer noise), an all-gather [T+0.5w, T+w] and a reduce-scatter inside
 * the compute; memory: params at setup, activations per step, one gradient buffer left. */
static void build(fb_run_result *r, bool predicted) {
  memset(r, 0, sizeof *r);
  snprintf(r->cfg.model, sizeof r->cfg.model, "debug");
  snprintf(r->cfg.strategy, sizeof r->cfg.strategy, "fsdp");
  r->cfg.batch = 4;
  r->cfg.seq = 64;
  r->cfg.micro_batch = 2;
  r->cfg.steps = NSTEP;
  r->cfg.param_dtype = r->cfg.reduce_dtype = FB_F32;
  snprintf(r->backend, sizeof r->backend, predicted ? "sim" : "cpu");
  snprintf(r->comm, sizeof r->comm, predicted ? "sim" : "local");
  snprintf(r->hardware, sizeof r->hardware, "test \"hw\"");
  r->predicted = predicted;
  r->world = NRANK;
  r->nranks = NRANK;
  r->nsteps = NSTEP;
  r->model.numel = 1000; /* psi = 4000 B */
  r->peak_flops = 2e12;
  r->tokens_per_step = 256;
  r->model_flops_per_step = 6e9;
  r->param_sum = predicted ? NAN : 0.1;
  r->loss = calloc(NSTEP, sizeof *r->loss);
  r->grad_norm = calloc(NSTEP, sizeof *r->grad_norm);
  r->lr = calloc(NSTEP, sizeof *r->lr);
  for (int k = 0; k < NSTEP; k++) {
    r->loss[k] = predicted ? NAN : 5.5 - k;
    r->grad_norm[k] = predicted ? NAN : 1.25;
    r->lr[k] = 1e-3;
  }
  r->ranks = calloc(NRANK, sizeof *r->ranks);
  next_ticket = 0;
  for (int i = 0; i < NRANK; i++) {
    fb_rank_result *rk = &r->ranks[i];
    memset(&devs[i], 0, sizeof devs[i]);
    devs[i].ops = &fake_ops;
    devs[i].rank = i;
    devs[i].world = NRANK;
    rk->rank = i;
    rk->zero3_imbalance = 1;
    rk->steps = calloc(NSTEP, sizeof *rk->steps);
    fb_rec_config cfg = {.trace = true, .mem_timeline = true};
    CHECK_OK(fb_recorder_create(&devs[i], &cfg, &rk->rec));
    fb_stream *sc = (fb_stream *)&s_compute_obj[i], *sm = (fb_stream *)&s_comm_obj[i];
    fb_recorder_stream(rk->rec, sc, "compute");
    fb_recorder_stream(rk->rec, sm, "comm");
    fb_mem_stats ms = {0};
    fake_now = 0.001;
    mem(rk->rec, &ms, 1, FB_MEM_PARAM_SHARD, 2000, "fsdp.shard");
    mem(rk->rec, &ms, 2, FB_MEM_OPTIM, 4000, "adamw.mv");
    rk->persistent_bytes = 6000;
    double T = 0.002;
    for (int k = 0; k < NSTEP; k++) {
      double w = walls_ms[k] * 1e-3;
      fake_now = T;
      fb_recorder_step_begin(rk->rec, k, 0);
      mem(rk->rec, &ms, 100 + 2 * k, FB_MEM_PARAM_FULL, 4000, "fsdp.gather");
      mem(rk->rec, &ms, 101 + 2 * k, FB_MEM_ACT, 8192, "act \"block\"");
      if (k == 2) {
        op(rk->rec, sc, "matmul_fwd", FB_OP_GEMM, FB_NCOLL, T, T + 0.5 * w);
        op(rk->rec, sc, "matmul_bwd", FB_OP_GEMM, FB_NCOLL, T + 0.45 * w, T + 0.75 * w);
      } else {
        op(rk->rec, sc, "matmul_fwd", FB_OP_GEMM, FB_NCOLL, T, T + 0.75 * w);
      }
      op(rk->rec, sm, "all_gather", FB_OP_COLL, FB_COLL_ALL_GATHER, T + 0.5 * w, T + w);
      op(rk->rec, sm, "reduce_scatter", FB_OP_COLL, FB_COLL_REDUCE_SCATTER, T + 0.1 * w,
         T + 0.2 * w);
      fb_recorder_span(rk->rec, "forward", T, T + 0.5 * w);
      fake_now = T + 0.9 * w;
      mem(rk->rec, &ms, 101 + 2 * k, FB_MEM_ACT, -8192, "act \"block\"");
      mem(rk->rec, &ms, 100 + 2 * k, FB_MEM_PARAM_FULL, -4000, "fsdp.gather");
      CHECK_OK(fb_recorder_step_end(rk->rec, &rk->steps[k]));
      T += w + 0.001;
    }
    mem(rk->rec, &ms, 50, FB_MEM_GRAD_FULL, 512, "left.over");
    rk->mem = ms;
  }
}

static void drop(fb_run_result *r) {
  for (int i = 0; i < r->nranks; i++) {
    fb_recorder_destroy(r->ranks[i].rec);
    free(r->ranks[i].steps);
  }
  free(r->ranks);
  free(r->loss);
  free(r->grad_norm);
  free(r->lr);
}

static char *print_to_string(const fb_run_result *r) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fb_report_print(f, r);
  fclose(f);
  return buf;
}

static bool file_first_line(const char *dir, const char *name, const char *want) {
  char path[512], line[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fgets(line, sizeof line, f) && !strncmp(line, want, strlen(want)) &&
            line[strlen(want)] == '\n';
  fclose(f);
  return ok;
}

static bool have_python(void) { return system("python3 -c 'import json' >/dev/null 2>&1") == 0; }

static int run_checker(const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "python3 tests/check_trace.py %s", args);
  return system(cmd);
}

static void test_measured(void) {
  fb_run_result r;
  build(&r, false);
  fb_rank_summary s;
  fb_report_summary(&r, 0, &s);
  /* measured steps 1 and 2 (walls 2 and 4 ms): median 3 ms, means of 0.75w / 0.6w / 0.25w */
  CHECK_CLOSE(s.step_s, 0.003, 1e-9, 0);
  CHECK_CLOSE(s.compute_s, 0.00225, 1e-9, 0);
  CHECK_CLOSE(s.comm_s, 0.0018, 1e-9, 0); /* 0.5w all-gather + 0.1w reduce-scatter */
  CHECK_CLOSE(s.exposed_s, 0.00075, 1e-9, 0);
  CHECK_CLOSE(s.overlap, 1 - 0.75 / 1.8, 1e-9, 0);
  CHECK_CLOSE(s.tflops, 1.0, 1e-9, 0);
  CHECK_CLOSE(s.peak_pct, 50.0, 1e-9, 0);
  CHECK_CLOSE(s.tokens_per_s, 256 / 0.003, 1e-9, 0);
  CHECK_CLOSE(s.tokens_per_s_rank, 128 / 0.003, 1e-9, 0);
  /* ledger: AG + RS of 250 fp32 per rank on 2 ranks = 2000 B each per step */
  CHECK_CLOSE(s.coll_bytes[FB_COLL_ALL_GATHER], 2000, 0, 0);
  CHECK_CLOSE(s.coll_bytes[FB_COLL_REDUCE_SCATTER], 2000, 0, 0);
  CHECK_CLOSE(s.wire_bytes[FB_COLL_ALL_GATHER], 1000, 0, 1e-9);
  fb_rank_summary m;
  fb_report_summary(&r, -1, &m);
  CHECK_CLOSE(m.step_s, 0.003, 1e-9, 0);
  CHECK(m.overlap >= 0 && m.overlap <= 1, "overlap %g", m.overlap);

  char *out = print_to_string(&r);
  CHECK(strstr(out, "# fsdpbench report: model debug, strategy fsdp") != NULL, "banner");
  CHECK(strstr(out, "TFLOP/s") && strstr(out, "exposed") && strstr(out, "overlap"), "header");
  CHECK(strstr(out, "(ms)") && strstr(out, "(global)") && strstr(out, "(MiB)"), "units rows");
  CHECK(strstr(out, "final param sum: 0.10000000000000001\n") != NULL, "17 digits:\n%s", out);
  CHECK(strstr(out, "(pred)") == NULL && strstr(out, "PREDICTED") == NULL, "not predicted");
  CHECK(strstr(out, "     3.000 ") != NULL, "median step time 3.000 ms in the table");
  CHECK(strstr(out, "   58.3\n") != NULL, "overlap 58.3 %% in the table");
  CHECK(strstr(out, "all_gather") && strstr(out, "reduce_scatter"), "ledger rows");
  /* step numbers as the step log line prints them (1-based, fb_step_number) */
  CHECK(strstr(out, "loss: first 5.5 (step 1), last 3.5 (step 3)") != NULL, "loss line");
  free(out);

  char dir[] = "/tmp/fb_test_report_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char sub[128];
  snprintf(sub, sizeof sub, "%s/a/b", dir);
  CHECK_OK(fb_report_write(sub, &r));
  CHECK(file_first_line(sub, "summary.csv",
                        "rank,step_ms,tokens_per_s,tokens_per_s_rank,tflops,peak_pct,compute_ms,"
                        "comm_ms,exposed_ms,overlap,peak_bytes,persistent_bytes,coll_bytes,"
                        "wire_bytes,predicted"), "summary.csv header");
  CHECK(file_first_line(sub, "steps.csv",
                        "rank,step,wall_ms,compute_ms,comm_ms,exposed_ms,tflops,loss,grad_norm,"
                        "lr,all_gather_bytes,reduce_scatter_bytes,all_reduce_bytes,"
                        "broadcast_bytes,reduce_bytes,barrier_bytes,all_to_all_bytes"), "steps.csv header");
  CHECK(file_first_line(sub, "memory.csv",
                        "rank,category,peak_bytes,at_peak_bytes,final_bytes"), "memory.csv");
  CHECK(file_first_line(sub, "ledger.csv", "rank,coll,bytes_per_step,wire_bytes_per_step,"
                                           "time_ms_per_step,psi_ratio,intra_node_wire_bytes_per_step,"
                                           "inter_node_wire_bytes_per_step"), "ledger.csv");
  char path[1024];
  snprintf(path, sizeof path, "%s/report.json", sub);
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && sb.st_size > 100, "report.json written");

  CHECK_OK(fb_trace_write(dir, &r));
  CHECK_OK(fb_memsnap_write(dir, &r));
  snprintf(path, sizeof path, "%s/trace.json", dir);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "merged trace.json when all ranks are in this process");
  if (f) {
    char head[64] = {0};
    CHECK(fread(head, 1, 20, f) == 20 && !strncmp(head, "{\"displayTimeUnit\"", 18),
          "trace starts as a JSON object: %s", head);
    fclose(f);
  }
  if (have_python()) {
    char args[1600];
    snprintf(args, sizeof args,
             "%s/trace.json --world 2 --threads compute,comm,host --snapshot "
             "%s/rank0_memory_snapshot.pickle --snapshot %s/rank1_memory_snapshot.pickle",
             dir, dir, dir);
    CHECK(run_checker(args) == 0, "check_trace.py %s", args);
    snprintf(args, sizeof args,
             "-c 'import json,sys; d=json.load(open(\"%s/a/b/report.json\")); "
             "sys.exit(0 if d[\"param_sum\"]==0.1 and len(d[\"ranks\"])==2 and "
             "d[\"config\"][\"hardware\"]==\"test \\\"hw\\\"\" else 1)'", dir);
    char cmd[1800];
    snprintf(cmd, sizeof cmd, "python3 %s", args);
    CHECK(system(cmd) == 0, "report.json parses and echoes the config: %s", cmd);
  } else {
    fprintf(stderr, "test_report: python3 missing, JSON structure checks skipped\n");
  }

  /* Ranks of a larger run (mpi): one file per rank held. */
  r.world = 4;
  char dir2[128];
  snprintf(dir2, sizeof dir2, "%s/mpi", dir);
  CHECK_OK(fb_trace_write(dir2, &r));
  snprintf(path, sizeof path, "%s/rank1_trace.json", dir2);
  CHECK(stat(path, &sb) == 0, "rank1_trace.json");
  snprintf(path, sizeof path, "%s/trace.json", dir2);
  CHECK(stat(path, &sb) != 0, "no merged file when ranks are elsewhere");
  char cmd[1600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "cleanup");
  drop(&r);
}

static void test_predicted(void) {
  fb_run_result r;
  build(&r, true);
  char *out = print_to_string(&r);
  CHECK(strstr(out, "PREDICTED") != NULL, "predicted banner");
  CHECK(strstr(out, "Time per step (pred)") != NULL, "(pred) on the time table");
  CHECK(strstr(out, "ledger per rank and step (pred)") != NULL, "(pred) on the ledger");
  CHECK(strstr(out, "final param sum: n/a (predicted run)\n") != NULL, "n/a param sum");
  CHECK(strstr(out, "loss: first n/a (predicted run)") != NULL, "n/a loss");
  free(out);
  drop(&r);
}

int main(void) {
  test_measured();
  test_predicted();
  return fb_test_done("test_report");
}
