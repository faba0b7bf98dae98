/* Cost model formulas (see docs/simulator.md for the derivation and the sources):
 *  - GEMM / attention: launch + max(flops / (peak[dtype] * eff(size)), bytes / (bw * mem_eff))
 *  - memory-bound ops: launch + bytes / (bw * mem_eff), or bytes / the kernel's own measured
 *    rate when the profile lists its name (kernel_gbs)
 *  - a shared host (the cpu executor's ranks on one machine) divides the machine's rates by the
 *    world, or, with split figures and at least split_ranks ranks, gives each rank the rates
 *    measured for one of split_ranks 1-thread ranks (rank_figs below)
 *  - collectives: ring (and, for all-reduce / barrier, a tree alternative: like NCCL's tuner
 *    we take the cheaper), hierarchical when the ranks span nodes: the intra-node and the
 *    network stages pipeline, so the slower stage's bandwidth term bounds, both latencies add.
 *    With `collectives: shared_memory` (the local communicator: ranks are threads of one
 *    machine) the collective is its own algorithm instead: every rank copies or reduces whole
 *    buffers through the one memory system, so the bytes all ranks move, over the machine's
 *    copy bandwidth (or the kind's own in-step rate, coll_gbs), plus one latency per group
 *    barrier. A ring on a shared host (MPI processes on one machine) shares the machine's
 *    bandwidth among the W ranks.
 *  - world 1: a collective into another buffer is a device copy (NCCL copies); broadcast and
 *    barrier cost nothing. The local communicator (shared_memory) still hands the collective
 *    to its comm thread and runs its copy or reduce loop there: the shared-memory formula at
 *    W = 1 with one latency (the hand-off; no partner to meet).
 * It keeps no state and knows nothing about streams (device_sim.c does). */
#include "cost_model.h"

#include <math.h>
#include <string.h>

#include "nccl_model.h"

static double curve_efficiency(double max_eff, double half_size, double size) {
  if (!(size > 0)) return max_eff * 1e-3; /* degenerate shape: tiny but finite */
  return max_eff * size / (size + half_size);
}

double fb_cost_gemm_efficiency(const fb_hardware *hw, double size) {
  return curve_efficiency(hw->gemm_max_eff, hw->gemm_half_size, size);
}

/* Rates of one rank: a shared host splits its cores and memory among the ranks. */
static double rank_share(const fb_hardware *hw, int world) {
  return hw->shared_host && world > 1 ? 1.0 / world : 1.0;
}

/* The compute figures one rank of a world-W run uses. A shared host whose profile has split
 * figures (split_ranks S > 1: calibrate ran S 1-thread ranks at once, each on a core of its
 * own) runs a world of W >= S ranks at those figures, times S / W when the ranks outnumber the
 * cores (W > S: time-sliced); the runner gives such ranks 1 thread each. Otherwise (W < S:
 * ranks of several threads, or no split figures) a rank gets the whole machine's figures over
 * W. Memory rooflines are the machine's bandwidth over W either way. */
typedef struct rank_figures {
  double gemm_max_eff, gemm_half_size, attn_eff;
  double share; /* of the compute rate and of the split kernel rates */
  bool split;   /* the split figures apply */
} rank_figures;

static rank_figures rank_figs(const fb_hardware *hw, int world) {
  rank_figures f = {hw->gemm_max_eff, hw->gemm_half_size, hw->attn_eff, rank_share(hw, world),
                    false};
  if (hw->shared_host && hw->split_ranks > 1 && world >= hw->split_ranks) {
    f.gemm_max_eff = hw->split_gemm_max_eff;
    f.gemm_half_size = hw->split_gemm_half_size;
    f.attn_eff = hw->split_attn_eff;
    f.share = (double)hw->split_ranks / world;
    f.split = true;
  }
  return f;
}

/* A kernel's measured rate for one rank: its split rate, else the whole machine's measured
 * rate over the world; 0 when the profile measured neither. */
static double measured_kernel_bw(const fb_hardware *hw, const rank_figures *f, const char *name,
                                 int world) {
  double bw = f->split ? fb_hardware_split_kernel_bw(hw, name) : 0;
  if (bw > 0) return bw * f->share;
  bw = fb_hardware_kernel_bw(hw, name);
  return bw > 0 ? bw * rank_share(hw, world) : 0;
}

/* A memory-bound op's rate for one rank: its name's measured rate, else (a memset or copy
 * recorded under its caller's name) the plain op's, else the bandwidth roofline over the
 * world. */
