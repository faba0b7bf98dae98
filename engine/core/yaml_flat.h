/* The reader of the project's YAML files (run configs, models, hardware profiles): one flat
 * mapping of scalar keys to scalar values, optionally a list of scalars or a one-level mapping
 * of scalars as a value. It knows no keys (the visitors decide) and sits in core so that every
 * layer may read a file of its own (sim/hardware.c its profiles, config/ the run and model
 * files). Implemented in yaml_flat.c on libyaml's event parser. */
#ifndef FB_YAML_FLAT_H
#define FB_YAML_FLAT_H
#include <stdbool.h>

#include "status.h"

/* Reads a YAML file that holds one flat mapping of scalar keys to scalar values, calling visit
 * for each pair in file order (line is 1-based; a sequence of scalars arrives joined with ',';
 * an empty or null value arrives as ""). Malformed YAML, nested mappings, aliases and
 * duplicate keys are FB_EUSAGE "path:line:col: ..."; an unreadable file is FB_EUSAGE
 * "<flag>: cannot read 'path': ...". Used for run configs, models and hardware profiles. */
typedef fb_status (*fb_yaml_visit_fn)(void *ctx, const char *path, int line, const char *key,
                                      const char *value);
fb_status fb_yaml_read_flat(const char *path, const char *flag, fb_yaml_visit_fn visit,
                            void *ctx);
/* The same reader with the shape chosen: lists of scalars allowed or not, and values that may
 * be a one-level mapping of scalars, whose entries go to `entry` (key, entry name, value) in
 * file order (NULL: such values are refused). Duplicate entry names are the visitor's to
 * refuse. Nothing deeper is ever accepted; a file over 1 MiB is refused unread. */
typedef fb_status (*fb_yaml_entry_fn)(void *ctx, const char *path, int line, const char *key,
                                      const char *name, const char *value);
typedef struct fb_yaml_shape {
  const char *flag;       /* names the file in "cannot read" errors (--config, --hardware) */
  bool lists;             /* a value may be a list of scalars (arrives joined with ',') */
  fb_yaml_visit_fn visit; /* each key with a scalar (or list) value */
  fb_yaml_entry_fn entry; /* each entry of a mapping value; NULL = mappings refused */
} fb_yaml_shape;
fb_status fb_yaml_read(const char *path, const fb_yaml_shape *shape, void *ctx);

#endif
