/* Cost model and hardware profiles: every shipped profile loads and round-trips through
 * fb_hardware_write; the model is monotonic (more bandwidth never slows anything, a bigger
 * GEMM is never faster), all-reduce costs about two all-gathers of the same buffer, a
 * multi-node collective is bounded by its slower stage, a shared-host (local communicator)
 * collective costs exactly the bytes all ranks move over the copy bandwidth, world 1 is one
 * device copy (broadcast and barrier nothing), bf16 halves the bytes; bad profiles (missing key, unknown key, negative bandwidth, bad bool, malformed
 * YAML) fail with FB_EUSAGE naming the key. */
#include <dirent.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/device/kernels.h"
#include "engine/sim/cost_model.h"
#include "engine/sim/hardware.h"
#include "engine/sim/nccl_model.h"

static const fb_coll colls[] = {FB_COLL_ALL_GATHER, FB_COLL_REDUCE_SCATTER, FB_COLL_ALL_REDUCE,
                                FB_COLL_BROADCAST, FB_COLL_REDUCE, FB_COLL_BARRIER};
static const int worlds[] = {2, 3, 4, 8, 16, 24, 64, 256, 1024};

static fb_op_cost coll_op(fb_coll c, int64_t count, fb_dtype t, int world) {
  return (fb_op_cost){.name = "coll", .kind = FB_OP_COLL, .coll = c, .count = count, .dtype = t,
                      .world = world};
}

static fb_op_cost gemm_op(int64_t m, int64_t n, int64_t k, fb_dtype t) {
  fb_op_cost c = {.name = "gemm", .kind = FB_OP_GEMM, .dtype = t, .m = m, .n = n, .k = k,
                  .batch = 1};
  c.flops = 2.0 * m * n * k;
  c.bytes = (double)(m * k + k * n + m * n) * fb_dtype_size(t);
  return c;
}

/* A small "step": the ops one block of a step issues, summed. */
static double step_cost(const fb_hardware *hw, int world) {
  double t = 0;
  for (int l = 0; l < 4; l++) {
    t += fb_cost_seconds(hw, &(fb_op_cost){.kind = FB_OP_COLL, .coll = FB_COLL_ALL_GATHER,
                                           .count = 1 << 20, .dtype = FB_BF16, .world = world},
                         world);
    fb_op_cost g = gemm_op(4096, 4096, 1024, FB_BF16);
    t += 3 * fb_cost_seconds(hw, &g, world);
    fb_op_cost m = {.kind = FB_OP_MEM, .dtype = FB_BF16, .bytes = 64e6};
    t += fb_cost_seconds(hw, &m, world);
    t += fb_cost_seconds(hw, &(fb_op_cost){.kind = FB_OP_COLL, .coll = FB_COLL_REDUCE_SCATTER,
                                           .count = 1 << 20, .dtype = FB_F32, .world = world},
                         world);
  }
  return t;
}

