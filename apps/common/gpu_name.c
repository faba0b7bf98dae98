/* The first GPU's model name as the NVIDIA driver reports it (see gpu_name.h). */
#include "gpu_name.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

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
