/* Hardware profile YAML: one mapping of keys, each with its unit in its name; every key is
 * required except the optional ones, `kernel_gbs` (a one-level mapping of kernel name -> GB/s)
 * and `extends: BASE` (inherit a base profile). Read with the project's one event-based YAML
 * reader (config/yaml_flat.c). A static key table drives loading, range checks and writing,
 * so the three cannot disagree.
 * This file does not model costs (cost_model.c) and does not measure anything (calibrate.c). */
#include "hardware.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/data_root.h"
#include "../core/yaml_flat.h"
#include "../device/device.h"

typedef enum hw_type { HW_STR, HW_REAL, HW_INT, HW_I64, HW_BOOL, HW_ENUM } hw_type;

typedef struct hw_key {
  const char *key;
  hw_type type;
  size_t off;
  double scale;   /* YAML value * scale = stored SI value */
  double lo, hi;  /* allowed range of the YAML value */
  bool lo_open;   /* lo excluded (value must be > lo) */
  const char *const *names; /* HW_ENUM: the allowed words, index = stored int; NULL-ended */
  const char *doc;
  bool optional;  /* may be left out: the field keeps 0 / false / the first enum word, and
                     fb_hardware_write leaves it out while it is so */
} hw_key;

static const char *const collectives_names[] = {"ring_tree", "shared_memory", "nccl", NULL};
static const char *const arch_names[] = {"none", "ampere", "hopper", NULL};
static const char *const vendor_names[] = {"intel", "amd", NULL};
static const char *const attn_kernel_names[] = {"flash2", "flash1", "triton", "cudnn", NULL};
static const char *const framework_names[] = {"eager", "eager-hf", "fused", "compile", NULL};