static void check_monotonic(const fb_hardware *base) {
  const char *name = base->name;
  /* more bandwidth (any link, memory) or more FLOP/s never makes anything slower */
  for (int which = 0; which < 4; which++) {
    fb_hardware fast = *base;
    switch (which) {
    case 0: fast.intra_bw *= 2; break;
    case 1: fast.inter_bw *= 2; break;
    case 2: fast.mem_bw *= 2; break;
    case 3: fast.peak_bf16 *= 2; fast.peak_fp32 *= 2; break;
    }
    for (size_t ci = 0; ci < sizeof colls / sizeof colls[0]; ci++)
      for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; wi++)
        for (int64_t count = 1; count <= (INT64_C(1) << 30); count *= 32) {
          fb_op_cost c = coll_op(colls[ci], count, FB_F32, worlds[wi]);
          double slow = fb_cost_seconds(base, &c, worlds[wi]);
          double quick = fb_cost_seconds(&fast, &c, worlds[wi]);
          CHECK(quick <= slow * (1 + 1e-12), "%s: faster link %d made %s W=%d count=%lld slower "
                "(%g > %g)", name, which, fb_coll_name(colls[ci]), worlds[wi], (long long)count,
                quick, slow);
          CHECK(slow >= 0 && isfinite(slow), "%s: cost %g", name, slow);
        }
    for (int w = 1; w <= 1024; w *= 4) {
      double a = step_cost(base, w), b = step_cost(&fast, w);
      CHECK(b <= a * (1 + 1e-12), "%s: faster hardware (%d) made a step slower at W=%d: %g > %g",
            name, which, w, b, a);
    }
  }
  /* a bigger GEMM is never faster; per-FLOP it is never less efficient */
  double prev = 0, prev_rate = 0;
  for (int64_t s = 8; s <= 32768; s *= 2) {
    fb_op_cost g = gemm_op(s, s, s, FB_BF16);
    double t = fb_cost_seconds(base, &g, 1);
    CHECK(t > prev, "%s: GEMM %lld^3 took %g s, not more than the smaller one's %g", name,
          (long long)s, t, prev);
    double rate = g.flops / t;
    CHECK(rate >= prev_rate * (1 - 1e-12), "%s: GEMM %lld^3 rate %g below smaller's %g", name,
          (long long)s, rate, prev_rate);
    CHECK(rate <= fb_hardware_peak(base, FB_BF16) * base->gemm_max_eff * (1 + 1e-9),
          "%s: GEMM rate %g above the efficiency ceiling", name, rate);
    prev = t;
    prev_rate = rate;
    /* growing one dimension only also never gets faster */
    fb_op_cost g2 = gemm_op(s, s, 2 * s, FB_BF16);
    CHECK(fb_cost_seconds(base, &g2, 1) > t, "%s: doubling k of %lld^3 got faster", name,
          (long long)s);
  }
  /* efficiency halves at gemm_half_size */
  CHECK_CLOSE(fb_cost_gemm_efficiency(base, base->gemm_half_size), base->gemm_max_eff / 2, 1e-12,
              0);
  /* bf16 vs fp32: a GEMM at the bf16 rate, a collective of half the bytes */
  fb_op_cost g32 = gemm_op(4096, 4096, 4096, FB_F32), g16 = gemm_op(4096, 4096, 4096, FB_BF16);
  if (base->peak_bf16 > base->peak_fp32)
    CHECK(fb_cost_seconds(base, &g16, 1) < fb_cost_seconds(base, &g32, 1), "%s: bf16 GEMM not "
          "faster than fp32", name);
  CHECK(fb_cost_seconds(base, &g16, 1) <= fb_cost_seconds(base, &g32, 1), "%s: bf16 GEMM slower "
        "than fp32", name);
  for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; wi++) {
    int w = worlds[wi];
    fb_op_cost a = coll_op(FB_COLL_ALL_GATHER, 1 << 24, FB_BF16, w);
    fb_op_cost b = coll_op(FB_COLL_ALL_GATHER, 1 << 23, FB_F32, w);
    CHECK_CLOSE(fb_cost_seconds(base, &a, w), fb_cost_seconds(base, &b, w), 1e-12, 0);
    fb_op_cost c = coll_op(FB_COLL_ALL_GATHER, 1 << 24, FB_F32, w);
    CHECK(fb_cost_seconds(base, &c, w) > fb_cost_seconds(base, &a, w), "%s: fp32 not dearer "
          "than bf16 at W=%d", name, w);
  }
}

/* World 1: a collective into another buffer is one device copy (read + write of the
 * buffer), at the profile's copy_d2d rate when it lists one; broadcast and barrier are free.
 * On a shared host: the comm thread's hand-off (one latency) and the same copy at the
 * communicator's bandwidth. */
static void check_world1(const fb_hardware *hw) {
  double bw = fb_hardware_kernel_bw(hw, "copy_d2d");
  if (!(bw > 0)) bw = hw->mem_bw * hw->mem_eff;
  bool shm = hw->collectives == FB_COLLS_SHARED_MEMORY;
  if (shm) bw = hw->intra_bw * hw->coll_eff;
  for (size_t ci = 0; ci < sizeof colls / sizeof colls[0]; ci++) {
    fb_op_cost c = coll_op(colls[ci], 1 << 20, FB_F32, 1);
    bool moves = colls[ci] != FB_COLL_BROADCAST && colls[ci] != FB_COLL_BARRIER;
    double want = shm ? hw->launch_s + hw->intra_lat + (moves ? 8.0 * (1 << 20) / bw : 0)
                  : moves         ? hw->launch_s + 8.0 * (1 << 20) / bw
                                  : 0;
    CHECK_CLOSE(fb_cost_seconds(hw, &c, 1), want, 1e-12, 0);
  }
}

