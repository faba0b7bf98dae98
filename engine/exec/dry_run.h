/* --dry-run: what a run would be, checked and predicted, without touching a device. The runner
 * resolves the configuration as for a real run (backend, communicator, world, batch split,
 * dtype) and hands it here; this prints it as YAML with the predicted per-category memory peak
 * of the worst rank and whether it fits. It does not open a device or a communicator. */
#ifndef FB_DRY_RUN_H
#define FB_DRY_RUN_H
#include <stdint.h>

#include "../config/config.h"
#include "../core/launcher.h"
#include "../device/device.h"
#include "../sim/hardware.h"
#include "../backends/registry.h"

/* The memory check's findings (runner.c's precheck): the worst rank's ledger at its peak. */
typedef struct fb_fit {
  fb_mem_stats peak;      /* the worst rank's predicted ledger */
  int worst_rank;
  int64_t need, limit;    /* bytes needed and available (limit <= 0: unknown) */
  int64_t reserved_peak;  /* caching-allocator model's reserved peak (-1 = not modelled) */
} fb_fit;

typedef fb_status (*fb_precheck_fn)(const fb_run_config *c, const fb_device_entry *dev,
                                    int64_t profile_capacity, bool shared_host, fb_fit *fit);

/* Prints the resolved configuration and the prediction; FB_OK when it would run, FB_ENOMEM
 * (exit 3) when it does not fit. `absent` says why the backend cannot run on this machine
 * ("" when it can). */
fb_status fb_dry_run(const fb_run_config *c, const fb_device_entry *dev, const fb_hardware *hw,
                     const char *absent, bool multi_process, fb_precheck_fn precheck);

/* The first lines of a dry run: a header and, as YAML that --config accepts and ignores, this
 * process's `rank:` and `local_rank:` (world and threads follow in the configuration). */
void fb_dry_run_place(const fb_launch *l, bool multi_process);
/* A dry run refused before fb_dry_run printed the configuration: `world:` and `threads:` as
 * resolved so far, so the four placement keys are always shown before the error. */
void fb_dry_run_refused(const fb_run_config *c);

#endif