#define OFF(f) offsetof(fb_hardware, f)
static const hw_key hw_keys[] = {
    {.key = "name", .type = HW_STR, .off = OFF(name), .doc = "profile name"},
    {.key = "peak_tflops_fp32", .type = HW_REAL, .off = OFF(peak_fp32), .scale = 1e12, .lo = 0,
     .hi = INFINITY, .lo_open = true, .doc = "dense fp32 peak, TFLOP/s"},
    {.key = "peak_tflops_bf16", .type = HW_REAL, .off = OFF(peak_bf16), .scale = 1e12, .lo = 0,
     .hi = INFINITY, .lo_open = true, .doc = "dense bf16 peak, TFLOP/s"},
    {.key = "gemm_max_efficiency", .type = HW_REAL, .off = OFF(gemm_max_eff), .scale = 1,
     .lo = 0, .hi = 1, .lo_open = true, .doc = "fraction of peak reached by large GEMMs"},
    {.key = "gemm_half_size", .type = HW_REAL, .off = OFF(gemm_half_size), .scale = 1, .lo = 0,
     .hi = INFINITY, .lo_open = true,
     .doc = "cbrt(m*n*k*batch) at which a GEMM reaches half its max efficiency"},
    {.key = "attention_efficiency", .type = HW_REAL, .off = OFF(attn_eff), .scale = 1, .lo = 0,
     .hi = 1, .lo_open = true, .doc = "attention kernels' efficiency relative to a GEMM"},
    {.key = "mem_bw_gbs", .type = HW_REAL, .off = OFF(mem_bw), .scale = 1e9, .lo = 0,
     .hi = INFINITY, .lo_open = true, .doc = "device memory bandwidth, GB/s"},
    {.key = "mem_efficiency", .type = HW_REAL, .off = OFF(mem_eff), .scale = 1, .lo = 0, .hi = 1,
     .lo_open = true, .doc = "achieved fraction of memory bandwidth"},
    {.key = "launch_us", .type = HW_REAL, .off = OFF(launch_s), .scale = 1e-6, .lo = 0,
     .hi = 1e6, .doc = "per-kernel launch overhead, us"},
    {.key = "memory_gib", .type = HW_I64, .off = OFF(mem_capacity), .scale = 1073741824.0,
     .lo = 0, .hi = 1e9, .lo_open = true, .doc = "memory capacity per device, GiB"},
    {.key = "devices_per_node", .type = HW_INT, .off = OFF(devices_per_node), .scale = 1, .lo = 1,
     .hi = 1e6, .doc = "devices per node"},
    {.key = "intra_bw_gbs", .type = HW_REAL, .off = OFF(intra_bw), .scale = 1e9, .lo = 0,
     .hi = INFINITY, .lo_open = true,
     .doc = "intra-node link bandwidth per device per direction, GB/s"},
    {.key = "intra_lat_us", .type = HW_REAL, .off = OFF(intra_lat), .scale = 1e-6, .lo = 0,
     .hi = 1e6, .doc = "intra-node latency per hop, us"},
    {.key = "inter_bw_gbs", .type = HW_REAL, .off = OFF(inter_bw), .scale = 1e9, .lo = 0,
     .hi = INFINITY, .lo_open = true,
     .doc = "network bandwidth per device per direction, GB/s"},
    {.key = "inter_lat_us", .type = HW_REAL, .off = OFF(inter_lat), .scale = 1e-6, .lo = 0,
     .hi = 1e6, .doc = "inter-node latency per hop, us"},
    {.key = "collective_efficiency", .type = HW_REAL, .off = OFF(coll_eff), .scale = 1, .lo = 0,
     .hi = 1, .lo_open = true, .doc = "achieved fraction of link bandwidth in collectives"},
    {.key = "overlap_slowdown", .type = HW_REAL, .off = OFF(overlap_slowdown), .scale = 1,
     .lo = 1, .hi = 100, .doc = "compute slowdown while communication overlaps it"},
    {.key = "host_runs_ahead", .type = HW_BOOL, .off = OFF(host_runs_ahead),
     .doc = "true: host enqueues ahead of the device (GPU); false: host is the compute stream"},
    {.key = "shared_host", .type = HW_BOOL, .off = OFF(shared_host),
     .doc = "true: all ranks share one machine; per-rank rates divide by the world size"},
    {.key = "collectives", .type = HW_ENUM, .off = OFF(collectives), .names = collectives_names,
     .doc = "ring_tree: rings and trees; shared_memory: the local communicator; nccl: NCCL's model"},
    /* GPU mechanisms: optional, each documented in docs/simulator.md */
    {.key = "sm_count", .type = HW_INT, .off = OFF(sm_count), .scale = 1, .lo = 0, .hi = 1e6,
     .optional = true, .doc = "SMs: GEMM tile and wave quantization (0 = off)"},
    {.key = "gemm_tile_m", .type = HW_INT, .off = OFF(gemm_tile_m), .scale = 1, .lo = 0,
     .hi = 4096, .optional = true, .doc = "rows of the large GEMM kernels' output tile"},
    {.key = "gemm_tile_n", .type = HW_INT, .off = OFF(gemm_tile_n), .scale = 1, .lo = 0,
     .hi = 4096, .optional = true, .doc = "columns of the large GEMM kernels' output tile"},
    {.key = "gemm_k_half", .type = HW_REAL, .off = OFF(gemm_k_half), .scale = 1, .lo = 0,
     .hi = 1e9, .optional = true, .doc = "GEMM depth k at which the main loop runs at half rate"},
    {.key = "gemm_stream_k", .type = HW_REAL, .off = OFF(gemm_stream_k), .scale = 1, .lo = 0,
     .hi = 1, .optional = true,
     .doc = "stream-K GEMMs (Hopper cuBLAS): the fix-up factor; 0 = split-K instead"},
    {.key = "gemm_small_grid_tiles", .type = HW_INT, .off = OFF(gemm_small_grid), .scale = 1,
     .lo = 0, .hi = 1e6, .optional = true,
     .doc = "fewer large output tiles than this: one wave of them, k not split (0 = off)"},
    {.key = "gemm_launch_us", .type = HW_REAL, .off = OFF(gemm_launch_s), .scale = 1e-6,
     .lo = 0, .hi = 1e6, .optional = true, .doc = "fixed time of one GEMM call, us (0 = launch_us)"},
    {.key = "gemm_align4_factor", .type = HW_REAL, .off = OFF(gemm_align4), .scale = 1, .lo = 0,
     .hi = 1, .optional = true,
     .doc = "GEMM rate with 4- or 8-byte aligned rows over 16-byte aligned (0 = 0.69)"},
    {.key = "gemm_align2_factor", .type = HW_REAL, .off = OFF(gemm_align2), .scale = 1, .lo = 0,
     .hi = 1, .optional = true, .doc = "... with 2-byte aligned rows (0 = 0.18)"},
    {.key = "peak_tflops_fp8", .type = HW_REAL, .off = OFF(peak_fp8), .scale = 1e12, .lo = 0,
     .hi = INFINITY, .optional = true, .doc = "dense FP8 tensor-core peak, TFLOP/s"},
    {.key = "fp8_gemm_ratio", .type = HW_REAL, .off = OFF(fp8_gemm_ratio), .scale = 1, .lo = 0,
     .hi = 2, .optional = true,
     .doc = "an FP8 GEMM's fraction of the FP8 peak over a bf16 GEMM's of the bf16 peak"},
    {.key = "gemm_epilogue_gelu", .type = HW_BOOL, .off = OFF(gemm_epilogue_gelu),
     .optional = true,
     .doc = "GELU and its gradient run in the GEMM's epilogue (calibrated cuda profiles)"},
    {.key = "float8_linears", .type = HW_BOOL, .off = OFF(float8_linears), .optional = true,
     .doc = "block linears in torchao float8 (tensorwise scales, float8 all-gather)"},
    {.key = "framework", .type = HW_ENUM, .off = OFF(framework), .names = framework_names,
     .optional = true,
     .doc = "eager: eager PyTorch's kernel chains (a fused RMSNorm); eager-hf: RMSNorm's chain "
            "too (HF, fms-fsdp); fused: hand-fused norm/rotary/loss kernels; compile: "
            "torch.compile's generated kernels"},
    {.key = "peak_tflops_tf32", .type = HW_REAL, .off = OFF(peak_tf32), .scale = 1e12, .lo = 0,
     .hi = INFINITY, .optional = true, .doc = "dense TF32 tensor-core peak, TFLOP/s"},
    {.key = "tf32", .type = HW_BOOL, .off = OFF(tf32), .optional = true,
     .doc = "fp32 matmuls run on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32)"},
    {.key = "flash_fwd_efficiency", .type = HW_REAL, .off = OFF(flash_fwd_eff), .scale = 1,
     .lo = 0, .hi = 1, .optional = true,
     .doc = "FlashAttention-2 forward: fraction of peak at head dim 128, long sequences"},
    {.key = "flash_bwd_efficiency", .type = HW_REAL, .off = OFF(flash_bwd_eff), .scale = 1,
     .lo = 0, .hi = 1, .optional = true, .doc = "FlashAttention-2 backward: the same"},
    {.key = "flash_half_seq", .type = HW_REAL, .off = OFF(flash_half_seq), .scale = 1, .lo = 0,
     .hi = 1e9, .optional = true,
     .doc = "keys per query (causal: T/2) at which attention runs at half its long-sequence rate"},
    {.key = "attention_kernel", .type = HW_ENUM, .off = OFF(attention_kernel),
     .names = attn_kernel_names, .optional = true,
     .doc = "flash2: FlashAttention-2; flash1: FlashAttention-1; triton: llm-foundry's Triton "
            "kernel; cudnn: cuDNN's fused SDPA"},
    {.key = "cudnn_ratio", .type = HW_REAL, .off = OFF(cudnn_ratio), .scale = 1, .lo = 0,
     .hi = 4, .optional = true, .doc = "cuDNN's fused SDPA rate over FlashAttention-2's"},
    {.key = "cudnn_half_seq", .type = HW_REAL, .off = OFF(cudnn_half_seq), .scale = 1, .lo = 0,
     .hi = 1e9, .optional = true, .doc = "cuDNN SDPA's half-rate key count"},
    {.key = "triton_ratio", .type = HW_REAL, .off = OFF(triton_ratio), .scale = 1, .lo = 0,
     .hi = 1, .optional = true, .doc = "the Triton FlashAttention kernel's rate over FlashAttention-2's"},
    {.key = "eager_mem_factor", .type = HW_REAL, .off = OFF(eager_mem_factor), .scale = 1,
     .lo = 0, .hi = 100, .optional = true,
     .doc = "memory-bound kernels of an eager framework move this many times a fused kernel's bytes"},
    {.key = "flash1_ratio", .type = HW_REAL, .off = OFF(flash1_ratio), .scale = 1, .lo = 0,
     .hi = 1, .optional = true, .doc = "FlashAttention-1 rate over FlashAttention-2's, long sequences"},
    {.key = "flash1_half_seq", .type = HW_REAL, .off = OFF(flash1_half_seq), .scale = 1,
     .lo = 0, .hi = 1e9, .optional = true, .doc = "FlashAttention-1's half-rate key count"},
    {.key = "sustained_compute", .type = HW_REAL, .off = OFF(sustained), .scale = 1, .lo = 0,
     .hi = 1, .optional = true,
     .doc = "tensor-core rate in a long training step over the microbenchmarks' (0 = 1)"},
    {.key = "nccl_contention", .type = HW_BOOL, .off = OFF(nccl_contention), .optional = true,
     .doc = "compute beside a collective runs on the SMs and HBM NCCL leaves (overlap_slowdown unused)"},
    {.key = "rank_speed_sigma", .type = HW_REAL, .off = OFF(rank_speed_sigma), .scale = 1, .lo = 0,
     .hi = 1, .optional = true,
     .doc = "spread (sigma) of identical GPUs' speeds; a step waits for the slowest rank (0 = off)"},
    {.key = "rank_jitter", .type = HW_REAL, .off = OFF(rank_jitter), .scale = 1, .lo = 0,
     .hi = 1, .optional = true,
     .doc = "spread (sigma) of a rank's compute between meeting points, fresh each interval; "
            "a collective waits for the latest rank (0 = off)"},
    {.key = "nccl_net_busbw_per_doubling", .type = HW_REAL, .off = OFF(nccl_net_doubling),
     .scale = 1, .lo = 0, .hi = 1, .optional = true,
     .doc = "NCCL bus bandwidth across nodes per doubling of nodes beyond 2 (0 = flat)"},
    {.key = "host_op_us", .type = HW_REAL, .off = OFF(host_op_s), .scale = 1e-6, .lo = 0,
     .hi = 1e6, .optional = true, .doc = "host time to dispatch one op (eager framework), us"},
    {.key = "gpu_arch", .type = HW_ENUM, .off = OFF(gpu_arch), .names = arch_names,
     .optional = true, .doc = "GPU generation for NCCL's tuning constants"},
    {.key = "cpu_vendor", .type = HW_ENUM, .off = OFF(cpu_vendor), .names = vendor_names,
     .optional = true, .doc = "host CPU: NCCL's multi-node LL cap and network overhead"},
    {.key = "nccl_channels_node", .type = HW_INT, .off = OFF(nccl_ch_node), .scale = 1, .lo = 0,
     .hi = 64, .optional = true, .doc = "NCCL ring graph inside one node: channels"},
    {.key = "nccl_channel_gbs_node", .type = HW_REAL, .off = OFF(nccl_bw_node), .scale = 1e9,
     .lo = 0, .hi = INFINITY, .optional = true, .doc = "... and GB/s per channel"},
    {.key = "nccl_channels_net", .type = HW_INT, .off = OFF(nccl_ch_net), .scale = 1, .lo = 0,
     .hi = 64, .optional = true, .doc = "NCCL ring graph across nodes: channels"},
    {.key = "nccl_channel_gbs_net", .type = HW_REAL, .off = OFF(nccl_bw_net), .scale = 1e9,
     .lo = 0, .hi = INFINITY, .optional = true, .doc = "... and GB/s per channel"},
    {.key = "nvls_busbw_gbs", .type = HW_REAL, .off = OFF(nvls_busbw), .scale = 1e9, .lo = 0,
     .hi = INFINITY, .optional = true, .doc = "NVLink SHARP all-reduce bus bandwidth, one node"},
    {.key = "coll_overhead_us", .type = HW_REAL, .off = OFF(coll_overhead_s), .scale = 1e-6,
     .lo = 0, .hi = 1e6, .optional = true,
     .doc = "per collective: launch and framework time NCCL's model leaves out, us"},
    {.key = "nics_per_node", .type = HW_INT, .off = OFF(nics_per_node), .scale = 1, .lo = 0,
     .hi = 64, .optional = true,
     .doc = "network adapters per node (0 = not stated: inter_bw_gbs and nccl_*_net stand)"},
    {.key = "nic_gbps", .type = HW_REAL, .off = OFF(nic_bw), .scale = 1e9 / 8, .lo = 0,
     .hi = 1e5, .optional = true,
     .doc = "speed of one network adapter, Gb/s per direction (0 = not stated)"},
    /* a shared host split into 1-thread ranks (cpu executor): optional, calibrate writes them */
    {.key = "split_ranks", .type = HW_INT, .off = OFF(split_ranks), .scale = 1, .lo = 0,
     .hi = 1e6, .optional = true,
     .doc = "the split_ figures were measured with this many 1-thread ranks at once (0 = none)"},
    {.key = "split_gemm_max_efficiency", .type = HW_REAL, .off = OFF(split_gemm_max_eff),
     .scale = 1, .lo = 0, .hi = 1, .optional = true,
     .doc = "one such rank's GEMM curve on the peak: its max efficiency"},
    {.key = "split_gemm_half_size", .type = HW_REAL, .off = OFF(split_gemm_half_size),
     .scale = 1, .lo = 0, .hi = INFINITY, .optional = true, .doc = "... and its half size"},
    {.key = "split_attention_efficiency", .type = HW_REAL, .off = OFF(split_attn_eff),
     .scale = 1, .lo = 0, .hi = 1, .optional = true,
     .doc = "one such rank's attention kernels against its own GEMM curve"},
    {.key = "cuda_malloc_us", .type = HW_REAL, .off = OFF(cuda_malloc_s), .scale = 1e-6, .lo = 0,
     .hi = 1e6, .optional = true,
     .doc = "caching allocator: host time of a cudaMalloc of a new segment, us (0 = estimate)"},
    {.key = "cuda_free_us", .type = HW_REAL, .off = OFF(cuda_free_s), .scale = 1e-6, .lo = 0,
     .hi = 1e6, .optional = true,
     .doc = "caching allocator: host time of a cudaFree after its device sync, us (0 = estimate)"},
};
#define KERNEL_KEY "kernel_gbs"
#define SPLIT_KERNEL_KEY "split_kernel_gbs"
#define EXTENDS_KEY "extends"
#define KERNEL_DOC "optional: achieved GB/s (of the bytes its wrapper counts) per kernel name"
#define SPLIT_KERNEL_DOC "optional: the same for one of split_ranks 1-thread ranks at once"
#define COLL_KEY "coll_gbs"
#define COLL_DOC "optional (collectives: shared_memory): in-step GB/s per collective kind"
#define FIXED_KEY "kernel_us"
#define FIXED_DOC "optional: us a call of the kernel takes beyond launch_us and its bytes over its " \
                  "rate (calibrate --backend cuda: the line through two in-step sizes)"

