/* Growable arrays (see grow.h). */
#include "grow.h"

#include <stdlib.h>

bool fb_grow(void **p, int64_t *cap, int64_t need, size_t elt, int64_t first) {
  if (need <= *cap) return true;
  int64_t nc = *cap ? *cap : first;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, (size_t)nc * elt);
  if (!q) return false;
  *p = q;
  *cap = nc;
  return true;
}
