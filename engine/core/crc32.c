/* CRC-32 (crc32.h): a 256-entry table built once, one byte per step. */
#include "crc32.h"

#include <pthread.h>

static uint32_t table[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
}

uint32_t fb_crc32(uint32_t crc, const void *buf, size_t n) {
  pthread_once(&once, build);
  const unsigned char *p = buf;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}
