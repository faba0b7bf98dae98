/* Small shared vocabulary: element types and memory categories.
 * Nothing here allocates; see engine/device/device.h for the allocator. */
#ifndef FB_TYPES_H
#define FB_TYPES_H
#include <stddef.h>
#include <stdint.h>

/* FB_I8: bytes of block-quantised values (zeropp's int8 weights, two int4 gradients a byte):
 * moved by all-gather, broadcast and all-to-all, never summed. */
typedef enum fb_dtype { FB_F32 = 0, FB_BF16, FB_F64, FB_U64, FB_I32, FB_I8, FB_NDTYPE } fb_dtype;
/* A configuration's "auto" dtype, resolved by the runner before anything uses it. */
#define FB_DTYPE_AUTO FB_NDTYPE

static inline size_t fb_dtype_size(fb_dtype t) {
  static const size_t sz[FB_NDTYPE] = {[FB_F32] = 4, [FB_BF16] = 2, [FB_F64] = 8, [FB_U64] = 8,
                                       [FB_I32] = 4, [FB_I8] = 1};
  return sz[t];
}
const char *fb_dtype_name(fb_dtype t);
/* Parses "fp32"/"f32"/"float32", "bf16"/"bfloat16"; returns -1 when unknown. */
int fb_dtype_parse(const char *s, fb_dtype *out);

/* Every device allocation names one of these. The order is the report's column order. */
typedef enum fb_mem_cat {
  FB_MEM_PARAM_SHARD = 0, /* persistent parameters this rank owns (all of them for single/ddp) */
  FB_MEM_PARAM_FULL,      /* gathered / unsharded parameter buffers (transient or preallocated) */
  FB_MEM_GRAD_SHARD,      /* persistent gradient accumulators this rank owns */
  FB_MEM_GRAD_FULL,       /* unsharded gradient buffers (one unit, before reduction) */
  FB_MEM_OPTIM,           /* optimizer state (AdamW m, v; SGD momentum; fp32 master copies) */
  FB_MEM_ACT,             /* activations saved for backward and their gradients */
  FB_MEM_COMM,            /* communication staging buffers (buckets, padding, receive bufs) */
  FB_MEM_TEMP,            /* kernel scratch: attention blocks, logits chunks, inputs */
  FB_MEM_PARAM_SECONDARY, /* a second, node-local shard of the parameters (zeropp's hpZ) */
  FB_MEM_NCAT
} fb_mem_cat;

const char *fb_mem_cat_name(fb_mem_cat c);  /* short column name, e.g. "param_shard" */

typedef struct fb_mem_stats {
  int64_t cur[FB_MEM_NCAT];
  int64_t peak[FB_MEM_NCAT];   /* peak of each category on its own */
  int64_t cur_total;
  int64_t peak_total;          /* peak of the sum (not the sum of peaks) */
  int64_t at_peak[FB_MEM_NCAT];/* each category's bytes at the moment of peak_total */
  int64_t n_alloc, n_free;
} fb_mem_stats;

#endif
