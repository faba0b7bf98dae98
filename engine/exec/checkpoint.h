/* Sharded checkpoints (PyTorch Distributed Checkpoint as the anchor): every rank writes the
 * fp32 state it holds (parameters, optimizer moments) as ranges of each unit's flat canonical
 * layout, so a checkpoint does not depend on the strategy or world that wrote it: loading asks
 * the strategy which ranges this rank keeps and reads them from whichever shards hold them
 * (resharding). Layout of DIR/step-<N>/:
 *   rank-<R>.bin    magic, records (unit, start, n), the floats, CRC-32 of all before it
 *   manifest.json   step, world, strategy, model, optimizer, and every shard's size and CRC
 * A save writes DIR/.step-<N>.tmp/ (each shard under a temporary name, fsync'd, renamed),
 * agrees across ranks that every shard landed, then rank 0 writes the manifest the same way
 * and renames the directory: a checkpoint is complete and verified, or invisible.
 * It does not decide when to save (the runner does) nor know any strategy's layout. */
#ifndef FB_CHECKPOINT_H
#define FB_CHECKPOINT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../strategies/strategy.h"

/* Saves the state after `steps_done` steps into dir/step-<steps_done>. Collective: every rank
 * calls it. A failure to write (disk full, permissions) on any rank leaves the previous
 * checkpoints as they were and returns FB_EIO with the reason (the caller may go on). */
fb_status fb_ckpt_save(fb_rank *r, const char *dir, int steps_done);

/* Before a run that saves into `dir` after steps (start, steps] (every `save_every`, and the
 * last): each step-<N> already there that it would replace must be an older checkpoint (a
 * directory with a manifest), else FB_EUSAGE naming it: the user's files are never replaced.
 * fb_ckpt_save checks again (a signal may save at any step). */
fb_status fb_ckpt_check_dir(const char *dir, int start, int steps, int save_every);

/* The step directory `path` names: a step-<N> directory with a manifest, or a directory of
 * them (the newest complete one). FB_EUSAGE naming --resume when there is none. */
fb_status fb_ckpt_resolve(const char *path, const char *flag, char *out, size_t n);

/* Loads the state this rank keeps from step directory `stepdir`, verifying every shard's size
 * and checksum; returns the number of steps it holds. FB_EUSAGE (one line, naming the file)
 * for a corrupt, incomplete or mismatched checkpoint. `params_only` loads parameters and
 * leaves the optimizer state as initialised (fine-tuning from a checkpoint). */
fb_status fb_ckpt_load(fb_rank *r, const char *stepdir, bool params_only, int *steps_done);

/* The full model (parameters, fp32, model order) from a step directory, for export: host
 * array of model->numel-sized units laid out as the units' flat buffers concatenated. */
typedef struct fb_ckpt_info {
  int step, world;
  char strategy[32], model[512], optimizer[16];
  int64_t numel;
} fb_ckpt_info;
fb_status fb_ckpt_read_info(const char *stepdir, fb_ckpt_info *info);
/* dst[unit][0..numel) for every unit, parameters only. */
fb_status fb_ckpt_read_params(const char *stepdir, const struct fb_model *m, float **unit_dst);

#endif
