/* Hardware profile: the figures the cost model needs about one device, its node and the
 * network (peak rates, achieved efficiencies, bandwidths, latencies, capacity), loaded from
 * models/hardware/NAME.yaml and written back by `fsdpbench calibrate`.
 * All fields are in SI units (FLOP/s, bytes/s, seconds, bytes); the YAML uses the friendlier
 * units named in its keys (TFLOP/s, GB/s, us, GiB). This file does not compute costs: see
 * cost_model.h. */
#ifndef FB_HARDWARE_H
#define FB_HARDWARE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/status.h"
#include "../core/types.h"

/* Optional per-kernel rates: a kernel whose fb_op_cost.name is listed costs
 * launch + bytes / gbs (bytes as its wrapper counts them) instead of the bandwidth roofline.
 * On a CPU several "memory-bound" kernels are compute-bound (exp/tanh, division, integer
 * binning); `calibrate` measures each. */
#define FB_HW_MAX_KERNELS 64
typedef struct fb_hw_kernel {
  char name[32];  /* the op name the kernel wrapper records ("gelu_fwd", "adamw", ...) */
  double bw;      /* achieved bytes/s of the wrapper's byte count, on one whole device; in the
                     kernel_us table: seconds a call takes beyond launch_us and its bytes */
} fb_hw_kernel;

/* How collectives move data (the `collectives` key). */
typedef enum fb_collectives {
  FB_COLLS_RING_TREE,     /* NCCL / MPI style: ring (and tree for all-reduce), hierarchical
                             across nodes; on a shared host the ranks share its bandwidth */
  FB_COLLS_SHARED_MEMORY, /* the local communicator: every rank reads the others' buffers */
  FB_COLLS_NCCL,          /* NCCL's own tuning model: ring / tree / NVLS x LL / LL128 / Simple,
                             the cheapest predicted (engine/sim/nccl_model.c) */
  FB_NCOLLS
} fb_collectives;

/* The attention kernel a run uses (the `attention_kernel` key). */
typedef enum fb_attention_kernel {
  FB_ATTN_FLASH2 = 0, /* FlashAttention-2 (SDPA's flash backend in torch <= 2.10, torchtitan) */
  FB_ATTN_FLASH1,     /* FlashAttention-1 */
  FB_ATTN_TRITON,     /* llm-foundry's Triton FlashAttention */
  FB_ATTN_CUDNN,      /* cuDNN's fused flash SDPA (torch 2.11's choice on an H100) */
} fb_attention_kernel;

/* The framework whose step a GPU profile prices (the `framework` key). */
typedef enum fb_framework {
  FB_FW_EAGER = 0, /* eager PyTorch (torch >= 2.8: nn.RMSNorm one fused kernel; RoPE, SwiGLU
                      and the loss as the reference code's chains of kernels) */
  FB_FW_EAGER_HF,  /* eager, with RMSNorm written out in Python too (HF's LlamaRMSNorm,
                      fms-fsdp's norm, torch < 2.8's nn.RMSNorm): its chain as well */
  FB_FW_FUSED,     /* eager, with hand-fused norm / rotary / SwiGLU / loss kernels */
  FB_FW_COMPILE,   /* torch.compile (TorchInductor): fused elementwise and norm kernels */
} fb_framework;

/* GPU generation, for NCCL's per-architecture tuning constants. */
typedef enum fb_gpu_arch { FB_ARCH_NONE = 0, FB_ARCH_AMPERE, FB_ARCH_HOPPER } fb_gpu_arch;

