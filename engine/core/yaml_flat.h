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
 * for each pair in file order (line is 1-based; an empty or null value arrives as "").
 * Malformed YAML, a list or mapping where a value is expected, aliases and duplicate keys are
 * FB_EUSAGE "path:line:col: <key>: ..."; an unreadable file is FB_EUSAGE
 * "<flag>: cannot read 'path': ...". Used for model files. */
typedef fb_status (*fb_yaml_visit_fn)(void *ctx, const char *path, int line, const char *key,
                                      const char *value);
fb_status fb_yaml_read_flat(const char *path, const char *flag, fb_yaml_visit_fn visit,
                            void *ctx);
/* The same reader with the shape chosen: the keys whose value may be a list of scalars
 * (arrives joined with ','; every other key given a list is refused, naming it), and values
 * that may be a one-level mapping of scalars, whose entries go to `entry` (key, entry name,
 * value) in file order (NULL: such values are refused). Duplicate entry names are the visitor's to
 * refuse. Nothing deeper is ever accepted; a file over 1 MiB is refused unread. */
typedef fb_status (*fb_yaml_entry_fn)(void *ctx, const char *path, int line, const char *key,
                                      const char *name, const char *value);
typedef struct fb_yaml_shape {
  const char *flag;       /* names the file in "cannot read" errors (--config, --hardware) */
  bool (*takes_list)(const char *key); /* may key's value be a list? NULL: no key's */
  fb_yaml_visit_fn visit; /* each key with a scalar (or list) value */
  fb_yaml_entry_fn entry; /* each entry of a mapping value; NULL = mappings refused */
} fb_yaml_shape;
fb_status fb_yaml_read(const char *path, const fb_yaml_shape *shape, void *ctx);

#endif
