/* The device registry (registry.h): one entry per backend, its capabilities and how it is
 * reached (a table linked in, or the CUDA module loaded on first use). It implements no
 * backend. */
#include "registry.h"

#include <stdio.h>
#include <string.h>

#include "cpu/device_cpu.h"

extern const fb_device_ops fb_sim_device_ops;
#ifdef FB_HAVE_CUDA
#include "cuda_module.h"
#endif

static const fb_device_caps cpu_caps = {
    .host_access = true, .executes = true, .bf16 = true, .gpu = false, .kernel_trace = false,
    .checks_order = false, .comm = "local", .comm_launched = "mpi", .comms = "local mpi"};
static const fb_device_caps opaque_caps = {
    .host_access = false, .executes = true, .bf16 = true, .gpu = false, .kernel_trace = false,
    .checks_order = true, .comm = "local", .comm_launched = "mpi", .comms = "local mpi"};
static const fb_device_caps sim_caps = {
    .host_access = true, .executes = false, .bf16 = true, .gpu = false, .kernel_trace = false,
    .checks_order = false, .comm = "sim", .comm_launched = "sim", .comms = "sim"};
#ifdef FB_HAVE_CUDA
static const fb_device_caps cuda_caps = {
    .host_access = false, .executes = true, .bf16 = true, .gpu = true, .kernel_trace = true,
    .checks_order = false, .gemm_epilogues = true, .comm = "nccl", .comm_launched = "nccl", .comms = "nccl local mpi"};
/* The cuda backend lives in the CUDA module (cuda_module.h), loaded on first use: the driver
 * check comes first, so a machine without a GPU never loads it. */
static bool cuda_available(char *why, size_t n) {
  char reason[512];
  if (!fb_cuda_driver_present(why, n)) return false;
  const fb_cuda_module *m = fb_cuda_module_load(reason, sizeof reason);
  if (!m && why && n) snprintf(why, n, "cannot load the CUDA module: %s", reason);
  return m && m->present(why, n);
}
static int64_t cuda_capacity(int ranks_here) {
  const fb_cuda_module *m = fb_cuda_module_load(NULL, 0);
  return m ? m->capacity(ranks_here) : -1;
}
static int cuda_devices_here(void) {
  const fb_cuda_module *m = fb_cuda_driver_present(NULL, 0) ? fb_cuda_module_load(NULL, 0) : NULL;
  return m ? m->gpu_count() : 0;
}
static bool cuda_device_name(char *buf, size_t n) {
  const fb_cuda_module *m = fb_cuda_driver_present(NULL, 0) ? fb_cuda_module_load(NULL, 0) : NULL;
  if (n) buf[0] = '\0';
  return m && m->gpu_count() > 0 && m->gpu_name(0, buf, n);
}
static const fb_device_ops *cuda_ops(bool load) {
  const fb_cuda_module *m = load ? fb_cuda_module_load(NULL, 0) : fb_cuda_module_loaded();
  return m ? m->device_ops : NULL;
}
#endif

static const fb_device_entry registry[] = {
    {.name = "cpu", .help = "this CPU: real math in fp32 or bf16, host memory",
     .ops = &fb_cpu_device_ops, .caps = &cpu_caps, .capacity = fb_cpu_capacity},
    {.name = "cpu-opaque",
     .help = "the cpu kernels behind memory the host cannot touch and a checked stream order "
             "(the GPU stand-in of the tests)",
     .ops = &fb_cpu_opaque_device_ops, .caps = &opaque_caps, .capacity = fb_cpu_capacity},
#ifdef FB_HAVE_CUDA
    {.name = "cuda", .help = "NVIDIA GPUs: CUDA kernels, cuBLAS, NCCL",
     .resolve = cuda_ops, .caps = &cuda_caps, .available = cuda_available,
     .capacity = cuda_capacity, .devices_here = cuda_devices_here,
     .device_name = cuda_device_name},
#endif
    {.name = "sim", .help = "no data: every op priced by the cost model of a hardware profile",
     .ops = &fb_sim_device_ops, .caps = &sim_caps},
};
enum { NREG = sizeof registry / sizeof *registry };

const fb_device_entry *fb_device_entry_at(int i) {
  return i >= 0 && i < NREG ? &registry[i] : NULL;
}

const fb_device_entry *fb_device_entry_lookup(const char *name) {
  for (int i = 0; name && i < NREG; i++)
    if (!strcmp(registry[i].name, name)) return &registry[i];
  return NULL;
}

/* The entry's ops; a backend in a loadable module is loaded when `load` (NULL if it cannot be). */
static const fb_device_ops *entry_ops(const fb_device_entry *e, bool load) {
  return e->ops ? e->ops : e->resolve ? e->resolve(load) : NULL;
}

const fb_device_ops *fb_device_lookup(const char *name) {
  const fb_device_entry *e = fb_device_entry_lookup(name);
  return e ? entry_ops(e, true) : NULL;
}

/* A device built outside the registry (tests' fakes) executes nothing the host cannot see. */
static const fb_device_caps unregistered_caps = {.host_access = true, .executes = true};

const fb_device_caps *fb_device_caps_of(const fb_device *d) {
  for (int i = 0; i < NREG; i++) /* a device of a module's backend means it is loaded */
    if (entry_ops(&registry[i], false) == d->ops) return registry[i].caps;
  return &unregistered_caps;
}

static void set_why(char *why, size_t n, const char *msg) {
  if (why && n) snprintf(why, n, "%s", msg);
}

void fb_device_names(char *buf, size_t n) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < NREG && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", registry[i].name);
}

bool fb_device_available(const char *name, char *why, size_t why_len) {
  const fb_device_entry *e = fb_device_entry_lookup(name);
  if (!e) {
    char all[128];
    fb_device_names(all, sizeof all);
    if (name && !strcmp(name, "cuda"))
      set_why(why, why_len, "this build has no CUDA (configure with nvcc present or -DFSDPB_CUDA=ON)");
    else if (why && why_len)
      snprintf(why, why_len, "unknown device '%s' (allowed: %s)", name ? name : "", all);
    return false;
  }
  return !e->available || e->available(why, why_len);
}
