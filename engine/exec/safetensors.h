/* safetensors (Hugging Face's format: 8-byte little-endian header length, a JSON header of
 * name -> {dtype, shape, data_offsets}, then the raw tensors) for the full model in fp32, with
 * the names its family's users expect:
 *  - GPT-2: Hugging Face transformers names ("transformer.h.0.attn.c_attn.weight", ...),
 *    Conv1D weights stored [in, out] as GPT2Model keeps them (transposed from this engine's
 *    [out, in]); tied models have no separate lm_head (as in the Hub checkpoints);
 *  - Llama: Meta's reference names ("tok_embeddings.weight", "layers.0.attention.wq.weight",
 *    "output.weight"), [out, in] as stored.
 * It does not convert dtypes (F32 only) nor read other layouts. */
#ifndef FB_SAFETENSORS_H
#define FB_SAFETENSORS_H
#include <stdbool.h>

#include "../../strategies/strategy.h"

bool fb_is_safetensors(const char *path);
/* Writes the model's parameters (unit_src[u] = unit u's flat buffer) to path (via a temporary
 * file and a rename); `note` goes into __metadata__. */
fb_status fb_safetensors_write(const char *path, const fb_model *m, float *const *unit_src,
                               const char *note);
/* Loads every parameter this rank keeps (the strategy's state ranges) from the file; the
 * optimizer state is left as initialised. FB_EUSAGE naming --init-from for a missing tensor,
 * a wrong shape or dtype. */
fb_status fb_safetensors_load(fb_rank *r, const char *path);

#endif
