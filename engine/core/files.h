/* Files the user names, checked before they are touched.
 * Inputs: a regular, readable file, or one line naming the flag, the path and what is wanted (a
 * directory, a FIFO or a device would make fopen block or read garbage).
 * Outputs: written under a fresh temporary name beside the destination and renamed over it
 * when complete, so no reader ever sees half a file. Only a regular file is ever replaced: a
 * destination that exists as anything else (a symbolic link, a directory, a FIFO, a socket, a
 * character or block device) is the user's and is refused with one line (FB_EUSAGE, exit 2).
 * Destinations are examined with lstat and never opened, so a FIFO cannot block a writer.
 * It does not decide where outputs go or what they hold. */
#ifndef FB_FILES_H
#define FB_FILES_H
#include <stdio.h>

#include "status.h"

/* FB_OK, or FB_EUSAGE "<flag>: cannot read '<path>': <why> (want <want>)". */
fb_status fb_check_input(const char *path, const char *flag, const char *want);

/* FB_OK when `path` does not exist or is a regular file (which a commit replaces); else
 * FB_EUSAGE "<flag>: '<path>' exists and is <a FIFO|...>: ...". Never opens `path`. */
fb_status fb_check_output(const char *path, const char *flag);

/* The outputs a command writes into a directory, checked before the work starts: every entry
 * of `dir` whose name is one of `names` (NULL-terminated), alone or behind a `rank<N>_` prefix,
 * must be a regular file (fb_check_output). A missing `dir` passes. */
fb_status fb_check_output_dir(const char *dir, const char *const *names, const char *flag);

/* An output being written: `f` writes to `tmp`, which fb_out_commit renames to `path`. */
typedef struct fb_out_file {
  FILE *f;
  char path[4096];
  char tmp[4160];
  char flag[48];
} fb_out_file;

/* Checks `path` (fb_check_output) and creates a temporary file beside it, never an existing
 * one (O_EXCL; mode 0666 less the umask). FB_EUSAGE for the destination, FB_EIO otherwise. */
fb_status fb_out_open(fb_out_file *o, const char *path, const char *flag);
/* Flushes, fsyncs and closes; checks the destination again and renames the temporary over it.
 * On any failure the temporary is removed and the destination left as it was. */
fb_status fb_out_commit(fb_out_file *o);
/* Closes and removes the temporary; the destination is untouched. */
void fb_out_discard(fb_out_file *o);

#endif