/* The profile's tables (mappings of a kernel's or a collective kind's name -> a number): the
 * rate tables in GB/s, kernel_us in microseconds; `scale` turns the YAML number into SI. */
typedef struct kernel_map {
  const char *key, *doc, *unit;
  double scale;
  size_t n_off, v_off; /* offsets of the count and the array in fb_hardware */
} kernel_map;
static const kernel_map kernel_maps[] = {
    {.key = KERNEL_KEY, .doc = KERNEL_DOC, .unit = "GB/s", .scale = 1e9, .n_off = OFF(nkernels),
     .v_off = OFF(kernels)},
    {.key = SPLIT_KERNEL_KEY, .doc = SPLIT_KERNEL_DOC, .unit = "GB/s", .scale = 1e9,
     .n_off = OFF(nsplit_kernels), .v_off = OFF(split_kernels)},
    {.key = COLL_KEY, .doc = COLL_DOC, .unit = "GB/s", .scale = 1e9, .n_off = OFF(ncoll_rates),
     .v_off = OFF(coll_rates)},
    {.key = FIXED_KEY, .doc = FIXED_DOC, .unit = "us", .scale = 1e-6,
     .n_off = OFF(nkernel_fixed), .v_off = OFF(kernel_fixed)},
};
enum { NMAPS = sizeof kernel_maps / sizeof kernel_maps[0] };