static double rank_kernel_bw(const fb_hardware *hw, const rank_figures *f, const fb_op_cost *c,
                             int world) {
  double bw = measured_kernel_bw(hw, f, c->name, world);
  if (!(bw > 0) && c->raw) bw = measured_kernel_bw(hw, f, c->raw, world);
  return bw > 0 ? bw : hw->mem_bw * hw->mem_eff * rank_share(hw, world);
}

/* ---- GPU GEMMs: tile and wave quantization ------------------------------------------------
 * A GEMM library covers the m x n output with tiles, runs them in waves of one tile per SM and
 * streams k through each tile's main loop. Useful work over the capacity of the waves it takes
 * is what tile padding and wave quantization leave (the "tail effect" of NVIDIA's matmul
 * performance guide); k/(k + k_half) is the main loop's prologue/epilogue share. Libraries
 * choose among tile shapes and ways to split k when the grid cannot fill the GPU, so we take the
 * best of the profile's large tile, its halves (which reuse less data per load: the factors
 * below, from cuBLAS's smaller tiles running ~10-20% slower per FLOP on full grids) and either
 *  - split-K in 2..16 pieces of at least 512 (the partial sums' extra pass and reduction: 0.8),
 *    the older libraries' way (gemm_stream_k 0: cuBLAS 11/12 on Ampere, XLA's Triton GEMMs), or
 *  - stream-K (gemm_stream_k > 0: Hopper's cuBLAS 12.x/13 "nvjet" kernels): the main-loop
 *    iterations of all tiles are dealt evenly to the SMs, so the waves stop quantizing; the
 *    partial tiles' fix-up costs the factor gemm_stream_k.
 * Below gemm_small_grid_tiles large tiles (a small output), cuBLAS runs one wave of large tiles
 * and splits nothing (1024^3 and 768x768x8192 on the lent H100 at 92 and 115 TFLOP/s: one such
 * wave predicts 87 and 95; docs/simulator.md). */
typedef struct tile_variant {
  int div_m, div_n;
  double eff;
} tile_variant;
static const tile_variant tile_variants[] = {{1, 1, 1.0}, {1, 2, 0.9}, {2, 2, 0.8}};

static double tile_util(double m, double n, double batch, double tm, double tn, int sm, int split) {
  double tiles = ceil(m / tm) * ceil(n / tn) * batch * split;
  double waves = ceil(tiles / sm);
  return m * n * batch * split / (waves * sm * tm * tn);
}

/* Stream-K: every tile's k loop cut into 64-deep iterations, dealt evenly to the SMs; the
 * padding of the edge tiles stays. */
static double stream_k_util(double m, double n, double k, double batch, double tm, double tn,
                            int sm) {
  double tiles = ceil(m / tm) * ceil(n / tn) * batch;
  double units = tiles * ceil(k / 64.0);
  return units / (ceil(units / sm) * sm) * (m * n * batch) / (tiles * tm * tn);
}

/* Operands whose rows are not 16-byte aligned fall off the tensor-core fast path (no 16-byte
 * vector loads or TMA copies). The cost depends on the alignment left, the largest power of
 * two dividing every dimension's bytes (TF32 reads fp32 operands): 4 or 8 bytes x
 * gemm_align4_factor, 2 bytes (an odd dimension in bf16, e.g. GPT-2's vocabulary of 50,257) x
 * gemm_align2_factor; profiles without them: 0.69 and 0.18.
 *  - 0.69: mle-swiglu (gemm.csv, H100 fp16, cuBLAS 12): d_ff 10922 at 272.7 TFLOP/s against
 *    ~395 for aligned neighbours. torch 2.11 / cuBLAS 13 measured 0.37-0.38 on an H200 and an H100
 *    (docs/h200/gemm.csv, h100-torch-gemm.csv: the LM-head products at vocabulary 50,300 and
 *    50,298 against 50,304), which the Hopper profiles carry.
 *  - 0.18: the same sweeps at vocabulary 50,257: 0.13-0.21 of 50,304, mean 0.178; cuBLAS runs
 *    pre-Hopper kernels there (CUPTI: cutlass_75_tensorop_bf16_s1688gemm). */
static double gemm_align_factor(const fb_hardware *hw, double m, double n, double k, double esz) {
  double g = 16;
  const double b[3] = {m * esz, n * esz, k * esz};
  for (int i = 0; i < 3; i++)
    while (g > 1 && fmod(b[i], g) != 0) g /= 2;
  if (g >= 16) return 1.0;
  if (g >= 4) return hw->gemm_align4 > 0 ? hw->gemm_align4 : 0.69;
  return hw->gemm_align2 > 0 ? hw->gemm_align2 : 0.18;
}