/* Shared host: the local communicator's algorithm, to the byte. */
static void check_shared_memory(const fb_hardware *hw) {
  const char *name = hw->name;
  double S = 64.0 * (1 << 20), bw = hw->intra_bw * hw->coll_eff;
  for (int w = 2; w <= 16; w++) {
    /* all-gather: every rank copies the whole gathered buffer (reads S, writes S) */
    CHECK_CLOSE(fb_cost_collective(hw, FB_COLL_ALL_GATHER, S, w),
                hw->launch_s + 2 * hw->intra_lat + 2.0 * S * w / bw, 1e-12, 0);
    /* reduce-scatter: each rank reads W chunks of S/W and writes one */
    CHECK_CLOSE(fb_cost_collective(hw, FB_COLL_REDUCE_SCATTER, S, w),
                hw->launch_s + 2 * hw->intra_lat + S * (w + 1.0) / bw, 1e-12, 0);
    /* all-reduce: reduce a chunk, then copy the others' chunks; three barriers */
    CHECK_CLOSE(fb_cost_collective(hw, FB_COLL_ALL_REDUCE, S, w),
                hw->launch_s + 3 * hw->intra_lat + S * (3.0 * w - 1.0) / bw, 1e-12, 0);
    CHECK_CLOSE(fb_cost_collective(hw, FB_COLL_BROADCAST, S, w),
                hw->launch_s + 2 * hw->intra_lat + 2.0 * S * (w - 1.0) / bw, 1e-12, 0);
    CHECK_CLOSE(fb_cost_collective(hw, FB_COLL_BARRIER, 0, w), hw->launch_s + hw->intra_lat,
                1e-12, 0);
    /* more ranks on one machine: each collective of the same payload costs more */
    for (size_t ci = 0; ci + 1 < sizeof colls / sizeof colls[0]; ci++)
      CHECK(fb_cost_collective(hw, colls[ci], S, w) > fb_cost_collective(hw, colls[ci], S, w - 1),
            "%s: %s of %g B not dearer at W=%d than at W=%d", name, fb_coll_name(colls[ci]), S,
            w, w - 1);
  }
}

/* NCCL's model: the worked examples of ../shared/gpu-data/nccl-model.md section 6 (NCCL
 * v2.30.7 constants; Intel host; times without launch or framework overhead), then the shape
 * of the costs at scale. */
static void check_nccl_examples(void) {
  fb_hardware h;
  CHECK_OK(fb_hardware_load("h100", &h));
  h.cpu_vendor = 0;
  h.nccl_net_doubling = 0; /* NCCL's tuning model as such: no measured scale-out decline */
  const double GiB = 1073741824.0, K64 = 65536;
  struct { int world; fb_coll c; double bytes, us; fb_nccl_algo a; fb_nccl_proto p; } ex[] = {
      {8, FB_COLL_ALL_GATHER, GiB, 2642.0, FB_NCCL_RING, FB_NCCL_SIMPLE},   /* 6.1 */
      {8, FB_COLL_ALL_REDUCE, K64, 15.8, FB_NCCL_RING, FB_NCCL_LL},         /* 6.1 */
      {128, FB_COLL_ALL_GATHER, GiB, 3373.5, FB_NCCL_RING, FB_NCCL_SIMPLE}, /* 6.2 */
      {128, FB_COLL_ALL_REDUCE, K64, 65.9, FB_NCCL_TREE, FB_NCCL_LL},       /* 6.2 */
  };
  for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
    fb_nccl_choice c = fb_nccl_predict(&h, ex[i].c, ex[i].bytes, ex[i].world);
    CHECK_CLOSE(c.seconds * 1e6, ex[i].us, 0.01, 0.2);
    CHECK(c.algo == ex[i].a && c.proto == ex[i].p, "example %zu: %s/%s, want %s/%s", i,
          fb_nccl_algo_name(c.algo), fb_nccl_proto_name(c.proto), fb_nccl_algo_name(ex[i].a),
          fb_nccl_proto_name(ex[i].p));
  }
  /* 6.1: NVLS wins the large all-reduce on one H100 node: algbw 272 GB/s */
  fb_nccl_choice nv = fb_nccl_predict(&h, FB_COLL_ALL_REDUCE, GiB, 8);
  CHECK(nv.algo == FB_NCCL_NVLS, "1 GiB all-reduce on 8 H100: %s", fb_nccl_algo_name(nv.algo));
  CHECK_CLOSE(nv.algbw * 1e-9, 272.0, 0.01, 0);
  /* 6.3: A100, one node and 16 nodes */
  fb_hardware a;
  CHECK_OK(fb_hardware_load("a100", &a));
  a.cpu_vendor = 0;
  a.nccl_net_doubling = 0;
  CHECK_CLOSE(fb_nccl_predict(&a, FB_COLL_ALL_GATHER, GiB, 8).seconds * 1e3, 3.95, 0.01, 0);
  CHECK_CLOSE(fb_nccl_predict(&a, FB_COLL_ALL_REDUCE, K64, 8).seconds * 1e6, 16.3, 0.01, 0);
  CHECK_CLOSE(fb_nccl_predict(&a, FB_COLL_ALL_GATHER, GiB, 128).seconds * 1e3, 6.15, 0.01, 0);
  CHECK_CLOSE(fb_nccl_predict(&a, FB_COLL_ALL_REDUCE, K64, 128).seconds * 1e6, 66.0, 0.02, 0);
}