static const kernel_map *find_map(const char *key) {
  for (int i = 0; i < NMAPS; i++)
    if (!strcmp(kernel_maps[i].key, key)) return &kernel_maps[i];
  return NULL;
}
static int *map_n(const kernel_map *m, fb_hardware *hw) { return (int *)((char *)hw + m->n_off); }
static fb_hw_kernel *map_v(const kernel_map *m, fb_hardware *hw) {
  return (fb_hw_kernel *)((char *)hw + m->v_off);
}
static int map_nc(const kernel_map *m, const fb_hardware *hw) {
  return *(const int *)((const char *)hw + m->n_off);
}
static const fb_hw_kernel *map_vc(const kernel_map *m, const fb_hardware *hw) {
  return (const fb_hw_kernel *)((const char *)hw + m->v_off);
}
#undef OFF
enum { HW_NKEYS = sizeof hw_keys / sizeof hw_keys[0] };

static const hw_key *find_key(const char *k) {
  for (int i = 0; i < HW_NKEYS; i++)
    if (strcmp(hw_keys[i].key, k) == 0) return &hw_keys[i];
  return NULL;
}

static void range_text(const hw_key *k, char *buf, size_t n) {
  switch (k->type) {
  case HW_STR: snprintf(buf, n, "a non-empty name of at most 63 characters"); break;
  case HW_BOOL: snprintf(buf, n, "true or false"); break;
  case HW_ENUM: {
    size_t off = (size_t)snprintf(buf, n, "one of");
    for (int i = 0; k->names[i] && off < n; i++)
      off += (size_t)snprintf(buf + off, n - off, "%s %s", i ? "," : "", k->names[i]);
    break;
  }
  case HW_INT: snprintf(buf, n, "an integer in [%g, %g]", k->lo, k->hi); break;
  default:
    if (isinf(k->hi))
      snprintf(buf, n, "a number %s %g", k->lo_open ? ">" : ">=", k->lo);
    else
      snprintf(buf, n, "a number in %c%g, %g]", k->lo_open ? '(' : '[', k->lo, k->hi);
  }
}

