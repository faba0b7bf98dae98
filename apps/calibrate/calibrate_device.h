/* What the steps of `calibrate --backend cuda` share (calibrate_device.c drives them,
 * calibrate_attention.c times the attention kernels): the device being measured, the base
 * profile, the profile being filled, the keys it measured and how long an op takes on the
 * device's own clock. Internal to apps/. */
#ifndef FB_CALIBRATE_DEVICE_H
#define FB_CALIBRATE_DEVICE_H
#include <stdbool.h>

#include "../engine/device/device.h"
#include "../engine/device/kernels.h"
#include "../engine/sim/hardware.h"
#include "calibrate.h"

enum { FB_DEVCAL_MAX_TAGS = 48 };

/* A measured figure as the profile file writes it: key, value in the key's units, how. */
typedef struct fb_devcal_tag {
  char key[40];
  double value;
  char how[160];
} fb_devcal_tag;

typedef struct fb_devcal {
  const fb_calib_dev_opts *o;
  fb_device *d;
  fb_stream *s;
  fb_kctx k;               /* bf16 activations, as a GPU run computes */
  char gpu[160];           /* the device's name ("NVIDIA H100 80GB HBM3"; "cpu-opaque") */
  char base_name[1024];    /* the base profile (name or path) */
  fb_hardware base, hw;    /* hw: the base with the measured figures */
  fb_devcal_tag tags[FB_DEVCAL_MAX_TAGS];
  int ntags;
  bool small;              /* microbenchmarks at CPU sizes: --quick, or a device that is no
                              GPU (the in-step refit sets its figures) */
  bool tables;             /* hw's kernel tables were measured here (written with the tags) */
} fb_devcal;

/* Records a measured figure for the profile file (value in the key's YAML units). */
void fb_devcal_tag_key(fb_devcal *c, const char *key, double value, const char *how);

/* Device seconds per call of fn(arg) repeated back to back (like a CUDA-event timing of a
 * loop): `reps` calls after one warm-up, timed from a stream mark before the first to one
 * after the last (the device's own clock). */
typedef fb_status (*fb_devcal_fn)(fb_devcal *c, void *arg);
fb_status fb_devcal_time(fb_devcal *c, fb_devcal_fn fn, void *arg, int reps, double *out);

/* A zero-filled device buffer. */
fb_status fb_devcal_zalloc(fb_devcal *c, size_t bytes, fb_buf *b);

/* The attention step (calibrate_attention.c): times this program's attention kernels
 * (fb_k_attention_fwd / _bwd, whatever implementation the device's kernel table holds) by
 * sequence length and head dim, fits the profile's attention curve to them, and writes the
 * rows to o->rows in attention.csv's schema (impl "fsdpbench") when asked. */
fb_status fb_devcal_attention(fb_devcal *c);

/* The in-step step (calibrate_device_steps.c): short training runs on the device set each op
 * family's level as a step runs it (kernel_gbs for every memory-bound op; on a GPU profile the
 * GEMM ceiling and the attention curve through the simulated runs matched op by op; on a CPU
 * device's profile the cpu calibration's in-step refit, split figures and local
 * communicator). */
fb_status fb_devcal_in_step(fb_devcal *c);

/* The contention step (calibrate_contention.c): a GEMM and a memory-bound kernel alone and
 * beside the device's NCCL stand-in (proxy_copy) holding a node's NCCL channel count of SMs,
 * measured against the simulator's contention model; skipped (one line) on a device without
 * the stand-in. Writes no profile key. */
fb_status fb_devcal_contention(fb_devcal *c);

#endif
