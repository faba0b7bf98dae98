/* Token files, `prepare`, and the synthetic stream (see data.h). Host-side only. */
#include "data.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/files.h"

static inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static const char MAGIC[8] = {'F', 'S', 'D', 'P', 'T', 'O', 'K', '1'};

fb_status fb_data_open(fb_data *d, const char *spec, int vocab, uint64_t seed, int seq) {
  memset(d, 0, sizeof *d);
  d->vocab = vocab;
  d->seed = seed;
  snprintf(d->path, sizeof d->path, "%s", spec);
  if (!strcmp(spec, "synthetic") || !spec[0]) {
    d->synthetic = 1;
    return FB_OK;
  }
  fb_status st = FB_OK;
  unsigned char hdr[32];
  void *raw = NULL;
  FB_TRY(fb_check_input(spec, "--data", "'synthetic' or a token file from `fsdpbench prepare`"));
  FILE *f = fopen(spec, "rb");
  if (!f) return FB_ERR(FB_EUSAGE, "--data: cannot open '%s': %s", spec, strerror(errno));
  if (fread(hdr, 1, sizeof hdr, f) != sizeof hdr || memcmp(hdr, MAGIC, 8)) {
    st = FB_ERR(FB_EUSAGE, "--data: '%s' is not a token file (want magic FSDPTOK1; make one "
                           "with `fsdpbench prepare TEXT OUT`)", spec);
    goto out;
  }
  uint32_t version, fvocab, width;
  uint64_t count;
  memcpy(&version, hdr + 8, 4);
  memcpy(&fvocab, hdr + 12, 4);
  memcpy(&count, hdr + 16, 8);
  memcpy(&width, hdr + 24, 4);
  if (version != 1 || (width != 2 && width != 4)) {
    st = FB_ERR(FB_EUSAGE, "--data: '%s' has version %u / %u-byte tokens (want version 1, 2 or "
                           "4 bytes)", spec, version, width);
    goto out;
  }
  /* The header's count against the bytes the file holds, before anything is allocated: a
   * corrupt count must not make the reader ask for terabytes. */
  struct stat sb;
  const uint64_t held = fstat(fileno(f), &sb) == 0 && sb.st_size > 32
                            ? (uint64_t)(sb.st_size - 32) / width : 0;
  if (count > held) {
    st = FB_ERR(FB_EUSAGE, "--data: '%s' is truncated (header says %llu tokens, the file holds "
                           "%llu of %u bytes)", spec, (unsigned long long)count,
                (unsigned long long)held, width);
    goto out;
  }
  if (count < (uint64_t)seq + 1) {
    st = FB_ERR(FB_EUSAGE, "--data: '%s' holds %llu tokens, fewer than --seq + 1 = %d", spec,
                (unsigned long long)count, seq + 1);
    goto out;
  }
  raw = malloc(count * width);
  d->tokens = malloc(count * sizeof *d->tokens);
  if (!raw || !d->tokens) {
    st = FB_ERR(FB_ENOMEM, "--data: no host memory for %llu tokens", (unsigned long long)count);
    goto out;
  }
  if (fread(raw, width, count, f) != count) {
    st = FB_ERR(FB_EUSAGE, "--data: '%s' is truncated (header says %llu tokens)", spec,
                (unsigned long long)count);
    goto out;
  }
  for (uint64_t i = 0; i < count; i++) {
    uint32_t t;
    if (width == 2) {
      uint16_t v;
      memcpy(&v, (char *)raw + 2 * i, 2);
      t = v;
    } else {
      memcpy(&t, (char *)raw + 4 * i, 4);
    }
    if (t >= (uint32_t)vocab) {
      st = FB_ERR(FB_EUSAGE, "--data: token %u at position %llu of '%s' is >= the model's vocab "
                             "(%d)", t, (unsigned long long)i, spec, vocab);
      goto out;
    }
    d->tokens[i] = t;
  }
  (void)fvocab;
  d->ntokens = count;
out:
  free(raw);
  fclose(f);
  if (st != FB_OK) {
    free(d->tokens);
    d->tokens = NULL;
  }
  return st;
}

void fb_data_close(fb_data *d) {
  free(d->tokens);
  d->tokens = NULL;
}

void fb_data_sequence(const fb_data *d, int step, int g, int T, int32_t *in, int32_t *tg) {
  const uint64_t key = mix64(d->seed ^ mix64(((uint64_t)step << 32) ^ (uint64_t)g));
  if (!d->synthetic) {
    uint64_t span = d->ntokens - (uint64_t)T; /* start in [0, span) */
    uint64_t start = key % span;
    for (int t = 0; t < T; t++) {
      in[t] = (int32_t)d->tokens[start + t];
      tg[t] = (int32_t)d->tokens[start + t + 1];
    }
    return;
  }
  /* Markov chain over min(vocab, 64) symbols: next = (5*cur + 3) mod K with probability
   * 7/8, else uniform. A model learns it to about 0.6 nats. */
  const uint64_t K = d->vocab < 64 ? (uint64_t)d->vocab : 64;
  uint64_t cur = key % K;
  for (int t = 0; t <= T; t++) {
    if (t < T) in[t] = (int32_t)cur;
    if (t > 0) tg[t - 1] = (int32_t)cur;
    uint64_t r = mix64(key + 0x632BE59BD9B4E019ull * (uint64_t)(t + 1));
    cur = (r & 7) ? (5 * cur + 3) % K : (r >> 8) % K;
  }
}

fb_status fb_data_prepare(const char *in_path, const char *out_path, uint64_t *ntokens) {
  fb_status st = fb_check_input(in_path, "prepare", "a text file");
  if (st != FB_OK) return st;
  struct stat si, so;
  if (stat(out_path, &so) == 0 && stat(in_path, &si) == 0 && si.st_dev == so.st_dev &&
      si.st_ino == so.st_ino)
    return FB_ERR(FB_EUSAGE, "prepare: the output '%s' is the input file", out_path);
  FILE *in = fopen(in_path, "rb");
  if (!in) return FB_ERR(FB_EUSAGE, "prepare: cannot open '%s': %s", in_path, strerror(errno));
  fb_out_file out; /* written under a temporary name, renamed when complete */
  st = fb_out_open(&out, out_path, "prepare");
  if (st != FB_OK) {
    fclose(in);
    return st;
  }
  unsigned char hdr[32] = {0};
  memcpy(hdr, MAGIC, 8);
  uint32_t version = 1, vocab = 256, width = 2;
  memcpy(hdr + 8, &version, 4);
  memcpy(hdr + 12, &vocab, 4);
  memcpy(hdr + 24, &width, 4);
  bool ok = fwrite(hdr, 1, 32, out.f) == 32;
  uint64_t n = 0;
  unsigned char buf[65536];
  uint16_t tok[65536];
  size_t got;
  while (ok && (got = fread(buf, 1, sizeof buf, in)) > 0) {
    for (size_t i = 0; i < got; i++) tok[i] = buf[i];
    ok = fwrite(tok, 2, got, out.f) == got;
    n += got;
  }
  memcpy(hdr + 16, &n, 8);
  ok = ok && !ferror(in) && fseek(out.f, 0, SEEK_SET) == 0 && fwrite(hdr, 1, 32, out.f) == 32;
  fclose(in);
  if (!ok) {
    st = FB_ERR(FB_EIO, "prepare: writing '%s' failed: %s", out_path, strerror(errno));
    fb_out_discard(&out);
    return st;
  }
  FB_TRY(fb_out_commit(&out));
  if (ntokens) *ntokens = n;
  return FB_OK;
}