/* The best (tile, split) candidate's efficiency before the profile's ceiling and alignment. */
static double gemm_best_tiling(const fb_hardware *hw, double m, double n, double k,
                               double batch) {
  const double TM = hw->gemm_tile_m, TN = hw->gemm_tile_n;
  const double big = fmin(ceil(m / TM) * ceil(n / TN), ceil(m / TN) * ceil(n / TM)) * batch;
  const bool small = hw->gemm_small_grid > 0 && big < hw->gemm_small_grid;
  double best = 0;
  for (size_t v = 0; v < sizeof tile_variants / sizeof tile_variants[0]; v++) {
    if (small && v > 0) break; /* a small grid: one wave of the large tile */
    double tm = TM / tile_variants[v].div_m, tn = TN / tile_variants[v].div_n;
    for (int orient = 0; orient < 2; orient++) {
      double a = orient ? tn : tm, b = orient ? tm : tn, f = tile_variants[v].eff;
      double kf = k / (k + hw->gemm_k_half);
      best = fmax(best, f * tile_util(m, n, batch, a, b, hw->sm_count, 1) * kf);
      if (small) continue;
      if (hw->gemm_stream_k > 0) {
        best = fmax(best, f * hw->gemm_stream_k *
                              stream_k_util(m, n, k, batch, a, b, hw->sm_count) * kf);
        continue;
      }
      for (int split = 2; split <= 16 && k / split >= 512; split *= 2) {
        double kk = k / split;
        best = fmax(best, f * tile_util(m, n, batch, a, b, hw->sm_count, split) * kk /
                              (kk + hw->gemm_k_half) * 0.8);
      }
    }
  }
  return best;
}

double fb_cost_gemm_shape_efficiency(const fb_hardware *hw, double m, double n, double k,
                                     double batch, fb_dtype t) {
  if (!(m > 0 && n > 0 && k > 0 && batch > 0)) return hw->gemm_max_eff * 1e-3;
  return hw->gemm_max_eff * gemm_best_tiling(hw, m, n, k, batch) *
         gemm_align_factor(hw, m, n, k, (double)fb_dtype_size(t));
}

static double matmul_peak(const fb_hardware *hw, fb_dtype t) {
  if (t != FB_BF16 && hw->tf32 && hw->peak_tf32 > 0) return hw->peak_tf32;
  return fb_hardware_peak(hw, t);
}

/* ---- attention: FlashAttention curves ----------------------------------------------------
 * Rate = peak x eff(pass) x kernel ratio x (hd/128)^0.2 (hd < 128) x x/(x + half), x = keys
 * per query (T, or T/2 under a causal mask). Fitted on the FlashAttention-2 README figures in
 * attention.csv; FlashAttention-1 and cuDNN's fused SDPA scale the curve by their own ratio
 * with their own half-rate point, llm-foundry's Triton kernel by its ratio (docs/simulator.md
 * gives each fit and its residual). */
static double flash_efficiency(const fb_hardware *hw, const fb_op_cost *c) {
  bool bwd = c->name && strstr(c->name, "bwd");
  double ratio = 1.0, half = hw->flash_half_seq;
  switch (hw->attention_kernel) {
  case FB_ATTN_FLASH1:
    if (hw->flash1_ratio > 0) ratio = hw->flash1_ratio, half = hw->flash1_half_seq;
    break;
  case FB_ATTN_TRITON:
    if (hw->triton_ratio > 0) ratio = hw->triton_ratio;
    break;
  case FB_ATTN_CUDNN:
    if (hw->cudnn_ratio > 0) ratio = hw->cudnn_ratio, half = hw->cudnn_half_seq;
    break;
  default: break;
  }
  double x = c->causal ? 0.5 * (double)c->m : (double)c->m;
  double hd = (double)c->k, hdf = hd >= 128 ? 1.0 : pow(hd / 128.0, 0.2);
  return (bwd ? hw->flash_bwd_eff : hw->flash_fwd_eff) * ratio * hdf * x / (x + half);
}

/* Microbenchmarks run for seconds; a training step holds the GPU at its power limit for
 * minutes, beside collectives that take SMs and L2: the profile's sustained factor scales
 * tensor-core rates (docs/simulator.md: fitted on the development set, one per GPU type). */
static double sustained(const fb_hardware *hw) { return hw->sustained > 0 ? hw->sustained : 1.0; }

