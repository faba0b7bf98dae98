/* An output directory written whole or not at all: a command writes its set of files into a
 * temporary sibling of the destination (".<name>.part-XXXXXX" in the same parent, so a rename
 * moves it), and fb_out_dir_commit puts the set in place only when every file is complete:
 * the old directory is renamed aside (".<name>.old-XXXXXX"), the new one renamed in, the old
 * one removed. On failure (a write error: disk full, EFBIG under `ulimit -f`; a SIGINT or
 * SIGTERM while writing) fb_out_dir_abort removes the temporary and the destination stays as
 * it was, or absent. Nothing is left beside the destination either way.
 *
 * Signals: between begin and commit/abort, SIGINT and SIGTERM are caught (noted, not
 * fatal) and SIGXFSZ is ignored, so a write past a file-size limit fails with EFBIG and a
 * stop request cannot kill the process half-way through a file. A caught signal makes commit
 * refuse (FB_EINTERRUPTED, exit 1 like a run stopped between steps), and a writer may stop
 * early between files (fb_out_dir_stopped). The window is the writing of a finished run's
 * files (seconds), not the run; the previous dispositions come back with commit / abort.
 *
 * One set per process at a time. It does not decide which files go in the set. */
#ifndef FB_OUT_DIR_H
#define FB_OUT_DIR_H
#include <signal.h>
#include <stdbool.h>

#include "status.h"

typedef struct fb_out_dir {
  char dest[4096];   /* the directory the user named */
  char part[4160];   /* where the set is written until commit */
  char flag[48];     /* the flag that named dest, for messages ("--out") */
  const char *const *ours; /* the set's file names (fb_out_dir_begin) */
  bool active;
} fb_out_dir;

/* Before the work: FB_OK when a set can be written at dest (dest absent or a directory, and
 * the nearest existing folder above it writable); else FB_EUSAGE naming flag. Creates nothing. */
fb_status fb_out_dir_check(const char *dest, const char *flag);
/* Creates the temporary sibling of `dest` (its parent must exist or is created) and holds the
 * signals. `ours` (NULL-terminated; NULL: every entry) names the files the set consists of,
 * alone or behind a "rank<N>_" prefix: at commit, those of the old set are replaced (or, when
 * the new set lacks one, removed with it), and any other entry of dest (the user's own notes,
 * logs) is carried into the new set. FB_EUSAGE naming `flag` when dest exists and is not a
 * directory, or its parent is not writable. */
fb_status fb_out_dir_begin(fb_out_dir *o, const char *dest, const char *const *ours,
                           const char *flag);
/* Where to write the set's files (the temporary directory). */
const char *fb_out_dir_path(const fb_out_dir *o);
/* Renames the set into place (replacing a previous directory at dest) and releases the
 * signals. On failure (or a held SIGINT/SIGTERM) the temporary is removed and dest is left
 * as it was. */
fb_status fb_out_dir_commit(fb_out_dir *o);
/* For a set that failed with st (already set with its message): removes the temporary,
 * releases the signals and returns st with the message extended by what became of dest
 * ("...; the previous outputs there are left as they were" / "...; nothing was written
 * there"). */
fb_status fb_out_dir_fail(fb_out_dir *o, fb_status st);
/* Removes the temporary and releases the signals; dest is untouched. Safe to call twice. */
void fb_out_dir_abort(fb_out_dir *o);

/* The whole sequence for a writer that is one call: begin, write(part, ctx), then commit, or
 * fail with write's status (or FB_EINTERRUPTED when a signal came meanwhile). */
fb_status fb_out_dir_write(const char *dest, const char *const *ours, const char *flag,
                           fb_status (*write)(const char *dir, void *ctx), void *ctx);
/* The signal handling above, for a writer of a single file (calibrate's profile): hold before
 * writing, check fb_out_dir_stopped before the rename, release after (calls nest; the last
 * release restores the dispositions and forgets a caught signal). */
void fb_out_signals_hold(void);
void fb_out_signals_release(void);
/* The signal caught since begin (SIGINT, SIGTERM), 0 if none: a writer checks it between
 * files and gives up with FB_EINTERRUPTED. */
int fb_out_dir_stopped(void);

/* Removes a directory tree (files, symbolic links and subdirectories; never follows a link).
 * FB_EIO naming the first entry that could not be removed. */
fb_status fb_rm_tree(const char *path);

#endif
