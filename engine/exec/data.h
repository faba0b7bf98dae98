/* Training data: a token file or a deterministic synthetic stream.
 *
 * Token file format (little-endian), written by `fsdpbench prepare IN OUT`:
 *   offset 0  char[8]  magic "FSDPTOK1"
 *          8  u32      version (1)
 *         12  u32      vocabulary size the tokens were made for
 *         16  u64      number of tokens
 *         24  u32      bytes per token (2 or 4)
 *         28  u32      reserved (0)
 *         32  tokens
 * `prepare` makes byte-level tokens (vocab 256) from any file.
 *
 * Batches: sequence g (0 <= g < global batch) of step s is a pure function of (seed, s, g):
 * from a file, T+1 consecutive tokens at a position drawn by a counter-based hash; from the
 * synthetic stream, a sequence of a seeded first-order Markov chain (mostly deterministic
 * transitions, so a model can learn it and the loss falls). Rank r of W takes sequences
 * [r*B/W, (r+1)*B/W), so the world size changes only the split, never the data. */
#ifndef FB_DATA_H
#define FB_DATA_H
#include <stdint.h>

#include "../core/status.h"

typedef struct fb_data {
  int vocab;
  uint64_t seed;
  int synthetic;
  uint64_t ntokens;
  uint32_t *tokens; /* file tokens widened to u32 (NULL when synthetic) */
  char path[512];
} fb_data;

/* spec: "synthetic" or a path. Every token must be < vocab (else FB_EUSAGE naming --data). */
fb_status fb_data_open(fb_data *d, const char *spec, int vocab, uint64_t seed, int seq);
void fb_data_close(fb_data *d);
/* inputs[t] and targets[t] for t < T of sequence g in step s. */
void fb_data_sequence(const fb_data *d, int step, int g, int T, int32_t *inputs,
                      int32_t *targets);
/* Converts any file to byte-level tokens (vocab 256). */
fb_status fb_data_prepare(const char *in_path, const char *out_path, uint64_t *ntokens);

#endif