/* One GPU GEMM of m x n x k (batch products) on the shape model, in seconds; `fp8`: a torchao
 * float8 linear (the FP8 peak, the FP8 ratio, one-byte operands for the alignment). */
static double gpu_gemm_seconds(const fb_hardware *hw, fb_dtype t, double m, double n, double k,
                               double batch, bool fp8) {
  double eff = fp8 ? hw->gemm_max_eff * gemm_best_tiling(hw, m, n, k, batch) *
                         gemm_align_factor(hw, m, n, k, 1.0) * hw->fp8_gemm_ratio
                   : fb_cost_gemm_shape_efficiency(hw, m, n, k, batch, t);
  double peak = fp8 ? hw->peak_fp8 : matmul_peak(hw, t);
  double launch = hw->gemm_launch_s > 0 ? hw->gemm_launch_s : hw->launch_s;
  double bytes = (m * k + k * n + m * n) * batch * (fp8 ? 1.0 : (double)fb_dtype_size(t));
  return launch + fmax(2.0 * m * n * k * batch / (peak * eff * sustained(hw)),
                       bytes / (hw->mem_bw * hw->mem_eff));
}

double fb_cost_gemm_seconds(const fb_hardware *hw, fb_dtype t, double m, double n, double k,
                            double batch, bool fp8) {
  if (hw->sm_count > 0) return gpu_gemm_seconds(hw, t, m, n, k, batch, fp8);
  fb_op_cost c = {.name = "matmul", .kind = FB_OP_GEMM, .dtype = t, .m = (int64_t)m,
                  .n = (int64_t)n, .k = (int64_t)k, .batch = (int64_t)batch};
  c.flops = 2.0 * m * n * k * batch;
  c.bytes = (m * k + k * n + m * n) * batch * (double)fb_dtype_size(t);
  return fb_cost_seconds(hw, &c, 1);
}

/* torchao's tensorwise float8 casts around a block linear (its own kernels, memory-bound):
 * the bf16 operand's amax and its scaled cast (read 2 + 2 bytes, write 1 per element) for the
 * forward input and the backward output gradient, and the fp8 transposes the weight gradient
 * and input gradient read (read 1, write 1: the saved input and the gathered weight). The
 * weight itself arrives in float8 (float8 all-gather, scale precomputed for FSDP). */
static double float8_cast_bytes(const fb_op_cost *c, bool bwd) {
  double N = (double)c->m, OC = (double)c->n, C = (double)c->k;
  return bwd ? 5.0 * N * OC + 2.0 * N * C + 2.0 * OC * C : 5.0 * N * C;
}

/* A GEMM op on a profile with the shape model. matmul_bwd (kernels.c) records its products as
 * `batch` (1 or 2) of the forward's N x OC x C; they are the weight gradient (OC x C over N) and
 * the input gradient (N x C over OC), priced each as the library runs it. */
static double gpu_matmul_seconds(const fb_hardware *hw, const fb_op_cost *c) {
  const double N = (double)c->m, OC = (double)c->n, C = (double)c->k;
  const bool bwd = c->name && !strcmp(c->name, "matmul_bwd");
  const bool fp8 = hw->float8_linears && hw->peak_fp8 > 0 && hw->fp8_gemm_ratio > 0 &&
                   c->unit > 0 && c->name && !strncmp(c->name, "matmul_", 7);
  double t;
  if (!bwd) {
    t = gpu_gemm_seconds(hw, c->dtype, N, OC, C, (double)(c->batch > 0 ? c->batch : 1), fp8);
  } else {
    t = gpu_gemm_seconds(hw, c->dtype, OC, C, N, 1, fp8);
    if (c->batch >= 2) t += gpu_gemm_seconds(hw, c->dtype, N, C, OC, 1, fp8);
  }
  if (fp8) t += float8_cast_bytes(c, bwd) / (hw->mem_bw * hw->mem_eff);
  return t;
}

static double gemm_seconds(const fb_hardware *hw, const fb_op_cost *c, int world) {
  const rank_figures f = rank_figs(hw, world);
  if (c->kind == FB_OP_GEMM && hw->sm_count > 0) return gpu_matmul_seconds(hw, c);
  double eff;
  if (c->kind == FB_OP_ATTN && hw->flash_fwd_eff > 0)
    eff = flash_efficiency(hw, c);
  else {
    eff = curve_efficiency(f.gemm_max_eff, f.gemm_half_size, fb_op_gemm_size(c));
    if (c->kind == FB_OP_ATTN) eff *= f.attn_eff;
  }
  double t_compute = c->flops / (matmul_peak(hw, c->dtype) * f.share * eff * sustained(hw));
  double t_memory = c->bytes / (hw->mem_bw * hw->mem_eff * rank_share(hw, world));
  return hw->launch_s + fmax(t_compute, t_memory);
}

