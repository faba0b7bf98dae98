/* libFuzzer target: a token file (--data FILE: the 32-byte FSDPTOK1 header, then tokens)
 * through fb_data_open, and a few sequences drawn from it when it opens. Any input must end in
 * FB_OK or one FB_EUSAGE line, and must not make the reader allocate what the file cannot
 * hold. */
#include <assert.h>
#include <string.h>

#include "engine/exec/data.h"
#include "fuzz_file.h"

enum { VOCAB = 1000, SEQ = 8 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_file(data, size, ".tok");
  fb_data d;
  fb_status st = fb_data_open(&d, path, VOCAB, 1337, SEQ);
  if (st != FB_OK) {
    assert(st == FB_EUSAGE);
    assert(fb_error_msg()[0] && !strchr(fb_error_msg(), '\n'));
    return 0;
  }
  assert(d.ntokens >= SEQ + 1 && d.ntokens <= size);
  int32_t in[SEQ], tg[SEQ];
  for (int g = 0; g < 4; g++) {
    fb_data_sequence(&d, 0, g, SEQ, in, tg);
    for (int t = 0; t < SEQ; t++) assert(in[t] >= 0 && in[t] < VOCAB && tg[t] >= 0 && tg[t] < VOCAB);
  }
  fb_data_close(&d);
  return 0;
}