typedef struct fb_hardware {
  char name[64];
  double peak_fp32;         /* FLOP/s, dense fp32 (no TF32) */
  double peak_bf16;         /* FLOP/s, dense bf16 tensor-core rate */
  double gemm_max_eff;      /* fraction of peak a large GEMM achieves, (0, 1] */
  double gemm_half_size;    /* cube root of m*n*k*batch at which a GEMM reaches half of max */
  double attn_eff;          /* attention kernels' efficiency relative to a GEMM, (0, 1] */
  double mem_bw;            /* bytes/s, device memory */
  double mem_eff;           /* achieved fraction of mem_bw for streaming kernels, (0, 1] */
  double launch_s;          /* per-kernel launch overhead */
  int64_t mem_capacity;     /* bytes per device */
  int devices_per_node;
  double intra_bw;          /* bytes/s per device per direction inside a node (NVLink) */
  double intra_lat;         /* seconds per hop inside a node */
  double inter_bw;          /* bytes/s per device per direction between nodes (its NIC) */
  double inter_lat;         /* seconds per hop between nodes */
  double coll_eff;          /* achieved fraction of link bandwidth in collectives, (0, 1] */
  double overlap_slowdown;  /* compute runs this many times slower while comm overlaps, >= 1 */
  bool host_runs_ahead;     /* GPU: the host enqueues ahead of the device. CPU executor: the
                               host thread is the compute stream (ops start no earlier) */
  bool shared_host;         /* all ranks of a run share this one machine (cpu executor): per-rank
                               compute and memory rates are divided by the world size */
  int collectives;          /* fb_collectives */
  /* ---- GPU mechanisms (optional keys: 0 / false leaves the simple model above) ---- */
  int sm_count;             /* streaming multiprocessors: GEMM tile and wave quantization */
  int gemm_tile_m, gemm_tile_n; /* output tile of the library's large GEMM kernels */
  double gemm_k_half;       /* GEMM depth at which the main loop reaches half its rate */
  double gemm_stream_k;     /* > 0: the library deals k iterations to SMs (stream-K), this factor
                               for the fix-up; 0: it splits k in pieces (split-K) */
  int gemm_small_grid;      /* fewer large tiles than this: one large-tile wave, no split */
  double gemm_launch_s;     /* fixed time of one GEMM call (0 = launch_s) */
  double gemm_align4;       /* rate of a GEMM whose rows are 4- or 8-byte aligned (0 = 0.69) */
  double gemm_align2;       /* ... 2-byte aligned (0 = 0.18) */
  double peak_fp8;          /* FLOP/s, dense FP8 tensor-core rate */
  double fp8_gemm_ratio;    /* an FP8 GEMM's fraction of the FP8 peak / a bf16 GEMM's of its peak */
  bool float8_linears;      /* the run's block linears are torchao float8 (tensorwise scaling,
                               float8 all-gather of their weights) */
  int framework;            /* fb_framework: which PyTorch step the profile prices */
  double peak_tf32;         /* FLOP/s, dense TF32 tensor-core rate */
  bool tf32;                /* fp32 matmuls run on TF32 tensor cores */
  double flash_fwd_eff;     /* FlashAttention-2 forward, fraction of peak (hd 128, long keys) */
  double flash_bwd_eff;     /* FlashAttention-2 backward, the same */
  double flash_half_seq;    /* keys per query (causal: T/2) at half the long-sequence rate */
  int attention_kernel;     /* fb_attention_kernel */
  double cudnn_ratio;       /* cuDNN's fused SDPA rate / FlashAttention-2's, long sequences */
  double cudnn_half_seq;    /* its own half-rate key count */
  double triton_ratio;      /* the Triton kernel's rate / FlashAttention-2's */
  double eager_mem_factor;  /* memory-bound kernels move this many times a fused kernel's bytes */
  bool gemm_epilogue_gelu;  /* GELU and its gradient run in the GEMM's epilogue (this program's
                               cuda GEMMs): the fused MLP ops cost their GEMM with its bytes */
  double flash1_ratio;      /* FlashAttention-1 rate / FlashAttention-2 rate, long sequences */
  double flash1_half_seq;   /* its own half-rate key count */
  double sustained;         /* tensor-core rate in a long training step / in a microbenchmark */
  bool nccl_contention;     /* compute beside a collective runs on the SMs and HBM bandwidth NCCL's
                               kernel leaves (engine/sim/contention.c) instead of overlap_slowdown */
  double rank_speed_sigma;  /* spread (sigma, fraction) of identical GPUs' speeds: a step of N ranks
                               runs at the slowest's (0 = lock-step) */
  double rank_jitter;       /* spread (sigma, fraction) of one rank's compute between two points
                               where the ranks meet, drawn afresh each interval (a shared CPU's
                               scheduling): a collective waits for the latest (0 = none) */
  double nccl_net_doubling; /* NCCL bus bandwidth across nodes per doubling of the node count beyond
                               2 (0 = 1: flat) */
  double host_op_s;         /* host time to dispatch one op (framework + launch call) */
  int gpu_arch;             /* fb_gpu_arch: NCCL's tuning constants */
  int cpu_vendor;           /* 0 intel, 1 amd: NCCL's LL bandwidth cap and net overhead */
  int nccl_ch_node;         /* NCCL ring graph in one node: channels ... */
  double nccl_bw_node;      /* ... x bytes/s per channel */
  int nccl_ch_net;          /* the graph across nodes (one NIC per channel pair): channels ... */
  double nccl_bw_net;       /* ... x bytes/s per channel */
  double nvls_busbw;        /* NVLink SHARP all-reduce bus bandwidth in one node (0 = none) */
  double coll_overhead_s;   /* per collective call: launch and framework work NCCL's model omits */
  int nics_per_node;        /* network adapters per node (0 = not stated: the profile's
                               inter_bw / nccl_*_net figures stand for the network) */
  double nic_bw;            /* bytes/s per NIC per direction (YAML `nic_gbps`, Gb/s; 0 = not
                               stated) */
  int nkernels;             /* optional per-kernel table, see fb_hw_kernel */
  fb_hw_kernel kernels[FB_HW_MAX_KERNELS];
  int nkernel_fixed;        /* optional kernel_us table: a kernel's time per call beyond
                               launch_us and bytes / its rate (seconds in .bw) */
  fb_hw_kernel kernel_fixed[FB_HW_MAX_KERNELS];
  /* ---- a shared host split into 1-thread ranks (cpu executor; optional, 0 = none) ----
   * calibrate runs split_ranks 1-thread ranks at once (its --threads) and fits each rank's own
   * rates: a core of its own rather than a share of the whole machine's thread team (on some
   * CPUs two 1-thread ranks outrun one 2-thread rank). The cost model uses them for a world of
   * at least split_ranks ranks (cost_model.c, rank figures). */
  int split_ranks;          /* 1-thread ranks measured at once (0 = no split figures) */
  double split_gemm_max_eff;   /* one such rank's GEMM curve, on peak_fp32 ... */
  double split_gemm_half_size; /* ... */
  double split_attn_eff;    /* its attention kernels against its own curve */
  int nsplit_kernels;       /* its memory-bound kernels' rates (split_kernel_gbs) */
  fb_hw_kernel split_kernels[FB_HW_MAX_KERNELS];
  /* ---- the local communicator's collectives as a step runs them (optional; collectives:
   * shared_memory only) ----
   * GB/s of the shared-memory algorithm's bytes (cost_model.c) per collective kind, measured
   * in step by calibrate on a CPU device (calibrate_steps.c): on a shared host a rank's comm
   * thread takes turns on the cores with the compute threads wherever the step overlaps them,
   * and the kinds overlap differently (fsdp's prefetched gathers run beside matrix products, its
   * reduce-scatters mostly where the host waits). A kind not listed runs at intra_bw. */
  int ncoll_rates;          /* entries of coll_gbs */
  fb_hw_kernel coll_rates[FB_HW_MAX_KERNELS];
  /* caching-allocator model (engine/sim/caching_allocator.h); 0 = the documented estimate */
  double cuda_malloc_s;     /* host time of one cudaMalloc of a new segment */
  double cuda_free_s;       /* host time of one cudaFree (after the device-wide sync) */
} fb_hardware;