/* ---- eager PyTorch's kernel chains -------------------------------------------------------
 * This engine runs a norm, RoPE, SwiGLU and the loss as one fused kernel each, and its wrappers
 * count that kernel's bytes. Eager PyTorch runs the reference implementations as chains of
 * kernels, each reading and writing the whole tensor (bf16 activations, fp32 where the code
 * upcasts); the factor is the chain's bytes per element over the fused kernel's:
 *  - rmsnorm (framework eager-hf only): HF LlamaRMSNorm / fms-fsdp's LayerNormParameterized /
 *    torch < 2.8's nn.RMSNorm: to(fp32) 2+4, pow 4+4, mean 4, x*rsqrt 4+4, to(bf16) 4+2,
 *    *weight 2+2 = 36 bytes against 4: 9 (the backward replays the chain through autograd: 9
 *    as well); pytorch PR #153666 measured its fused kernel (aten._fused_rms_norm, nn.RMSNorm
 *    since torch 2.8) ~9x faster than that chain;
 *  - rope: HF apply_rotary_pos_emb: rotate_half's neg 2 and cat 4, q*cos 4, rot*sin 4, add 6 =
 *    20 against 4: 5;
 *  - swiglu: F.silu(a) * b: silu 4, mul 6 = 10 against 6: 1.67 (backward 18 against 10: 1.8);
 *  - softmax_xent: F.cross_entropy on bf16 logits upcast to fp32: float() 2+4, log_softmax 4+4,
 *    gather; backward: log_softmax's 4+4+4 and the cast back 4+2 = 32 against 6: 5.3;
 *  - layernorm, gelu and the residual add are single native kernels in eager PyTorch: 1.
 * `framework: fused` (hand-fused kernels, e.g. flash-attn's fused RMSNorm, rotary and cross
 * entropy) and `compile` (TorchInductor's generated kernels) run each chain as one kernel. */
typedef struct eager_chain {
  const char *name;
  double factor;
  bool hf_only; /* a chain only where the norm is written out (framework eager-hf) */
} eager_chain;

static const eager_chain eager_chains[] = {
    {"rmsnorm_fwd", 9.0, true}, {"rmsnorm_bwd", 9.0, true}, {"rope_fwd", 5.0, false},
    {"rope_bwd", 5.0, false},   {"swiglu_fwd", 1.67, false}, {"swiglu_bwd", 1.8, false},
    {"softmax_xent", 5.3, false},
};

static double eager_chain_factor(const char *name, bool hf) {
  for (size_t i = 0; name && i < sizeof eager_chains / sizeof eager_chains[0]; i++)
    if (!strcmp(eager_chains[i].name, name))
      return !eager_chains[i].hf_only || hf ? eager_chains[i].factor : 1.0;
  return 1.0;
}

/* The bytes a memory-bound op of this engine moves in the framework the profile prices, over
 * what its wrapper counts: eager PyTorch's chain (above) times `eager_mem_factor`, the rest of
 * an eager step's elementwise traffic (autocast's casts, layout copies, separate adds; fitted);
 * hand-fused kernels keep the latter; torch.compile fuses both away. Plain memsets and copies
 * are what they are. */
static double framework_factor(const fb_hardware *hw, const fb_op_cost *c) {
  bool raw = c->raw ||
             (c->name && (!strncmp(c->name, "memset", 6) || !strncmp(c->name, "copy_", 5)));
  if (c->kind != FB_OP_MEM || raw || !(hw->eager_mem_factor > 0)) return 1.0;
  switch (hw->framework) {
  case FB_FW_EAGER:
  case FB_FW_EAGER_HF:
    return eager_chain_factor(c->name, hw->framework == FB_FW_EAGER_HF) * hw->eager_mem_factor;
  case FB_FW_FUSED: return hw->eager_mem_factor;
  default: return 1.0;
  }
}

/* A kernel the profile measured (kernel_gbs, split_kernel_gbs) runs at its own rate; others on
 * the roofline. A kernel in kernel_us also takes that time a call (a calibrated GPU's small
 * kernels: a row per warp, a reduction's tail, that bytes alone do not carry). */