/* Costs that grow as NCCL's do: never cheaper with more bytes or more ranks (all-gather,
 * reduce-scatter), no collapse or explosion from one power of two to the next, and a small
 * all-reduce that stays logarithmic (tree) up to 65,536 ranks. */
static void check_nccl_scale(const fb_hardware *hw) {
  double prev = 0;
  for (int w = 2; w <= 65536; w *= 2) {
    double t = fb_cost_collective(hw, FB_COLL_ALL_GATHER, 1 << 28, w);
    CHECK(t >= prev * 0.999 && (prev == 0 || t < 3 * prev), "%s: all-gather at W=%d %g s "
          "after %g s", hw->name, w, t, prev);
    prev = t;
  }
  for (double b = 64; b < 1e10; b *= 4)
    CHECK(fb_cost_collective(hw, FB_COLL_REDUCE_SCATTER, 4 * b, 64) >=
              fb_cost_collective(hw, FB_COLL_REDUCE_SCATTER, b, 64),
          "%s: reduce-scatter cheaper with more bytes at %g", hw->name, b);
  double small = fb_cost_collective(hw, FB_COLL_ALL_REDUCE, 1024, 65536);
  CHECK(small < 1e-3, "%s: 1 KiB all-reduce over 65,536 ranks takes %g s", hw->name, small);
}

static void check_collectives(const fb_hardware *hw_in) {
  const char *name = hw_in->name;
  check_world1(hw_in);
  if (hw_in->collectives == FB_COLLS_SHARED_MEMORY) {
    check_shared_memory(hw_in);
    return;
  }
  if (hw_in->collectives == FB_COLLS_NCCL) check_nccl_scale(hw_in);
  /* the ring/tree formulas below, on the same figures */
  fb_hardware rt = *hw_in;
  rt.collectives = FB_COLLS_RING_TREE;
  const fb_hardware *hw = &rt;
  /* the same rings with every rank on one machine: the machine's bandwidth is split W ways,
   * so the bandwidth term is W times the dedicated-link one */
  if (!hw->shared_host) {
    fb_hardware sh = *hw;
    sh.shared_host = true;
    sh.intra_lat = sh.inter_lat = 0;
    sh.launch_s = 0;
    fb_hardware ded = sh;
    ded.shared_host = false;
    for (int w = 2; w <= 8; w *= 2)
      CHECK_CLOSE(fb_cost_collective(&sh, FB_COLL_ALL_GATHER, 1e9, w),
                  w * fb_cost_collective(&ded, FB_COLL_ALL_GATHER, 1e9, w), 1e-9, 0);
  }
  /* all-reduce ~ reduce-scatter + all-gather of the same buffer (large, bandwidth-bound) */
  int64_t n = INT64_C(1) << 28; /* 1 GiB of fp32 */
  for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; wi++) {
    int w = worlds[wi];
    fb_op_cost ag = coll_op(FB_COLL_ALL_GATHER, n / w, FB_F32, w);
    fb_op_cost rs = coll_op(FB_COLL_REDUCE_SCATTER, n / w, FB_F32, w);
    fb_op_cost ar = coll_op(FB_COLL_ALL_REDUCE, n, FB_F32, w);
    double tag = fb_cost_seconds(hw, &ag, w), trs = fb_cost_seconds(hw, &rs, w);
    double tar = fb_cost_seconds(hw, &ar, w);
    /* ~2 on one node; across many nodes the tree (log latency) may beat the ring */
    double lo = w <= hw->devices_per_node ? 1.9 : 1.5;
    CHECK(tar / tag > lo && tar / tag < 2.1, "%s W=%d: all-reduce %g s vs all-gather %g s "
          "(ratio %.3f, want ~2)", name, w, tar, tag, tar / tag);
    CHECK_CLOSE(tag, trs, 1e-12, 0);
  }
  /* hierarchical: bounded below by each stage's bandwidth term, above by their sum */
  int g = hw->devices_per_node;
  for (int nodes = 2; nodes <= 128; nodes *= 4) {
    int w = g * nodes;
    double bytes = 4.0 * (double)n;
    double t = fb_cost_collective(hw, FB_COLL_ALL_GATHER, bytes, w);
    double intra = (double)(g - 1) / g * bytes / (hw->intra_bw * hw->coll_eff);
    double inter = (double)(nodes - 1) / nodes * bytes / g / (hw->inter_bw * hw->coll_eff);
    double lat = hw->launch_s + (g - 1) * hw->intra_lat + (nodes - 1) * hw->inter_lat;
    CHECK(t >= fmax(intra, inter) * (1 - 1e-12), "%s W=%d: %g s below the slower stage %g",
          name, w, t, fmax(intra, inter));
    CHECK(t <= intra + inter + lat + 1e-12, "%s W=%d: %g s above both stages %g + %g + lat %g",
          name, w, t, intra, inter, lat);
    /* an infinitely fast NVLink leaves the network stage; an infinitely fast network the
     * NVLink stage */
    fb_hardware f = *hw;
    f.intra_bw = 1e30;
    f.intra_lat = 0;
    CHECK_CLOSE(fb_cost_collective(&f, FB_COLL_ALL_GATHER, bytes, w),
                inter + hw->launch_s + (nodes - 1) * hw->inter_lat, 1e-9, 0);
  }
  /* small messages: the tree keeps the all-reduce latency logarithmic at scale */
  double small1k = fb_cost_collective(hw, FB_COLL_ALL_REDUCE, 1024, 1024);
  double hop = hw->intra_lat > hw->inter_lat ? hw->intra_lat : hw->inter_lat;
  CHECK(small1k < hw->launch_s + 2 * 10 * hop + 2 * 1024 / (hw->inter_bw * hw->coll_eff) + 1e-12, "%s: 1 KiB all-reduce over 1024 ranks takes %g s", name, small1k);
}

