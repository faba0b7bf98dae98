/* Loading the CUDA module (cuda_module.h): finding libfsdpbench_cuda.so next to the real
 * executable (or at $FB_CUDA_MODULE), dlopen with RTLD_NOW | RTLD_LOCAL once per process,
 * checking its table's ABI, and the cheap driver check that comes first for `auto`.
 * It does not run any CUDA code (the module does) nor decide which backend a run uses. */
#include "cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(char *why, size_t n, const char *msg) {
  if (why && n) snprintf(why, n, "%s", msg);
}

bool fb_cuda_module_path(char *buf, size_t n) {
  const char *env = getenv("FB_CUDA_MODULE");
  if (env && *env) return (size_t)snprintf(buf, n, "%s", env) < n;
  char exe[PATH_MAX];
  if (!realpath("/proc/self/exe", exe)) return false;
  char *slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = '\0';
  return (size_t)snprintf(buf, n, "%s/%s", exe, FB_CUDA_MODULE_FILE) < n;
}

const fb_cuda_module *fb_cuda_module_open(const char *path, char *why, size_t n) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    say(why, n, dlerror());
    return NULL;
  }
  fb_cuda_module_fn entry;
  *(void **)&entry = dlsym(h, FB_CUDA_MODULE_SYMBOL); /* object-to-function pointer, POSIX */
  const fb_cuda_module *m = entry ? entry() : NULL;
  if (!m || m->abi != FB_CUDA_MODULE_ABI || m->size != sizeof *m) {
    if (why && n)
      snprintf(why, n, "%s: %s", path,
               !entry ? "no " FB_CUDA_MODULE_SYMBOL " (not an fsdpbench CUDA module)"
                      : "built for another version of fsdpbench (ABI mismatch): rebuild it");
    dlclose(h);
    return NULL;
  }
  return m;
}

#ifdef FB_HAVE_CUDA
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const fb_cuda_module *loaded;
static char load_why[512];

static void load_once(void) {
  char path[PATH_MAX + 64];
  if (!fb_cuda_module_path(path, sizeof path)) {
    say(load_why, sizeof load_why, "cannot locate " FB_CUDA_MODULE_FILE
        " (the executable's path is unknown; set FB_CUDA_MODULE)");
    return;
  }
  const fb_cuda_module *m = fb_cuda_module_open(path, load_why, sizeof load_why);
  __atomic_store_n(&loaded, m, __ATOMIC_RELEASE);
}

const fb_cuda_module *fb_cuda_module_load(char *why, size_t n) {
  pthread_once(&once, load_once);
  const fb_cuda_module *m = fb_cuda_module_loaded();
  if (!m) say(why, n, load_why);
  return m;
}

const fb_cuda_module *fb_cuda_module_loaded(void) {
  return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
}

bool fb_cuda_driver_present(char *why, size_t n) {
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) return true;
  if (why && n) snprintf(why, n, "no NVIDIA driver (%s)", dlerror());
  return false;
}
#else
#define NO_CUDA "this build has no CUDA (configure with nvcc present or -DFSDPB_CUDA=ON)"

const fb_cuda_module *fb_cuda_module_load(char *why, size_t n) {
  say(why, n, NO_CUDA);
  return NULL;
}

const fb_cuda_module *fb_cuda_module_loaded(void) { return NULL; }

bool fb_cuda_driver_present(char *why, size_t n) {
  say(why, n, NO_CUDA);
  return false;
}
#endif
