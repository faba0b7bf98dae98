/* `validate --dataset` on operator files (see validate_rows.h): GEMM, attention and collective
 * rows priced op by op by the cost model of the row's profile, and the helpers every reader
 * shares (columns, numbers, the GPU name -> profile table). It runs no training step
 * (validate_train.c does) and prints nothing (validate_dataset.c does). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../engine/device/kernels.h"
#include "../engine/sim/cost_model.h"
#include "../engine/sim/gpu_profile.h"
#include "gpu_name.h"
#include "validate_rows.h"

bool ds_has(const char *s, const char *sub) {
  size_t n = strlen(sub);
  for (; *s; s++)
    if (!strncasecmp(s, sub, n)) return true;
  return false;
}

double ds_num(const char *s) {
  char *e;
  if (!s || !*s) return NAN;
  double v = strtod(s, &e);
  return *e ? NAN : v;
}

const char *ds_col(const ds_ctx *x, int r, const char *name) {
  return fb_csv_get(x->t, r, fb_csv_col(x->t, name));
}

/* The reason around `arg` always fits: an argument too long for the line (a source's own
 * text) is clipped, " ..." marking where. */
void ds_skip(ds_result *o, const char *fmt, const char *arg) {
  const int room = (int)sizeof o->skip - 1 - snprintf(NULL, 0, fmt, "");
  char clip[sizeof o->skip];
  if (room > 4 && strlen(arg) > (size_t)room) {
    snprintf(clip, sizeof clip, "%.*s ...", room - 4, arg);
    arg = clip;
  }
  if (snprintf(o->skip, sizeof o->skip, fmt, arg) < 0) o->skip[0] = 0;
}

void ds_append(char *buf, size_t n, const char *what) {
  size_t len = strlen(buf);
  assert(n > 4 && len < n);
  int w = snprintf(buf + len, n - len, "%s%s", len ? "; " : "", what);
  if (w >= 0 && (size_t)w < n - len) return;
  memcpy(buf + n - 4, "...", 4);
}

fb_status ds_write_profile(const ds_ctx *x, const char *name, const char *base,
                           const char *lines, char *path, size_t npath) {
  snprintf(path, npath, "%s/%s.yaml", x->tmpdir, name);
  FILE *fp = fopen(path, "w");
  if (!fp || fprintf(fp, "extends: %s\nname: %s-%s\n%s", base, base, name, lines) < 0 ||
      fclose(fp))
    return FB_ERR(FB_EIO, "validate: cannot write %s", path);
  return FB_OK;
}

const char *ds_row_profile(const ds_ctx *x, const char *gpu, int mem_gb, char *why, size_t n) {
  return x->hardware ? x->hardware : fb_gpu_profile_for(gpu, mem_gb, why, n);
}

static fb_status load_profile(const char *prof, ds_result *o, fb_hardware *hw) {
  snprintf(o->gpu, sizeof o->gpu, "%.*s", (int)sizeof o->gpu - 1, prof);
  return fb_hardware_load(prof, hw);
}

/* ---- GEMM rows ------------------------------------------------------------------------------
 * The library is the row's: XLA's table measured XLA's own GEMMs (split-K, kernel time alone),
 * priced by the GPU's `-xla` profile; every other row is PyTorch's cuBLAS, the GPU's profile. */
static fb_status gemm_profile(const ds_ctx *x, int r, ds_result *o, fb_hardware *hw) {
  char why[160];
  const char *prof = ds_row_profile(x, ds_col(x, r, "gpu"), 0, why, sizeof why);
  if (!prof) return ds_skip(o, "%s", why), FB_EUNSUPPORTED;
  if (x->hardware || !ds_has(ds_col(x, r, "software"), "XLA")) return load_profile(prof, o, hw);
  char lib[32];
  snprintf(lib, sizeof lib, "%s-xla", prof);
  if (load_profile(lib, o, hw) == FB_OK) return FB_OK;
  return ds_skip(o, "XLA's GEMM library has no profile for %s (models/hardware/GPU-xla.yaml)",
                 prof), FB_EUNSUPPORTED;
}

