/* Names of element types and memory categories. */
#include "types.h"

#include <string.h>

const char *fb_dtype_name(fb_dtype t) {
  static const char *n[FB_NDTYPE] = {[FB_F32] = "fp32", [FB_BF16] = "bf16", [FB_F64] = "fp64",
                                     [FB_U64] = "u64", [FB_I32] = "i32", [FB_I8] = "i8"};
  if (t == FB_DTYPE_AUTO) return "auto";
  return (t >= 0 && t < FB_NDTYPE) ? n[t] : "?";
}

int fb_dtype_parse(const char *s, fb_dtype *out) {
  if (!strcmp(s, "fp32") || !strcmp(s, "f32") || !strcmp(s, "float32")) { *out = FB_F32; return 0; }
  if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) { *out = FB_BF16; return 0; }
  return -1;
}

const char *fb_mem_cat_name(fb_mem_cat c) {
  static const char *n[FB_MEM_NCAT] = {
      [FB_MEM_PARAM_SHARD] = "param_shard", [FB_MEM_PARAM_FULL] = "param_full",
      [FB_MEM_GRAD_SHARD] = "grad_shard",   [FB_MEM_GRAD_FULL] = "grad_full",
      [FB_MEM_OPTIM] = "optim",             [FB_MEM_ACT] = "act",
      [FB_MEM_COMM] = "comm",               [FB_MEM_TEMP] = "temp",
      [FB_MEM_PARAM_SECONDARY] = "param_secondary"};
  return (c >= 0 && c < FB_MEM_NCAT) ? n[c] : "?";
}