static fb_status write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return FB_EIO;
  fputs(text, f);
  fclose(f);
  return FB_OK;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc((size_t)n + 1, 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
  fclose(f);
  return s;
}

/* Replaces the line starting with `key:` by `repl` ("" deletes it). */
static char *edit_line(const char *text, const char *key, const char *repl) {
  size_t klen = strlen(key);
  char *out = calloc(strlen(text) + strlen(repl) + 2, 1);
  const char *p = text;
  char *o = out;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p + 1) : strlen(p);
    if (!strncmp(p, key, klen) && p[klen] == ':') {
      o += sprintf(o, "%s", repl);
    } else {
      memcpy(o, p, len);
      o += len;
    }
    p += len;
  }
  *o = '\0';
  return out;
}

static void expect_bad(const char *path, const char *text, const char *must_name) {
  CHECK(write_text(path, text) == FB_OK, "cannot write %s", path);
  fb_hardware hw;
  fb_status st = fb_hardware_load(path, &hw);
  CHECK(st == FB_EUSAGE, "bad profile (%s) loaded with status %s", must_name, fb_status_name(st));
  CHECK(strstr(fb_error_msg(), must_name) != NULL, "message '%s' does not name '%s'",
        fb_error_msg(), must_name);
  CHECK(strchr(fb_error_msg(), '\n') == NULL, "message is not one line: '%s'", fb_error_msg());
}

