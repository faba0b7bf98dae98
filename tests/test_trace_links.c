/* What the trace's navigation is built from, below the writer: the recorder's wait links
 * (an event recorded after a collective and waited for by the compute stream links the
 * compute stream's next op to that collective; not from a kernel, not across a step end, not
 * past the first op), its phases and parameter ids, its wall-clock mapping, and the model's
 * names (fb_model_unit_name / fb_model_op_name) for both families. */
#include <string.h>

#include "check.h"
#include "engine/device/recorder.h"
#include "engine/model/model.h"

/* ---- a fake device whose timing tickets are doubles this test sets ---------------------- */
static double fake_ticket[256];
static double f_now(fb_device *d) { (void)d; return 100.0; }
static uint64_t f_mark(fb_device *d, fb_stream *s) { (void)d; (void)s; return 0; }
static double f_mark_time(fb_device *d, uint64_t t) { (void)d; return fake_ticket[t]; }
static const fb_device_ops fake_ops = {.name = "fake", .now = f_now, .mark = f_mark,
                                       .mark_time = f_mark_time};
static char s_compute_obj, s_comm_obj, ev_a, ev_b, ev_c;
#define S_COMPUTE ((fb_stream *)&s_compute_obj)
#define S_COMM ((fb_stream *)&s_comm_obj)

static uint64_t next_ticket;
static void op(fb_recorder *r, fb_stream *s, bool coll, int param, double t0) {
  uint64_t k0 = next_ticket++, k1 = next_ticket++;
  fake_ticket[k0] = t0;
  fake_ticket[k1] = t0 + 0.5;
  fb_op_cost c = {.name = coll ? "all_gather" : "matmul_fwd",
                  .kind = coll ? FB_OP_COLL : FB_OP_GEMM, .coll = FB_COLL_ALL_GATHER,
                  .param = param};
  fb_recorder_op(r, s, &c, 2, k0, k1);
}

static void test_links(void) {
  fb_device d;
  memset(&d, 0, sizeof d);
  d.ops = &fake_ops;
  fb_rec_config cfg = {.trace = true, .trace_active = 0};
  fb_recorder *r;
  CHECK_OK(fb_recorder_create(&d, &cfg, &r));
  fb_recorder_stream(r, S_COMPUTE, "compute");
  fb_recorder_stream(r, S_COMM, "comm");
  fb_step_stats s;

  fb_recorder_step_begin(r, 0, 0);
  fb_recorder_phase(r, FB_PHASE_FORWARD);
  op(r, S_COMPUTE, false, 7, 101);                /* 0 */
  op(r, S_COMM, true, 0, 101);                    /* 1: the collective */
  fb_recorder_event_record(r, &ev_a, S_COMM);
  fb_recorder_stream_wait(r, S_COMPUTE, &ev_a);
  op(r, S_COMPUTE, false, 0, 102);                /* 2: waited for 1 */
  op(r, S_COMPUTE, false, 0, 103);                /* 3: no wait */
  fb_recorder_event_record(r, &ev_b, S_COMPUTE);  /* marks a kernel: no link */
  fb_recorder_stream_wait(r, S_COMM, &ev_b);
  op(r, S_COMM, true, 0, 104);                    /* 4 */
  fb_recorder_event_record(r, &ev_c, S_COMM);     /* recorded in step 0 ... */
  fb_recorder_stream_wait(r, S_COMPUTE, &ev_a);   /* ev_a re-waited: still marks op 1 */
  CHECK_OK(fb_recorder_step_end(r, &s));

  fb_recorder_step_begin(r, 1, 0);
  fb_recorder_stream_wait(r, S_COMPUTE, &ev_c);   /* ... waited for in step 1: dropped */
  op(r, S_COMPUTE, false, 0, 105);                /* 5 */
  CHECK_OK(fb_recorder_step_end(r, &s));

  int64_t n;
  const fb_rec_op *o = fb_recorder_ops(r, &n);
  CHECK(n == 6, "%lld kept ops", (long long)n);
  if (n == 6) {
    CHECK(o[2].wait == 1, "kernel after the wait links to the collective (%lld)",
          (long long)o[2].wait);
    CHECK(o[0].wait == -1 && o[1].wait == -1 && o[3].wait == -1, "no other links in step 0");
    CHECK(o[4].wait == -1, "a wait on a kernel's event is no flow (%lld)", (long long)o[4].wait);
    CHECK(o[5].wait == -1, "no link across a step end (%lld)", (long long)o[5].wait);
    CHECK(o[0].param == 7 && o[2].param == 0, "parameter ids kept (%d, %d)", o[0].param,
          o[2].param);
    CHECK(o[0].phase == FB_PHASE_FORWARD && o[4].phase == FB_PHASE_FORWARD, "phase kept");
    CHECK(o[5].phase == FB_PHASE_NONE, "a step end resets the phase (%d)", (int)o[5].phase);
  }
  int64_t a = fb_recorder_realtime_ns(r, 100.0), b = fb_recorder_realtime_ns(r, 101.25);
  CHECK(b - a == 1250000000, "1.25 s of device time is 1.25e9 ns of wall clock (%lld)",
        (long long)(b - a));
  CHECK(a > 1600000000LL * 1000000000LL, "the origin is a wall-clock time (%lld ns)",
        (long long)a);
  CHECK(!strcmp(fb_rec_phase_name(FB_PHASE_BACKWARD), "backward"), "phase name");
  fb_recorder_destroy(r);
}