static fb_status bad_value(const char *file, const hw_key *k, const char *val) {
  char allowed[96];
  range_text(k, allowed, sizeof allowed);
  return FB_ERR(FB_EUSAGE, "%s: key '%s' = '%s': allowed %s (%s)", file, k->key, val, allowed,
                k->doc);
}

static bool in_range(const hw_key *k, double v) {
  if (!isfinite(v)) return false;
  if (k->lo_open ? !(v > k->lo) : !(v >= k->lo)) return false;
  return v <= k->hi;
}

/* Parses one scalar into the profile. */
static fb_status set_key(const char *file, const hw_key *k, const char *val, fb_hardware *hw) {
  char *base = (char *)hw + k->off;
  if (k->type == HW_STR) {
    size_t len = strlen(val);
    if (len == 0 || len >= sizeof hw->name) return bad_value(file, k, val);
    memcpy(base, val, len + 1);
    return FB_OK;
  }
  if (k->type == HW_ENUM) {
    for (int i = 0; k->names[i]; i++)
      if (!strcmp(val, k->names[i])) {
        *(int *)base = i;
        return FB_OK;
      }
    return bad_value(file, k, val);
  }
  if (k->type == HW_BOOL) {
    bool b;
    if (!strcasecmp(val, "true") || !strcasecmp(val, "yes") || !strcmp(val, "1"))
      b = true;
    else if (!strcasecmp(val, "false") || !strcasecmp(val, "no") || !strcmp(val, "0"))
      b = false;
    else
      return bad_value(file, k, val);
    *(bool *)base = b;
    return FB_OK;
  }
  char *end = NULL;
  errno = 0;
  double v = strtod(val, &end);
  if (end == val || *end != '\0' || errno == ERANGE || !in_range(k, v))
    return bad_value(file, k, val);
  switch (k->type) {
  case HW_REAL: *(double *)base = v * k->scale; break;
  case HW_INT:
    if (v != floor(v)) return bad_value(file, k, val);
    *(int *)base = (int)v;
    break;
  case HW_I64: *(int64_t *)base = (int64_t)llround(v * k->scale); break;
  default: assert(0);
  }
  return FB_OK;
}

static double get_yaml_value(const hw_key *k, const fb_hardware *hw) {
  const char *base = (const char *)hw + k->off;
  switch (k->type) {
  case HW_REAL: return *(const double *)base / k->scale;
  case HW_INT: return *(const int *)base;
  case HW_I64: return (double)*(const int64_t *)base / k->scale;
  case HW_BOOL: return *(const bool *)base;
  default: return 0;
  }
}

/* coll_gbs names collective kinds, and prices the local communicator's algorithm only. */
static fb_status check_coll_rates(const fb_hardware *hw, const char *where) {
  if (hw->ncoll_rates > 0 && hw->collectives != FB_COLLS_SHARED_MEMORY)
    return FB_ERR(FB_EUSAGE, "%s: key '%s' needs 'collectives: shared_memory' (it prices the "
                  "local communicator's algorithm; got collectives: %s)", where, COLL_KEY,
                  collectives_names[hw->collectives]);
  for (int i = 0; i < hw->ncoll_rates; i++) {
    bool known = false;
    for (int c = 0; c < FB_NCOLL && !known; c++)
      known = !strcmp(hw->coll_rates[i].name, fb_coll_name((fb_coll)c));
    if (known) continue;
    char names[160] = ""; /* the registry's names, for the message */
    for (int c = 0; c < FB_NCOLL; c++) {
      size_t o = strlen(names);
      snprintf(names + o, sizeof names - o, "%s%s", c ? ", " : "", fb_coll_name((fb_coll)c));
    }
    return FB_ERR(FB_EUSAGE, "%s: key '%s.%s': not a collective (allowed: %s)", where, COLL_KEY,
                  hw->coll_rates[i].name, names);
  }
  return FB_OK;
}