static void check_bad_profiles(const fb_hardware *good) {
  char path[] = "/tmp/fb_test_hw_XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  CHECK(fd >= 0, "mkstemps");
  if (fd < 0) return;
  CHECK_OK(fb_hardware_write(path, good, "round trip\nsecond comment line"));
  fb_hardware back;
  CHECK_OK(fb_hardware_load(path, &back));
  CHECK(!strcmp(back.name, good->name), "name %s vs %s", back.name, good->name);
  CHECK_CLOSE(back.peak_bf16, good->peak_bf16, 1e-12, 0);
  CHECK_CLOSE(back.inter_bw, good->inter_bw, 1e-12, 0);
  CHECK_CLOSE(back.launch_s, good->launch_s, 1e-12, 0);
  CHECK(back.mem_capacity == good->mem_capacity, "capacity %lld vs %lld",
        (long long)back.mem_capacity, (long long)good->mem_capacity);
  CHECK(back.devices_per_node == good->devices_per_node && back.host_runs_ahead ==
        good->host_runs_ahead && back.shared_host == good->shared_host &&
        back.collectives == good->collectives, "int/bool/enum fields");
  char *text = read_text(path);
  CHECK(text != NULL, "read back");
  if (!text) return;
  char *t;
  fb_hardware h0;
  t = edit_line(text, "inter_bw_gbs", "");
  expect_bad(path, t, "inter_bw_gbs");
  free(t);
  t = edit_line(text, "inter_bw_gbs", "inter_bw_gbs: -50\n");
  expect_bad(path, t, "inter_bw_gbs");
  free(t);
  t = edit_line(text, "mem_bw_gbs", "mem_bw_gbs: 0\n");
  expect_bad(path, t, "mem_bw_gbs");
  free(t);
  t = edit_line(text, "gemm_max_efficiency", "gemm_max_efficiency: 1.5\n");
  expect_bad(path, t, "gemm_max_efficiency");
  free(t);
  t = edit_line(text, "intra_lat_us", "intra_lat_us: fast\n");
  expect_bad(path, t, "intra_lat_us");
  free(t);
  t = edit_line(text, "host_runs_ahead", "host_runs_ahead: maybe\n");
  expect_bad(path, t, "host_runs_ahead");
  free(t);
  t = edit_line(text, "collectives", "collectives: butterfly\n");
  expect_bad(path, t, "collectives");
  free(t);
  t = edit_line(text, "collectives", "");
  expect_bad(path, t, "collectives");
  free(t);
  t = edit_line(text, "devices_per_node", "devices_per_node: 2.5\n");
  expect_bad(path, t, "devices_per_node");
  free(t);
  t = edit_line(text, "name", "name: h100\nnvlink_gbs: 900\n");
  expect_bad(path, t, "nvlink_gbs");
  free(t);
  t = edit_line(text, "nics_per_node", "nics_per_node: 65\n");
  expect_bad(path, t, "nics_per_node");
  free(t);
  t = edit_line(text, "nic_gbps", "nic_gbps: -1\n");
  expect_bad(path, t, "nic_gbps");
  free(t);
  /* the network as a source states it: 4 x 100 Gb/s per node, read back in bytes/s */
  CHECK(good->nics_per_node == 8 && good->nic_bw == 50e9, "h100: 8 x 400 Gb/s NICs");
  char *t1 = edit_line(text, "nics_per_node", "nics_per_node: 4\n");
  t = edit_line(t1, "nic_gbps", "nic_gbps: 100\n");
  free(t1);
  CHECK(write_text(path, t) == FB_OK, "cannot write %s", path);
  CHECK_OK(fb_hardware_load(path, &h0));
  CHECK(h0.nics_per_node == 4, "nics_per_node %d", h0.nics_per_node);
  CHECK_CLOSE(h0.nic_bw, 12.5e9, 1e-12, 0);
  CHECK_OK(fb_hardware_set_network(&h0, 1, 200)); /* --nics-per-node 1 --nic-gbps 200 */
  CHECK(h0.nics_per_node == 1, "--nics-per-node over the profile's: %d", h0.nics_per_node);
  CHECK_CLOSE(h0.nic_bw, 25e9, 1e-12, 0);
  CHECK_OK(fb_hardware_set_network(&h0, 0, 0)); /* 0 keeps the profile's */
  CHECK(h0.nics_per_node == 1 && h0.nic_bw == 25e9, "0 must keep the values");
  CHECK(fb_hardware_set_network(&h0, -1, 0) == FB_EUSAGE, "--nics-per-node -1 accepted");
  free(t);
  t = edit_line(text, "name", "name: [a, b\n");
  expect_bad(path, t, path);
  free(t);
  free(text);
  fb_hardware h;
  CHECK(fb_hardware_load("no-such-profile", &h) == FB_EUSAGE, "unknown profile name accepted");
  remove(path);
}

/* The GPU mechanisms of this round, each against the profile it is written in (h100):
 * stream-K and the small-grid rule, the alignment factors, matmul_bwd priced as its two real
 * products, float8 block linears, the framework's kernel chains, cuDNN's SDPA curve. */
static double mem_op(const fb_hardware *hw, const char *name, double bytes) {
  fb_op_cost c = {.name = name, .kind = FB_OP_MEM, .dtype = FB_BF16, .bytes = bytes};
  return fb_cost_seconds(hw, &c, 1) - hw->launch_s;
}