static double memory_seconds(const fb_hardware *hw, const fb_op_cost *c, int world) {
  const rank_figures rf = rank_figs(hw, world);
  const double bw = rank_kernel_bw(hw, &rf, c, world);
  return hw->launch_s + fb_hardware_kernel_fixed_s(hw, c->name) +
         framework_factor(hw, c) * c->bytes / bw;
}

/* Bandwidth factor and latency hop count of one ring stage over n ranks. */
typedef struct stage {
  double lat;   /* seconds */
  double bw_s;  /* seconds of bandwidth term */
} stage;

/* Ring stage over n ranks moving `bytes` of full buffer with per-rank send factor:
 * all-gather / reduce-scatter (n-1)/n, all-reduce 2(n-1)/n, broadcast / reduce 1 (pipelined). */
static stage ring_stage(fb_coll coll, double bytes, int n, double bw, double lat) {
  stage s = {0, 0};
  if (n <= 1) return s;
  double f, hops;
  switch (coll) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_ALL_TO_ALL: /* each rank sends (n-1)/n of its buffer, in n-1 exchanges */
  case FB_COLL_REDUCE_SCATTER: f = (double)(n - 1) / n; hops = n - 1; break;
  case FB_COLL_ALL_REDUCE: f = 2.0 * (n - 1) / n; hops = 2.0 * (n - 1); break;
  case FB_COLL_BARRIER: f = 0; hops = 2.0 * (n - 1); break;
  default: f = 1; hops = n - 1; break; /* broadcast, reduce: pipelined chain */
  }
  s.lat = hops * lat;
  s.bw_s = f * bytes / bw;
  return s;
}

/* Tree (NCCL's double binary tree): log2 hops up and down, each rank sends the buffer about
 * once per direction. NCCL offers it for all-reduce only (and we for barrier, an empty one). */
static stage tree_stage(fb_coll coll, double bytes, int n, double bw, double lat) {
  stage s = {0, 0};
  if (n <= 1) return s;
  double depth = ceil(log2((double)n));
  s.lat = 2.0 * depth * lat;
  s.bw_s = coll == FB_COLL_BARRIER ? 0 : 2.0 * bytes / bw;
  return s;
}

static double combine(stage intra, stage inter) {
  return intra.lat + inter.lat + fmax(intra.bw_s, inter.bw_s);
}

/* Bytes every rank together reads and writes in the local communicator's algorithm
 * (engine/comm/comm_local.c) for a payload S over W ranks: all-gather copies all W shards
 * into each rank's buffer (2S per rank); reduce-scatter and reduce sum a 1/W chunk of W
 * buffers (S read + S/W written per rank); all-reduce reduces a chunk, then copies the W-1
 * others' chunks (S + S/W + 2(W-1)S/W per rank); broadcast copies S into every non-root. */
double fb_cost_shared_memory_bytes(fb_coll coll, double bytes, int world) {
  double S = bytes, W = world;
  switch (coll) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_ALL_TO_ALL: return 2.0 * S * W;
  case FB_COLL_REDUCE_SCATTER:
  case FB_COLL_REDUCE: return S * (W + 1.0);
  case FB_COLL_ALL_REDUCE: return S * (3.0 * W - 1.0);
  case FB_COLL_BROADCAST: return 2.0 * S * (W - 1.0);
  default: return 0; /* barrier */
  }
}

/* Group barriers the local communicator meets per collective: one to publish the buffers and
 * one to finish; all-reduce one more between its reduce and copy phases. */
double fb_cost_shared_memory_barriers(fb_coll coll) {
  switch (coll) {
  case FB_COLL_BARRIER: return 1;
  case FB_COLL_ALL_REDUCE: return 3;
  default: return 2;
  }
}

/* A collective over 1 rank: a copy of the buffer (read + write) unless nothing moves (an
 * in-place call: fb_cost_seconds). */
static double single_rank_seconds(const fb_hardware *hw, fb_coll coll, double bytes) {
  if (coll == FB_COLL_BROADCAST || coll == FB_COLL_BARRIER || !(bytes > 0)) return 0;
  double bw = fb_hardware_kernel_bw(hw, "copy_d2d");
  if (!(bw > 0)) bw = hw->mem_bw * hw->mem_eff;
  return hw->launch_s + 2.0 * bytes / bw;
}

