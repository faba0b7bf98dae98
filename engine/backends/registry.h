/* The device registry: every backend built into this binary, by name, with its capabilities,
 * whether it can run here and how much memory it offers. It sits above the backends it lists
 * (engine/backends/cpu, sim, cuda) and below everything that chooses one (config, the runner,
 * the apps): the device interface itself (engine/device/device.h) names no backend. The cuda
 * backend is reached through its loadable module (cuda_module.h), so listing or naming
 * backends loads nothing. */
#ifndef FB_BACKENDS_REGISTRY_H
#define FB_BACKENDS_REGISTRY_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../device/device.h"

/* A backend in the device registry. */
typedef struct fb_device_entry {
  const char *name;               /* --backend value */
  const char *help;               /* one line for --help */
  const fb_device_ops *ops;       /* NULL for a backend in a loadable module: see resolve */
  /* A backend in a loadable module (cuda, cuda_module.h): its ops once the module is loaded;
   * with load true it loads the module first. NULL when it cannot be loaded. Reached through
   * fb_device_lookup, so listing or naming backends loads nothing. */
  const fb_device_ops *(*resolve)(bool load);
  const fb_device_caps *caps;
  /* Whether it can run here; fills why when not (NULL = always). */
  bool (*available)(char *why, size_t why_len);
  /* Bytes a rank may use on this machine before anything is opened: the GPU's free memory
   * less the CUDA context, cuBLAS workspaces and NCCL buffers it will need; the host's
   * available memory on cpu. NULL = no limit known. */
  int64_t (*capacity)(int ranks_here);
  /* How many devices this machine offers ranks, one each (cuda: the visible GPUs; 0 when none
   * can be counted), and the name of the first (`--hardware` is chosen from it when not given).
   * NULL: ranks share the host, any number of them. */
  int (*devices_here)(void);
  bool (*device_name)(char *buf, size_t n);
} fb_device_entry;

/* Registry: "cpu", "cpu-opaque", "cuda", "sim". NULL when the name is unknown or not built,
 * or its module cannot be loaded (cuda: this loads the CUDA module). */
const fb_device_ops *fb_device_lookup(const char *name);
const fb_device_entry *fb_device_entry_lookup(const char *name);
/* The i-th registered backend (built into this binary), NULL past the end. */
const fb_device_entry *fb_device_entry_at(int i);
/* "cpu, cpu-opaque, ..." (the registered backends) into buf. */
void fb_device_names(char *buf, size_t n);
/* The capabilities of the device a rank holds (from the registry, by its ops). */
const fb_device_caps *fb_device_caps_of(const fb_device *d);
/* Whether a backend can run here (cuda: a GPU is present). Fills why when it cannot. */
bool fb_device_available(const char *name, char *why, size_t why_len);

#endif