static void check_gpu_mechanisms(void) {
  fb_hardware h;
  CHECK_OK(fb_hardware_load("h100", &h));
  h.sustained = 0;
  CHECK(h.gemm_stream_k > 0 && h.gemm_small_grid > 0, "h100 prices cuBLAS's stream-K");
  /* a small output over a long k: stream-K fills the SMs the tiles cannot */
  fb_hardware split = h;
  split.gemm_stream_k = 0;
  double sk = fb_cost_gemm_shape_efficiency(&h, 768, 3072, 8192, 1, FB_BF16);
  double sp = fb_cost_gemm_shape_efficiency(&split, 768, 3072, 8192, 1, FB_BF16);
  CHECK(sk > sp, "768x3072x8192: stream-K %g not above split-K %g", sk, sp);
  /* fewer large tiles than gemm_small_grid_tiles: one wave of them, nothing split */
  fb_hardware nosmall = h;
  nosmall.gemm_small_grid = 0;
  CHECK(fb_cost_gemm_shape_efficiency(&h, 1024, 1024, 1024, 1, FB_BF16) <
            0.8 * fb_cost_gemm_shape_efficiency(&nosmall, 1024, 1024, 1024, 1, FB_BF16),
        "1024^3 (32 tiles) should run one wave of large tiles");
  /* alignment: vocabulary 50300 (8-byte rows), 50257 (2-byte rows) against 50304 */
  double e16 = fb_cost_gemm_shape_efficiency(&h, 8192, 50304, 768, 1, FB_BF16);
  CHECK_CLOSE(fb_cost_gemm_shape_efficiency(&h, 8192, 50300, 768, 1, FB_BF16) / e16,
              h.gemm_align4, 0.02, 0);
  CHECK_CLOSE(fb_cost_gemm_shape_efficiency(&h, 8192, 50257, 768, 1, FB_BF16) / e16,
              h.gemm_align2, 0.02, 0);
  /* matmul_bwd = dW (OC x C over N) + dinp (N x C over OC), each as the library runs it */
  fb_op_cost bwd = {.name = "matmul_bwd", .kind = FB_OP_GEMM, .dtype = FB_BF16, .m = 8192,
                    .n = 768, .k = 768, .batch = 2};
  CHECK_CLOSE(fb_cost_seconds(&h, &bwd, 1),
              fb_cost_gemm_seconds(&h, FB_BF16, 768, 768, 8192, 1, false) +
                  fb_cost_gemm_seconds(&h, FB_BF16, 8192, 768, 768, 1, false), 1e-12, 0);
  /* float8: a block's linear runs faster (FP8 peak, its casts added), the head's does not */
  fb_op_cost fwd = {.name = "matmul_fwd", .kind = FB_OP_GEMM, .dtype = FB_BF16, .m = 8192,
                    .n = 8192, .k = 8192, .batch = 1, .unit = 3};
  double t16 = fb_cost_seconds(&h, &fwd, 1);
  fb_hardware f8 = h;
  f8.float8_linears = true;
  double t8 = fb_cost_seconds(&f8, &fwd, 1);
  CHECK(t8 < 0.75 * t16 && t8 > 0.4 * t16, "float8 8192^3: %g s vs bf16 %g s", t8, t16);
  fwd.unit = 0;
  CHECK_CLOSE(fb_cost_seconds(&f8, &fwd, 1), t16, 1e-12, 0);
  /* the framework: RMSNorm's chain only where it is written out; torch.compile fuses all */
  fb_hardware fw = h;
  fw.eager_mem_factor = 1.0;
  double b = 1e9, eager = mem_op(&fw, "rmsnorm_fwd", b), rope = mem_op(&fw, "rope_fwd", b);
  fw.framework = FB_FW_EAGER_HF;
  CHECK_CLOSE(mem_op(&fw, "rmsnorm_fwd", b) / eager, 9.0, 1e-9, 0);
  fw.framework = FB_FW_COMPILE;
  CHECK_CLOSE(mem_op(&fw, "rope_fwd", b) * 5.0, rope, 1e-9, 0);
  CHECK_CLOSE(mem_op(&fw, "memset0", b), mem_op(&h, "memset0", b), 1e-12, 0);
  /* cuDNN's SDPA against FlashAttention-2's curve at 4096 keys, head dim 128 */
  fb_op_cost at = fb_op_attention_cost("attention_fwd", FB_BF16, 4, 4096, 16, 16, 128, 2, true);
  double fa2 = fb_cost_seconds(&h, &at, 1);
  h.attention_kernel = FB_ATTN_CUDNN;
  double cud = fb_cost_seconds(&h, &at, 1);
  CHECK(cud < fa2 / 1.3, "cuDNN SDPA %g s not faster than FA2's %g s", cud, fa2);
}

/* Over one rank NCCL moves nothing in place (the fsdp replica all-reduce at W=1: 6 us a call
 * on an H100) and copies out of place; the shared-memory communicator keeps its formula. And a
 * profile of GEMMs with a GELU epilogue prices the fused MLP op as one GEMM plus the epilogue's
 * store of the pre-activation, cheaper than the GEMM and a separate GELU pass. */