double fb_cost_collective(const fb_hardware *hw, fb_coll coll, double bytes, int world) {
  if (bytes < 0) bytes = 0;
  if (hw->collectives == FB_COLLS_NCCL) {
    if (world <= 1) return single_rank_seconds(hw, coll, bytes);
    /* a barrier is a one-element all-reduce (what torch.distributed does over NCCL) */
    if (coll == FB_COLL_BARRIER) coll = FB_COLL_ALL_REDUCE, bytes = 4;
    return hw->launch_s + hw->coll_overhead_s + fb_nccl_predict(hw, coll, bytes, world).seconds;
  }
  if (hw->collectives == FB_COLLS_SHARED_MEMORY) { /* the kind's in-step rate, else intra_bw */
    const double own = fb_hardware_coll_bw(hw, fb_coll_name(coll));
    return hw->launch_s + (world > 1 ? fb_cost_shared_memory_barriers(coll) : 1) * hw->intra_lat +
           fb_cost_shared_memory_bytes(coll, bytes, world > 1 ? world : 1) /
               (own > 0 ? own : hw->intra_bw * hw->coll_eff);
  }
  if (world <= 1) return single_rank_seconds(hw, coll, bytes);
  int g = hw->devices_per_node < world ? hw->devices_per_node : world; /* ranks per node */
  int nodes = (world + g - 1) / g;
  /* on a shared host every rank's ring runs at once through the one memory system: the
   * profile's bandwidth is the machine's, each rank gets 1/W of it */
  double share = rank_share(hw, world);
  double intra_bw = hw->intra_bw * hw->coll_eff * share;
  double inter_bw = hw->inter_bw * hw->coll_eff * share;
  double t_ring, t_tree = INFINITY;
  if (nodes == 1) {
    t_ring = combine(ring_stage(coll, bytes, g, intra_bw, hw->intra_lat), (stage){0, 0});
    if (coll == FB_COLL_ALL_REDUCE || coll == FB_COLL_BARRIER)
      t_tree = combine(tree_stage(coll, bytes, g, intra_bw, hw->intra_lat), (stage){0, 0});
  } else {
    /* Network stage: g parallel rings (one per NIC / rail), each carrying 1/g of the buffer
     * across the nodes. Intra-node stage: the full buffer over NVLink among g ranks. */
    stage inter = ring_stage(coll, bytes / g, nodes, inter_bw, hw->inter_lat);
    stage intra = ring_stage(coll, bytes, g, intra_bw, hw->intra_lat);
    t_ring = combine(intra, inter);
    if (coll == FB_COLL_ALL_REDUCE || coll == FB_COLL_BARRIER) {
      stage ti = tree_stage(coll, bytes / g, nodes, inter_bw, hw->inter_lat);
      stage ta = tree_stage(coll, bytes, g, intra_bw, hw->intra_lat);
      t_tree = combine(ta, ti);
    }
  }
  return hw->launch_s + fmin(t_ring, t_tree);
}

/* Payload of a collective from its element count (see fb_op_cost: per-rank for AG / RS). */
static double coll_payload(const fb_op_cost *c, int world) {
  double elt = (double)fb_dtype_size(c->dtype);
  switch (c->coll) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_ALL_TO_ALL:
  case FB_COLL_REDUCE_SCATTER: return (double)c->count * world * elt;
  case FB_COLL_BARRIER: return 0;
  default: return (double)c->count * elt;
  }
}

/* The profile as a group whose members are `stride` ranks apart sees it (a mesh's replica
 * group; ranks fill nodes in order): devices_per_node / stride members in a node (1 once
 * stride >= a node), each with its own NIC (one per GPU), the node's other GPUs busy with
 * their own groups: the network graph keeps the members' share of the node's channels. Every
 * collective formula takes the node split from devices_per_node, so nothing else changes. */
static void placed(const fb_hardware *hw, int stride, fb_hardware *h) {
  *h = *hw;
  const int g = stride >= hw->devices_per_node ? 1 : hw->devices_per_node / stride;
  h->devices_per_node = g;
  h->nccl_ch_net = hw->nccl_ch_net * g / hw->devices_per_node;
  if (h->nccl_ch_net < 1) h->nccl_ch_net = 1;
  if (hw->nics_per_node > 0) { /* the members' share of the node's NICs, a fraction of one
                                * where the node has fewer NICs than groups (InternLM's 4
                                * adapters under 8 replica groups: half an adapter each) */
    const double share = (double)hw->nics_per_node * g / hw->devices_per_node;
    h->nics_per_node = share >= 1 ? (int)share : 1;
    if (share < 1) h->nic_bw = hw->nic_bw * share;
  }
}