/* The split figures come whole: split_ranks 0, or >= 2 with the curve and attention set. */
static fb_status check_split(const fb_hardware *hw, const char *where) {
  if (hw->split_ranks == 1)
    return FB_ERR(FB_EUSAGE, "%s: key 'split_ranks' = '1': allowed 0 (no split figures) or at "
                  "least 2 (the ranks measured at once)", where);
  if (hw->split_ranks > 1 && !(hw->split_gemm_max_eff > 0 && hw->split_gemm_half_size > 0 &&
                               hw->split_attn_eff > 0))
    return FB_ERR(FB_EUSAGE, "%s: key 'split_ranks' = '%d' needs split_gemm_max_efficiency, "
                  "split_gemm_half_size and split_attention_efficiency > 0", where,
                  hw->split_ranks);
  return FB_OK;
}

static fb_status validate_map(const kernel_map *m, const fb_hardware *hw, const char *where) {
  const int n = map_nc(m, hw);
  const fb_hw_kernel *v = map_vc(m, hw);
  if (n < 0 || n > FB_HW_MAX_KERNELS)
    return FB_ERR(FB_EUSAGE, "%s: key '%s' has %d entries: allowed at most %d (%s)", where,
                  m->key, n, FB_HW_MAX_KERNELS, m->doc);
  for (int i = 0; i < n; i++) {
    const fb_hw_kernel *e = &v[i];
    if (e->name[0] == '\0')
      return FB_ERR(FB_EUSAGE, "%s: key '%s': entry %d has an empty kernel name", where, m->key,
                    i);
    if (!(isfinite(e->bw) && e->bw > 0))
      return FB_ERR(FB_EUSAGE, "%s: key '%s.%s' = '%g': allowed a number > 0 (%s)", where,
                    m->key, e->name, e->bw / m->scale, m->doc);
    for (int j = 0; j < i; j++)
      if (!strcmp(v[j].name, e->name))
        return FB_ERR(FB_EUSAGE, "%s: key '%s.%s' given twice", where, m->key, e->name);
  }
  return FB_OK;
}

fb_status fb_hardware_validate(const fb_hardware *hw, const char *where) {
  for (int i = 0; i < HW_NKEYS; i++) {
    const hw_key *k = &hw_keys[i];
    if (k->type == HW_STR) {
      if (hw->name[0] == '\0') return bad_value(where, k, "");
      continue;
    }
    if (k->type == HW_BOOL) continue;
    if (k->type == HW_ENUM) {
      int v = *(const int *)((const char *)hw + k->off), n = 0;
      while (k->names[n]) n++;
      if (v < 0 || v >= n) {
        char buf[40];
        snprintf(buf, sizeof buf, "%d", v);
        return bad_value(where, k, buf);
      }
      continue;
    }
    double v = get_yaml_value(k, hw);
    if (!in_range(k, v)) {
      char buf[40];
      snprintf(buf, sizeof buf, "%g", v);
      return bad_value(where, k, buf);
    }
  }
  for (int m = 0; m < NMAPS; m++)
    FB_TRY(validate_map(&kernel_maps[m], hw, where));
  FB_TRY(check_coll_rates(hw, where));
  return check_split(hw, where);
}

static double table_bw(const fb_hw_kernel *v, int n, const char *name) {
  if (!name) return 0;
  for (int i = 0; i < n; i++)
    if (!strcmp(v[i].name, name)) return v[i].bw;
  return 0;
}

double fb_hardware_kernel_bw(const fb_hardware *hw, const char *name) {
  return table_bw(hw->kernels, hw->nkernels, name);
}

double fb_hardware_split_kernel_bw(const fb_hardware *hw, const char *name) {
  return table_bw(hw->split_kernels, hw->nsplit_kernels, name);
}

double fb_hardware_coll_bw(const fb_hardware *hw, const char *name) {
  return table_bw(hw->coll_rates, hw->ncoll_rates, name);
}

double fb_hardware_kernel_fixed_s(const fb_hardware *hw, const char *name) {
  return table_bw(hw->kernel_fixed, hw->nkernel_fixed, name);
}

/* Loading runs the shared event-based YAML reader (config/yaml_flat.c) twice over the file:
 * the first pass finds `extends`, whose base profile is loaded first; the second applies every
 * key over it. Both refuse anything deeper than `kernel_gbs`'s one-level mapping. */
typedef struct hw_ctx {
  fb_hardware *hw;
  bool seen[HW_NKEYS];
  bool table_seen[NMAPS]; /* this file gave kernel_maps[i]'s table (it replaces the base's) */
  char extends[1024]; /* pass 1: the base profile named ("" = none) */
} hw_ctx;

static fb_status unknown_key(const char *path, int line, const char *key) {
  char known[1024];
  size_t off = 0;
  for (int i = 0; i < HW_NKEYS && off < sizeof known; i++)
    off += (size_t)snprintf(known + off, sizeof known - off, "%s%s", i ? ", " : "",
                            hw_keys[i].key);
  for (int m = 0; m < NMAPS && off < sizeof known; m++)
    off += (size_t)snprintf(known + off, sizeof known - off, ", %s", kernel_maps[m].key);
  return FB_ERR(FB_EUSAGE, "%s:%d: unknown key '%s' (known keys: %s)", path, line, key, known);
}

