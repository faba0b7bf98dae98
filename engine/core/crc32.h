/* CRC-32 (IEEE 802.3, the zlib/PNG polynomial 0xEDB88320, reflected), incremental: start from
 * 0, feed every buffer in order. For checkpoint integrity; not a cryptographic hash. */
#ifndef FB_CRC32_H
#define FB_CRC32_H
#include <stddef.h>
#include <stdint.h>

uint32_t fb_crc32(uint32_t crc, const void *buf, size_t n);

#endif