fb_status ds_gemm_row(ds_ctx *x, int r, ds_result *o) {
  const char *dt = ds_col(x, r, "dtype");
  double m = ds_num(ds_col(x, r, "m")), n = ds_num(ds_col(x, r, "n")),
         k = ds_num(ds_col(x, r, "k")), b = ds_num(ds_col(x, r, "batch"));
  if (isnan(b)) b = 1;
  o->published = ds_num(ds_col(x, r, "tflops"));
  snprintf(o->what, sizeof o->what, "%-10.10s %-6.6s %5.0f x %6.0f x %6.0f x %-2.0f %s",
           ds_col(x, r, "gpu"), dt, m, n, k, b, ds_col(x, r, "shape_kind"));
  if (!(m > 0 && n > 0 && k > 0 && o->published > 0))
    return ds_skip(o, "%s", "shape or throughput missing"), FB_OK;
  fb_hardware hw;
  fb_status st = gemm_profile(x, r, o, &hw);
  if (st != FB_OK) return st == FB_EUNSUPPORTED ? FB_OK : st;
  const bool fp8 = strstr(dt, "fp8") != NULL;
  if (fp8 && !(hw.peak_fp8 > 0 && hw.fp8_gemm_ratio > 0 && hw.sm_count > 0))
    return ds_skip(o, "%s: the profile has no FP8 GEMM figures", dt), FB_OK;
  fb_dtype t = FB_BF16;
  if (!strncmp(dt, "f32", 3)) {
    t = FB_F32;
    hw.tf32 = true; /* XLA's default-precision f32 dot runs on TF32 tensor cores */
  }
  hw.sustained = 0; /* a microbenchmark: no sustained-load factor */
  double secs = fb_cost_gemm_seconds(&hw, t, m, n, k, b, fp8);
  o->predicted = 2.0 * m * n * k * b / secs * 1e-12;
  return FB_OK;
}

/* ---- attention rows ------------------------------------------------------------------------ */

typedef struct attn_rule {
  const char *impl;      /* the row's impl column, exactly */
  int kernel;            /* fb_attention_kernel; -1: the profile's own (what a step is priced at) */
} attn_rule;

/* "torch SDPA": torch picks the backend; on the lent H100 (torch 2.11, h100-measured.md) it ran
 * cuDNN 9.19's fused flash SDPA for every shape checked, so those rows are cuDNN's curve.
 * "cuDNN": the FlashAttention-3 README's cuDNN bars. "fsdpbench": this program's own kernels
 * (`calibrate --backend cuda --attention-rows`), scored against what a simulated step charges. */
static const attn_rule attn_rules[] = {
    {"FlashAttention-2", FB_ATTN_FLASH2}, {"FlashAttention-1", FB_ATTN_FLASH1},
    {"torch SDPA", FB_ATTN_CUDNN},         {"cuDNN", FB_ATTN_CUDNN},
    {"fsdpbench", -1},
};