/* Pass 1: remembers `extends`; every other key waits for pass 2. */
static fb_status find_extends(void *vctx, const char *path, int line, const char *key,
                              const char *val) {
  hw_ctx *c = vctx;
  if (strcmp(key, EXTENDS_KEY)) return FB_OK;
  if (!val[0] || strlen(val) >= sizeof c->extends)
    return FB_ERR(FB_EUSAGE, "%s:%d: key '%s' needs a profile name or path (1 to %zu "
                  "characters)", path, line, EXTENDS_KEY, sizeof c->extends - 1);
  snprintf(c->extends, sizeof c->extends, "%s", val);
  return FB_OK;
}

static fb_status skip_entry(void *vctx, const char *path, int line, const char *key,
                            const char *name, const char *val) {
  return FB_OK;
}

/* Pass 2: one `key: value` (the reader has refused duplicates). */
static fb_status apply_key(void *vctx, const char *path, int line, const char *key,
                           const char *val) {
  hw_ctx *c = vctx;
  if (!strcmp(key, EXTENDS_KEY)) return FB_OK; /* applied first */
  const kernel_map *m = find_map(key);
  if (m)
    return FB_ERR(FB_EUSAGE, "%s:%d: key '%s' must be a mapping of kernel name to %s, e.g. "
                  "'%s: {gelu_fwd: 3.5}' (%s)", path, line, m->key, m->unit, m->key, m->doc);
  const hw_key *k = find_key(key);
  if (!k) return unknown_key(path, line, key);
  c->seen[k - hw_keys] = true;
  return set_key(path, k, val, c->hw);
}

/* Pass 2: one entry of a table (kernel_gbs, split_kernel_gbs, coll_gbs: name -> GB/s;
 * kernel_us: name -> us). */
static fb_status apply_kernel(void *vctx, const char *path, int line, const char *key,
                              const char *name, const char *val) {
  fb_hardware *hw = ((hw_ctx *)vctx)->hw;
  const kernel_map *m = find_map(key);
  if (!m) {
    if (!find_key(key) && strcmp(key, EXTENDS_KEY)) return unknown_key(path, line, key);
    return FB_ERR(FB_EUSAGE, "%s:%d: key '%s' needs a single value", path, line, key);
  }
  int *n = map_n(m, hw);
  fb_hw_kernel *v = map_v(m, hw);
  bool *given = &((hw_ctx *)vctx)->table_seen[m - kernel_maps];
  if (!*given) *n = 0; /* the first entry of this file's table drops the base's */
  *given = true;
  size_t len = strlen(name);
  if (len == 0 || len >= sizeof v[0].name)
    return FB_ERR(FB_EUSAGE, "%s:%d: key '%s': kernel name '%s': allowed 1 to %zu characters",
                  path, line, m->key, name, sizeof v[0].name - 1);
  if (*n >= FB_HW_MAX_KERNELS)
    return FB_ERR(FB_EUSAGE, "%s:%d: key '%s': more than %d kernels", path, line, m->key,
                  FB_HW_MAX_KERNELS);
  char *end = NULL;
  errno = 0;
  double x = strtod(val, &end);
  if (end == val || *end != '\0' || errno == ERANGE || !isfinite(x) || !(x > 0))
    return FB_ERR(FB_EUSAGE, "%s:%d: key '%s.%s' = '%s': allowed a number > 0 (%s)", path, line,
                  m->key, name, val, m->doc);
  for (int j = 0; j < *n; j++)
    if (!strcmp(v[j].name, name))
      return FB_ERR(FB_EUSAGE, "%s:%d: key '%s.%s' given twice", path, line, m->key, name);
  fb_hw_kernel *e = &v[(*n)++];
  memcpy(e->name, name, len + 1);
  e->bw = x * m->scale;
  return FB_OK;
}

double fb_hardware_peak(const fb_hardware *hw, fb_dtype t) {
  return t == FB_BF16 ? hw->peak_bf16 : hw->peak_fp32;
}

/* `extends: BASE` (a profile name or path): the base profile's values first, so a cluster file
 * states only what differs (its network, its GPUs per node); the file may then set any key
 * again, and a kernel table it gives replaces the base's (one it does not give is the base's:
 * `validate --dataset` writes such files for a row's network over a calibrated profile). At
 * most 4 levels. */
static fb_status load_depth(const char *name_or_path, fb_hardware *out, int depth) {
  char path[1024];
  FB_TRY(fb_resolve_yaml("models/hardware", name_or_path, path, sizeof path));
  fb_hardware hw;
  memset(&hw, 0, sizeof hw);
  hw_ctx c = {.hw = &hw};
  const fb_yaml_shape base_pass = {.flag = "--hardware", .visit = find_extends,
                                   .entry = skip_entry};
  const fb_yaml_shape key_pass = {.flag = "--hardware", .visit = apply_key,
                                  .entry = apply_kernel};
  FB_TRY(fb_yaml_read(path, &base_pass, &c));
  if (c.extends[0]) {
    if (depth >= 4)
      return FB_ERR(FB_EUSAGE, "%s: key '%s' = '%s': allowed at most 4 levels of extends", path,
                    EXTENDS_KEY, c.extends);
    FB_TRY(load_depth(c.extends, &hw, depth + 1));
  }
  const bool based = hw.name[0] != 0; /* a base profile supplied every required key */
  FB_TRY(fb_yaml_read(path, &key_pass, &c));
  for (int i = 0; i < HW_NKEYS; i++) {
    if (c.seen[i] || hw_keys[i].optional || based) continue;
    char allowed[96];
    range_text(&hw_keys[i], allowed, sizeof allowed);
    return FB_ERR(FB_EUSAGE, "%s: missing key '%s' (%s; %s)", path, hw_keys[i].key,
                  hw_keys[i].doc, allowed);
  }
  *out = hw;
  return FB_OK;
}