/* Loads a profile by name (models/hardware/NAME.yaml) or path. Every flat key is required
 * except the optional kernel table (kernel_gbs);
 * unknown keys, missing keys and out-of-range values fail with FB_EUSAGE naming the file, the
 * key, the value and the allowed range. */
fb_status fb_hardware_load(const char *name_or_path, fb_hardware *out);
/* Checks every field's range (what load applies after parsing). */
fb_status fb_hardware_validate(const fb_hardware *hw, const char *where);
/* Writes a profile that fb_hardware_load reads back to the same values; `comment` (may be
 * NULL, may hold several lines) goes at the top as # lines. */
fb_status fb_hardware_write(const char *path, const fb_hardware *hw, const char *comment);
/* The same into an open stream (`path` names it in errors). */
fb_status fb_hardware_write_to(FILE *f, const char *path, const fb_hardware *hw,
                               const char *comment);

/* The per-kernel rate (bytes/s) for an op name, or 0 when the profile has none. */
double fb_hardware_kernel_bw(const fb_hardware *hw, const char *name);
/* The same from the split table (split_kernel_gbs), or 0. */
double fb_hardware_split_kernel_bw(const fb_hardware *hw, const char *name);
/* The in-step rate (bytes/s) of a collective kind by its name (coll_gbs), or 0. */
double fb_hardware_coll_bw(const fb_hardware *hw, const char *name);
/* The kernel_us table's seconds per call for `name` (0 where it has none). */
double fb_hardware_kernel_fixed_s(const fb_hardware *hw, const char *name);

/* A run's own network (--nics-per-node, --nic-gbps) over the profile's: a value > 0 replaces
 * the profile's key, 0 keeps it. Range-checked as the profile keys are (FB_EUSAGE naming the
 * flag). */
fb_status fb_hardware_set_network(fb_hardware *hw, int nics_per_node, double nic_gbps);

/* Peak FLOP/s for a compute dtype (bf16 -> bf16 rate, anything else -> fp32 rate). */
double fb_hardware_peak(const fb_hardware *hw, fb_dtype t);

#endif