fb_status ds_attention_row(ds_ctx *x, int r, ds_result *o) {
  const char *impl = ds_col(x, r, "impl"), *pass = ds_col(x, r, "pass");
  double T = ds_num(ds_col(x, r, "seq_len")), hd = ds_num(ds_col(x, r, "head_dim")),
         B = ds_num(ds_col(x, r, "batch")), H = ds_num(ds_col(x, r, "heads"));
  bool causal = !strcasecmp(ds_col(x, r, "causal"), "true");
  o->published = ds_num(ds_col(x, r, "tflops"));
  snprintf(o->what, sizeof o->what, "%-14.14s %-17.17s %-7s %-6s seq %-5.0f hd %-3.0f",
           ds_col(x, r, "gpu"), impl, pass, causal ? "causal" : "full", T, hd);
  const attn_rule *rule = NULL;
  for (size_t i = 0; i < sizeof attn_rules / sizeof attn_rules[0] && !rule; i++)
    if (!strcmp(impl, attn_rules[i].impl)) rule = &attn_rules[i];
  if (!rule)
    return ds_skip(o, "%s: not modelled (FlashAttention-2 and -1, cuDNN / torch SDPA are)", impl),
           FB_OK;
  if (!(o->published > 0)) return ds_skip(o, "%s", "no figure (the source printed OOM)"), FB_OK;
  const bool bwd = !strcmp(pass, "fwd+bwd");
  if (!bwd && strcmp(pass, "fwd")) return ds_skip(o, "pass '%s' not modelled", pass), FB_OK;
  char why[160];
  const char *prof = ds_row_profile(x, ds_col(x, r, "gpu"), 0, why, sizeof why);
  if (!prof) return ds_skip(o, "%s", why), FB_OK;
  fb_hardware hw;
  FB_TRY(load_profile(prof, o, &hw));
  if (rule->kernel >= 0) hw.attention_kernel = rule->kernel;
  if (hw.attention_kernel == FB_ATTN_CUDNN && !(hw.cudnn_ratio > 0))
    return ds_skip(o, "%s: the profile has no cuDNN SDPA curve", impl), FB_OK;
  hw.sustained = 0; /* a microbenchmark: no sustained-load factor */
  fb_op_cost f = fb_op_attention_cost("attention_fwd", FB_BF16, (int)B, (int)T, (int)H, (int)H,
                                      (int)hd, 2, causal);
  fb_op_cost g = fb_op_attention_cost("attention_bwd", FB_BF16, (int)B, (int)T, (int)H, (int)H,
                                      (int)hd, 5, causal);
  double secs = fb_cost_seconds(&hw, &f, 1) + (bwd ? fb_cost_seconds(&hw, &g, 1) : 0);
  /* the benchmark's FLOP convention: fwd 4*b*s^2*h*d (halved when causal), fwd+bwd 3.5x */
  double flops = 4.0 * B * T * T * H * hd * (causal ? 0.5 : 1.0) * (bwd ? 3.5 : 1.0);
  o->predicted = flops / secs * 1e-12;
  return FB_OK;
}

/* ---- collective rows ----------------------------------------------------------------------- */

fb_status ds_collective_row(ds_ctx *x, int r, ds_result *o) {
  const char *coll = ds_col(x, r, "collective");
  double n = ds_num(ds_col(x, r, "n_gpus")), nodes = ds_num(ds_col(x, r, "n_nodes")),
         bytes = ds_num(ds_col(x, r, "bytes"));
  o->published = ds_num(ds_col(x, r, "busbw_gbs"));
  snprintf(o->what, sizeof o->what, "%-16.16s %-10.10s %3.0f GPUs %2.0f nodes %12.0f B",
           ds_col(x, r, "gpu"), coll, n, nodes, bytes);
  if (strcmp(coll, "all_reduce")) return ds_skip(o, "collective '%s' not compared", coll), FB_OK;
  if (!(n >= 2 && nodes >= 1 && bytes > 0 && o->published > 0))
    return ds_skip(o, "%s", "an anchor without message size, rank count or single busbw"), FB_OK;
  char why[160];
  const char *prof = ds_row_profile(x, ds_col(x, r, "gpu"), 0, why, sizeof why);
  if (!prof) return ds_skip(o, "%s", why), FB_OK;
  fb_hardware hw;
  FB_TRY(load_profile(prof, o, &hw));
  hw.devices_per_node = (int)(n / nodes);
  double secs = fb_cost_collective(&hw, FB_COLL_ALL_REDUCE, bytes, (int)n);
  o->predicted = bytes / secs * 2.0 * (n - 1) / n * 1e-9;
  return FB_OK;
}
