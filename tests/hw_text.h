/* Test helper: a hardware profile from YAML text. fb_test_hw_text loads base + extra through a
 * temporary file (removed after); fb_test_hw_bad checks that such a profile is refused with
 * FB_EUSAGE and one line naming `must_name`. Include check.h first. */
#ifndef FB_TEST_HW_TEXT_H
#define FB_TEST_HW_TEXT_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/sim/hardware.h"

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

static inline void fb_test_hw_bad(const char *base, const char *extra, const char *must_name) {
  fb_hardware hw;
  fb_status st = fb_test_hw_text(base, extra, &hw);
  CHECK(st == FB_EUSAGE, "'%s' loaded with status %s", extra, fb_status_name(st));
  CHECK(strstr(fb_error_msg(), must_name) != NULL, "message '%s' does not name '%s'",
        fb_error_msg(), must_name);
  CHECK(strchr(fb_error_msg(), '\n') == NULL, "message is not one line: '%s'", fb_error_msg());
}

#endif