/* 1 + the model id of the parameter named `name`, 0 if none. */
static int param_ref(const fb_model *m, const char *name) {
  for (int i = 0; i < m->nparams; i++)
    if (!strcmp(m->params[i].name, name)) return i + 1;
  return 0;
}

static void check_name(const fb_model *m, int unit, const char *param, const char *op,
                       bool per_unit, const char *want) {
  char buf[128];
  int ref = param ? param_ref(m, param) : 0;
  CHECK(!param || ref > 0, "parameter %s exists", param);
  fb_model_op_name(m, unit, ref, op, per_unit, buf, sizeof buf);
  CHECK(!strcmp(buf, want), "name '%s', want '%s'", buf, want);
}

static void test_names(void) {
  fb_model_spec llama = {.name = "t-llama", .family = FB_LLAMA, .vocab = 64, .dim = 16,
                         .layers = 4, .heads = 2, .kv_heads = 1, .ffn = 32, .max_seq = 8};
  fb_model_spec gpt2 = {.name = "t-gpt2", .family = FB_GPT2, .vocab = 64, .dim = 16,
                        .layers = 4, .heads = 2, .kv_heads = 2, .ffn = 32, .max_seq = 8,
                        .tied = true};
  fb_model m;
  char buf[64];
  CHECK_OK(fb_model_build(&llama, &m));
  CHECK(!strcmp(fb_model_unit_name(&m, 4, buf, sizeof buf), "layers.3"), "unit 4: %s", buf);
  CHECK(!strcmp(fb_model_unit_name(&m, 0, buf, sizeof buf), "root"), "unit 0: %s", buf);
  CHECK(!strcmp(fb_model_unit_name(&m, 5, buf, sizeof buf), ""), "no unit 5: %s", buf);
  check_name(&m, 4, "layers.3.attention.wq.weight", "matmul_fwd", false, "layers.3.attention.wq");
  check_name(&m, 4, "layers.3.feed_forward.w1.weight", "matmul_bwd", false,
             "layers.3.feed_forward.w1");
  check_name(&m, 4, NULL, "attention_fwd", false, "layers.3.attention_fwd");
  check_name(&m, 4, NULL, "all_gather", true, "all_gather layers.3");
  check_name(&m, 0, NULL, "reduce_scatter", true, "reduce_scatter root");
  check_name(&m, -1, NULL, "all_reduce", true, "all_reduce");
  check_name(&m, 0, NULL, "softmax_xent", false, "softmax_xent");
  check_name(&m, 1, NULL, "forward", true, "forward layers.0");
  fb_model_op_name(&m, 4, 1, "x", false, buf, 8);
  CHECK(strlen(buf) == 7, "truncated to the buffer: '%s'", buf);
  fb_model_free(&m);
  CHECK_OK(fb_model_build(&gpt2, &m));
  CHECK(!strcmp(fb_model_unit_name(&m, 4, buf, sizeof buf), "h.3"), "gpt2 unit 4: %s", buf);
  check_name(&m, 4, "h.3.attn.c_attn.bias", "matmul_fwd", false, "h.3.attn.c_attn");
  check_name(&m, 2, "h.1.mlp.c_fc.weight", "matmul_bwd", false, "h.1.mlp.c_fc");
  check_name(&m, 0, "wte", "encoder_fwd", false, "wte");
  fb_model_free(&m);
}

int main(void) {
  test_links();
  test_names();
  return fb_test_done("test_trace_links");
}
