/* Test helper: a hardware profile from YAML text. fb_test_hw_text loads base + extra through a
 * temporary file (removed after); fb_test_hw_bad checks that such a profile is refused with
 * FB_EUSAGE and one line naming `must_name`; fb_test_hw_roundtrip writes a profile with
 * fb_hardware_write and loads it back; FB_TEST_HW_SHARED_HOST is a base profile's body.
 * Include check.h first. */
#ifndef FB_TEST_HW_TEXT_H
#define FB_TEST_HW_TEXT_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/sim/hardware.h"

/* Every key of a one-host cpu-like profile but its name and peaks (tests prepend those). */
#define FB_TEST_HW_SHARED_HOST                                                                   \
  "gemm_max_efficiency: 0.8\ngemm_half_size: 100\nattention_efficiency: 0.5\n"                 \
  "mem_bw_gbs: 20\nmem_efficiency: 1\nlaunch_us: 1\nmemory_gib: 16\ndevices_per_node: 1\n"    \
  "intra_bw_gbs: 4\nintra_lat_us: 10\ninter_bw_gbs: 4\ninter_lat_us: 10\n"                     \
  "collective_efficiency: 1\noverlap_slowdown: 2\nhost_runs_ahead: false\nshared_host: true\n" \
  "collectives: shared_memory\n"

static inline fb_status fb_test_hw_text(const char *base, const char *extra, fb_hardware *hw) {
  char path[] = "/tmp/fb_test_hw_XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  if (fd < 0) return FB_ERR(FB_EIO, "mkstemps");
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    unlink(path);
    return FB_ERR(FB_EIO, "fdopen");
  }
  fputs(base, f);
  fputs(extra, f);
  fclose(f);
  fb_status st = fb_hardware_load(path, hw);
  unlink(path);
  return st;
}

static inline fb_status fb_test_hw_roundtrip(const fb_hardware *in, fb_hardware *out) {
  char path[] = "/tmp/fb_test_hw_rt_XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  if (fd < 0) return FB_ERR(FB_EIO, "mkstemps");
  close(fd);
  fb_status st = fb_hardware_write(path, in, "round trip");
  if (st == FB_OK) st = fb_hardware_load(path, out);
  unlink(path);
  return st;
}

static inline void fb_test_hw_bad(const char *base, const char *extra, const char *must_name) {
  fb_hardware hw;
  fb_status st = fb_test_hw_text(base, extra, &hw);
  CHECK(st == FB_EUSAGE, "'%s' loaded with status %s", extra, fb_status_name(st));
  CHECK(strstr(fb_error_msg(), must_name) != NULL, "message '%s' does not name '%s'",
        fb_error_msg(), must_name);
  CHECK(strchr(fb_error_msg(), '\n') == NULL, "message is not one line: '%s'", fb_error_msg());
}

#endif
