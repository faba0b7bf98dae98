/* Where the shipped YAML files live (fb_data_root) and how a name such as "debug" or
 * "h100" becomes a file path (fb_resolve_yaml). A bad name is FB_EUSAGE listing what exists.
 * This file does not parse YAML. */
#define _GNU_SOURCE /* strverscmp: 1B, 8B, 70B in that order */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_root.h"

#ifndef FB_SOURCE_DIR
#define FB_SOURCE_DIR "."
#endif

static char root[PATH_MAX];
static pthread_once_t root_once = PTHREAD_ONCE_INIT;

static bool has_models(const char *dir) {
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/models/debug.yaml", dir);
  return access(p, R_OK) == 0;
}

static void find_root(void) {
  const char *home = getenv("FSDPBENCH_HOME");
  if (home && *home) {
    snprintf(root, sizeof root, "%s", home);
    return;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    for (int level = 0; level <= 3; level++) {
      char *slash = strrchr(exe, '/');
      if (!slash) break;
      if (slash == exe) slash[1] = 0; /* "/" */
      else *slash = 0;
      if (has_models(exe)) {
        snprintf(root, sizeof root, "%s", exe);
        return;
      }
      if (slash == exe) break;
    }
  }
  snprintf(root, sizeof root, "%s", has_models(FB_SOURCE_DIR) ? FB_SOURCE_DIR : ".");
}

const char *fb_data_root(void) {
  pthread_once(&root_once, find_root);
  return root;
}

static int cmp_str(const void *a, const void *b) {
  return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* Comma-separated names of the *.yaml files in dir, sorted ("none" when there are none). */
static void list_yaml(const char *dir, char *buf, size_t n) {
  char *names[256];
  int count = 0;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) && count < 256) {
      size_t l = strlen(e->d_name);
      if (l > 5 && !strcmp(e->d_name + l - 5, ".yaml") && e->d_name[0] != '.') {
        names[count] = strndup(e->d_name, l - 5);
        if (names[count]) count++;
      }
    }
    closedir(d);
  }
  qsort(names, (size_t)count, sizeof names[0], cmp_str);
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < count; i++) {
    if (len < n) len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", names[i]);
    free(names[i]);
  }
  if (!count && snprintf(buf, n, "none in %s", dir) >= (int)n) buf[n - 1] = 0;
}

fb_status fb_resolve_yaml(const char *sub, const char *name, char *out, size_t n) {
  /* The flag that names files of this folder, and what one is called. */
  const char *flag = "--model", *what = "model";
  if (strstr(sub, "hardware")) {
    flag = "--hardware";
    what = "hardware profile";
  }
  size_t len = strlen(name);
  bool is_path = strchr(name, '/') || (len >= 5 && !strcmp(name + len - 5, ".yaml"));
  if (is_path) {
    if (access(name, R_OK))
      return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': %s", flag, name, strerror(errno));
    if ((size_t)snprintf(out, n, "%s", name) >= n)
      return FB_ERR(FB_EUSAGE, "%s: path '%s' is too long", flag, name);
    return FB_OK;
  }
  char dir[PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s/%s", fb_data_root(), sub) >= (int)sizeof dir)
    return FB_ERR(FB_EUSAGE, "%s: data root '%s' is too long", flag, fb_data_root());
  if (len && (size_t)snprintf(out, n, "%s/%s.yaml", dir, name) < n && access(out, R_OK) == 0)
    return FB_OK;
  char avail[1024];
  list_yaml(dir, avail, sizeof avail);
  return FB_ERR(FB_EUSAGE, "%s: unknown %s '%s' (available: %s)", flag, what, name, avail);
}