static void check_single_rank_and_epilogue(const fb_hardware *h100, const fb_hardware *cpu) {
  const int64_t n = 60 << 20;
  fb_op_cost ar = {.name = "all_reduce", .kind = FB_OP_COLL, .dtype = FB_F32,
                   .coll = FB_COLL_ALL_REDUCE, .count = n, .world = 1, .in_place = true};
  CHECK_CLOSE(fb_cost_seconds(h100, &ar, 1), h100->launch_s, 1e-15, 0);
  fb_op_cost rs = ar;
  rs.coll = FB_COLL_REDUCE_SCATTER, rs.in_place = false;
  const double copy = 2.0 * 4 * (double)n / (h100->mem_bw * h100->mem_eff);
  CHECK(fb_cost_seconds(h100, &rs, 1) >= copy, "h100: out-of-place RS over 1 rank %g s < copy %g",
        fb_cost_seconds(h100, &rs, 1), copy);
  ar.in_place = false;
  CHECK(fb_cost_seconds(h100, &ar, 1) >= copy, "h100: out-of-place AR over 1 rank is no copy");
  ar.in_place = true;
  CHECK_CLOSE(fb_cost_seconds(cpu, &ar, 1), fb_cost_collective(cpu, FB_COLL_ALL_REDUCE, 4.0 * n, 1),
              1e-15, 0);
  fb_op_cost mg = {.name = "matmul_gelu_fwd", .kind = FB_OP_GEMM, .dtype = FB_BF16, .m = 8192,
                   .n = 3072, .k = 768, .batch = 1,
                   .flops = 2.0 * 8192 * 3072 * 768 + 10.0 * 8192 * 3072,
                   .bytes = 2.0 * (8192.0 * 768 + 3072.0 * 768 + 2 * 8192.0 * 3072)};
  fb_hardware ep = *h100;
  ep.gemm_epilogue_gelu = true;
  const double two = fb_cost_seconds(h100, &mg, 1), one = fb_cost_seconds(&ep, &mg, 1);
  fb_op_cost g = mg;
  g.name = "matmul_fwd", g.flops = 2.0 * 8192 * 3072 * 768, g.bytes -= 2.0 * 8192 * 3072;
  const double aux = 2.0 * 8192 * 3072 / (h100->mem_bw * h100->mem_eff);
  CHECK_CLOSE(one, fb_cost_seconds(h100, &g, 1) + aux, 1e-12, 0);
  CHECK(one < two, "epilogue GELU %g s not cheaper than GEMM + GELU pass %g s", one, two);
}

int main(void) {
  /* every shipped profile loads, is valid and behaves */
  const char *names[] = {"h100", "h200", "a100", "a100-40gb", "h100-96gb", "h100-nvl", "cpu"};
  fb_hardware h100;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    fb_hardware hw;
    fb_status st = fb_hardware_load(names[i], &hw);
    CHECK(st == FB_OK, "profile %s: %s", names[i], fb_error_msg());
    if (st != FB_OK) continue;
    CHECK(!strcmp(hw.name, names[i]), "profile %s names itself %s", names[i], hw.name);
    CHECK_OK(fb_hardware_validate(&hw, names[i]));
    if (i == 0) h100 = hw;
    check_monotonic(&hw);
    check_collectives(&hw);
  }
  check_nccl_examples();
  check_gpu_mechanisms();
  /* and every other YAML in models/hardware loads too */
  DIR *dir = opendir("models/hardware");
  CHECK(dir != NULL, "models/hardware not found (run from the source tree)");
  int nfiles = 0;
  for (struct dirent *e; dir && (e = readdir(dir));) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".yaml")) continue;
    char p[512];
    snprintf(p, sizeof p, "models/hardware/%s", e->d_name);
    fb_hardware hw;
    CHECK_OK(fb_hardware_load(p, &hw));
    nfiles++;
  }
  if (dir) closedir(dir);
  CHECK(nfiles >= 4, "only %d profiles shipped", nfiles);
  /* published-figure sanity: an 8-GPU H100 1 GiB all-reduce is ~5-7 ms, (nccl-tests busbw
   * ~360 GB/s: 2*7/8*1.07e9/360e9 = 5.2 ms) */
  double t = fb_cost_collective(&h100, FB_COLL_ALL_REDUCE, 1073741824.0, 8);
  CHECK(t > 4e-3 && t < 8e-3, "h100 8-GPU 1 GiB all-reduce %g s", t);
  check_bad_profiles(&h100);
  fb_hardware cpu;
  CHECK_OK(fb_hardware_load("cpu", &cpu));
  check_single_rank_and_epilogue(&h100, &cpu);
  return fb_test_done("test_sim_cost");
}
