/* Where the shipped YAML files live and how a name ("debug", "h100") becomes a path
 * (data_root.c). In core because the model reader (config/) and the hardware profiles (sim/)
 * both resolve names. */
#ifndef FB_DATA_ROOT_H
#define FB_DATA_ROOT_H
#include <stddef.h>

#include "status.h"

/* Directory holding models/ (FSDPBENCH_HOME, else next to the executable, else the source
 * tree, else "."). */
const char *fb_data_root(void);
/* Resolves `name` inside root/sub with extension .yaml, or returns name if it is a path. */
fb_status fb_resolve_yaml(const char *sub, const char *name, char *out, size_t n);

#endif