fb_status fb_hardware_load(const char *name_or_path, fb_hardware *out) {
  FB_TRY(load_depth(name_or_path, out, 0));
  FB_TRY(check_coll_rates(out, name_or_path));
  return check_split(out, name_or_path);
}

/* Shortest %g form of si / scale that reads back (times scale) to si within 1e-13: short
 * numbers in the file, the same doubles (to rounding) once loaded. */
static void fmt_real(char *buf, size_t n, double si, double scale) {
  for (int prec = 4; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, si / scale);
    if (fabs(strtod(buf, NULL) * scale - si) <= 1e-13 * fabs(si)) return;
  }
}

/* An optional key still at its zero value (0, false, the first enum word). */
static bool is_unset(const hw_key *k, const fb_hardware *hw) {
  const char *base = (const char *)hw + k->off;
  switch (k->type) {
  case HW_BOOL: return !*(const bool *)base;
  case HW_ENUM:
  case HW_INT: return *(const int *)base == 0;
  default: return get_yaml_value(k, hw) == 0;
  }
}

fb_status fb_hardware_write(const char *path, const fb_hardware *hw, const char *comment) {
  FB_TRY(fb_hardware_validate(hw, path));
  FILE *f = fopen(path, "w");
  if (!f) return FB_ERR(FB_EIO, "cannot write hardware profile %s: %s", path, strerror(errno));
  fb_status st = fb_hardware_write_to(f, path, hw, comment);
  if (fclose(f) != 0 && st == FB_OK) st = FB_ERR(FB_EIO, "cannot write hardware profile %s", path);
  return st;
}

fb_status fb_hardware_write_to(FILE *f, const char *path, const fb_hardware *hw,
                               const char *comment) {
  FB_TRY(fb_hardware_validate(hw, path));
  if (comment) {
    const char *line = comment;
    while (*line) {
      const char *nl = strchr(line, '\n');
      int len = nl ? (int)(nl - line) : (int)strlen(line);
      fprintf(f, "# %.*s\n", len, line);
      line += len + (nl ? 1 : 0);
    }
  }
  for (int i = 0; i < HW_NKEYS; i++) {
    const hw_key *k = &hw_keys[i];
    char val[64];
    if (k->optional && is_unset(k, hw)) continue;
    if (k->type == HW_STR)
      snprintf(val, sizeof val, "%s", hw->name);
    else if (k->type == HW_BOOL)
      snprintf(val, sizeof val, "%s", *(const bool *)((const char *)hw + k->off) ? "true" : "false");
    else if (k->type == HW_ENUM)
      snprintf(val, sizeof val, "%s", k->names[*(const int *)((const char *)hw + k->off)]);
    else
      fmt_real(val, sizeof val, k->type == HW_REAL ? *(const double *)((const char *)hw + k->off)
                                                   : get_yaml_value(k, hw),
               k->type == HW_REAL ? k->scale : 1);
    char key[40];
    snprintf(key, sizeof key, "%s:", k->key);
    fprintf(f, "%-23s %-14s # %s\n", key, val, k->doc);
  }
  for (int m = 0; m < NMAPS; m++) {
    const kernel_map *km = &kernel_maps[m];
    const int n = map_nc(km, hw);
    const fb_hw_kernel *v = map_vc(km, hw);
    if (n <= 0) continue;
    fprintf(f, "%s:%*s # %s\n", km->key, 38 - (int)strlen(km->key) - 1, "", km->doc);
    for (int i = 0; i < n; i++) {
      char val[64], key[40];
      fmt_real(val, sizeof val, v[i].bw, km->scale);
      snprintf(key, sizeof key, "%s:", v[i].name);
      fprintf(f, "  %-21s %s\n", key, val);
    }
  }
  return ferror(f) ? FB_ERR(FB_EIO, "cannot write hardware profile %s", path) : FB_OK;
}

fb_status fb_hardware_set_network(fb_hardware *hw, int nics_per_node, double nic_gbps) {
  if (nics_per_node < 0 || nics_per_node > 64)
    return FB_ERR(FB_EUSAGE, "--nics-per-node: %d is not allowed (want 0 to 64; 0 = the "
                  "profile's)", nics_per_node);
  if (!(nic_gbps >= 0 && nic_gbps <= 1e5))
    return FB_ERR(FB_EUSAGE, "--nic-gbps: %g is not allowed (want 0 to 100000 Gb/s; 0 = the "
                  "profile's)", nic_gbps);
  if (nics_per_node > 0) hw->nics_per_node = nics_per_node;
  if (nic_gbps > 0) hw->nic_bw = nic_gbps * 1e9 / 8;
  return FB_OK;
}
