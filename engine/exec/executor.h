/* The executor: runs one training step of one rank — micro-steps of forward, head and
 * backward with the strategy's hooks around every unit, then the optimizer step — on
 * whatever device and communicator the rank holds. It owns the input buffers and the loss
 * accumulator; it does not know how parameters are laid out (the strategy does). */
#ifndef FB_EXECUTOR_H
#define FB_EXECUTOR_H
#include "../../strategies/strategy.h"
#include "data.h"

typedef struct fb_exec {
  fb_rank *r;
  const fb_data *data;
  int micro_batch;      /* sequences per micro-step */
  int seq;
  fb_buf tokens, targets, loss;  /* device */
  int32_t *h_tokens, *h_targets; /* host staging */
} fb_exec;

fb_status fb_exec_init(fb_exec *e, fb_rank *r, const fb_data *data);
void fb_exec_fini(fb_exec *e);
/* LR of a step: linear warmup, then cosine decay to min_lr (or constant). */
double fb_lr_at(const fb_run_config *c, int step);
/* Runs step `step`; *loss_sum receives this rank's summed token losses (fp64). */
fb_status fb_exec_step(fb_exec *e, int step, double *loss_sum);

#endif
