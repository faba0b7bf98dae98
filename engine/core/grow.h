/* Growable arrays: the one doubling rule the engine's append-only buffers share (recorder
 * events, the caching-allocator model's blocks and maps). It does not shrink or free. */
#ifndef FB_GROW_H
#define FB_GROW_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Makes *p hold at least `need` elements of `elt` bytes: the capacity doubles from `first`
 * (or from *cap) until it fits. False, with *p and *cap untouched, when memory runs out. */
bool fb_grow(void **p, int64_t *cap, int64_t need, size_t elt, int64_t first);

#endif
