/* The hardware profile of a GPU by its name (see gpu_profiles.h). */
#include "gpu_profiles.h"

#include <stdbool.h>
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool has(const char *s, const char *sub) {
  size_t n = strlen(sub);
  for (; *s; s++)
    if (!strncasecmp(s, sub, n)) return true;
  return false;
}

typedef struct gpu_rule {
  const char *has;       /* substring of the row's GPU name (case-insensitive) */
  const char *also;      /* second substring, or NULL */
  int mem_lo, mem_hi;    /* gpu_mem_gb range, 0 = any */
  const char *profile;   /* NULL: no profile, `why` says so */
  const char *why;
} gpu_rule;

/* First match wins. A row that does not state the memory takes the GPU's 80 GB profile. */
static const gpu_rule gpu_profiles[] = {
    {.has = "GH200", .why = "GH200 (Grace Hopper) has no profile"},
    {.has = "PCIe", .why = "PCIe cards have no profile (SXM only, and h100-nvl)"},
    {.has = "H200", .profile = "h200"},
    {.has = "H100 NVL", .profile = "h100-nvl"},
    {.has = "H100", .also = "HBM2e", .profile = "h100-96gb"},
    {.has = "H100", .mem_lo = 90, .mem_hi = 100, .profile = "h100-96gb"},
    {.has = "H100", .profile = "h100"},
    {.has = "A100", .also = "40GB", .profile = "a100-40gb"},
    {.has = "A100", .mem_lo = 40, .mem_hi = 40, .profile = "a100-40gb"},
    {.has = "A100", .profile = "a100"},
};

const char *fb_gpu_profile_for(const char *gpu, int mem_gb, const char **why) {
  for (size_t i = 0; i < sizeof gpu_profiles / sizeof gpu_profiles[0]; i++) {
    const gpu_rule *r = &gpu_profiles[i];
    if (!has(gpu, r->has) || (r->also && !has(gpu, r->also))) continue;
    if (r->mem_lo && (mem_gb < r->mem_lo || mem_gb > r->mem_hi)) continue;
    *why = r->why;
    return r->profile;
  }
  *why = "no profile for this GPU";
  return NULL;
}


void fb_gpu_name(char *buf, size_t n) {
  snprintf(buf, n, "unknown NVIDIA GPU");
  DIR *dir = opendir("/proc/driver/nvidia/gpus");
  struct dirent *e;
  while (dir && (e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    char path[512], line[256];
    snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", e->d_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "Model:", 6)) {
        const char *v = line + 6 + strspn(line + 6, " \t");
        snprintf(buf, n, "%.*s", (int)strcspn(v, "\n"), v);
        break;
      }
    if (f) fclose(f);
    break;
  }
  if (dir) closedir(dir);
}