/* The fused MLP ops (kernels.c: matmul_gelu_fwd, matmul_bwd_gelu: a GEMM whose epilogue applies
 * GELU) are priced as what the frameworks these profiles describe run, two kernels: eager
 * PyTorch and TorchInductor call cuBLAS without the GELU epilogue (torch.compile's default GEMMs
 * are cuBLAS; only max-autotune's Triton templates fuse), and the cpu runs matmul then gelu.
 * So the product as matmul_fwd / matmul_bwd records it, plus gelu_fwd / gelu_bwd's memory-bound
 * pass as their wrappers record it: a step with the fused op is predicted as the unfused one
 * was. This engine's own cuda epilogue is faster than that by the GELU pass: a profile that
 * `calibrate --backend cuda` wrote says so (gemm_epilogue_gelu) and prices the one kernel;
 * the shipped profiles describe no framework that fuses it (see docs/simulator.md). */
static bool fused_gelu(const fb_op_cost *c) {
  return c->name && (!strcmp(c->name, "matmul_gelu_fwd") || !strcmp(c->name, "matmul_bwd_gelu"));
}

bool fb_cost_fused_gelu_parts(const fb_op_cost *c, fb_op_cost *gemm, fb_op_cost *pass) {
  if (!fused_gelu(c)) return false;
  const bool bwd = !strcmp(c->name, "matmul_bwd_gelu");
  const double e = (double)fb_dtype_size(c->dtype);
  const double n = (double)c->m * (double)(bwd ? c->k : c->n); /* the GELU'd activation */
  *gemm = *c;
  gemm->name = bwd ? "matmul_bwd" : "matmul_fwd";
  gemm->flops -= (bwd ? 16.0 : 10.0) * n;
  gemm->bytes -= n * e; /* the epilogue's auxiliary pre-activation */
  *pass = (fb_op_cost){.name = bwd ? "gelu_bwd" : "gelu_fwd", .kind = FB_OP_MEM,
                       .dtype = c->dtype, .bytes = (bwd ? 3.0 : 2.0) * n * e,
                       .flops = (bwd ? 16.0 : 10.0) * n, .batch = 1, .unit = c->unit,
                       .param = c->param};
  return true;
}

static double fused_gelu_seconds(const fb_hardware *hw, const fb_op_cost *c, int world) {
  fb_op_cost g, m;
  (void)fb_cost_fused_gelu_parts(c, &g, &m);
  /* a profile of GEMMs that apply GELU in their epilogue (calibrated on this program's cuda
   * kernels): one kernel whose epilogue also stores (backward: loads) the pre-activation,
   * after the math, not under it: gpt2's 8192 x 3072 x 768 took 84 us fused on an H100,
   * 66 us plain, the difference that store at the copy rate (docs/benchmarks.md) */
  if (hw->gemm_epilogue_gelu)
    return gemm_seconds(hw, &g, world) +
           (c->bytes - g.bytes) / (hw->mem_bw * hw->mem_eff * rank_share(hw, world));
  return gemm_seconds(hw, &g, world) + memory_seconds(hw, &m, world);
}

double fb_cost_seconds(const fb_hardware *hw, const fb_op_cost *c, int world) {
  switch (c->kind) {
  case FB_OP_GEMM:
    if (fused_gelu(c)) return fused_gelu_seconds(hw, c, world);
    return gemm_seconds(hw, c, world);
  case FB_OP_ATTN: return gemm_seconds(hw, c, world);
  case FB_OP_MEM:
  case FB_OP_OPTIM: return memory_seconds(hw, c, world);
  case FB_OP_COLL: {
    int w = c->world > 0 ? c->world : world;
    w = w < 1 ? 1 : w;
    /* over one rank in place nothing moves: the call alone (NCCL: 6 us a call on an H100,
     * a 486 MB all-reduce included, marks and launch counted; docs/benchmarks.md). The
     * shared-memory communicator's own single-rank cost stays its formula's. */
    if (w == 1 && c->in_place && hw->collectives != FB_COLLS_SHARED_MEMORY) return hw->launch_s;
    double payload = coll_payload(c, w);
    /* float8 all-gather: the block linears' weights travel in one byte (their share of a
     * block's parameters is all but the norms') */
    if (hw->float8_linears && c->coll == FB_COLL_ALL_GATHER && fb_dtype_size(c->dtype) == 2)
      payload *= 0.5;
    if (c->stride > 1 && hw->devices_per_node > 1) {
      fb_hardware h;
      placed(hw, c->stride, &h);
      return fb_cost_collective(&h, c->coll, payload, w);
    }
    return fb_cost_collective(hw, c->coll, payload, w);
  }
  default: return 0;
  }
}
