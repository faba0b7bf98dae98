/* Input file checks (files.h). */
#include "files.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

fb_status fb_check_input(const char *path, const char *flag, const char *want) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': %s (want %s)", flag, path, strerror(errno), want);
  if (!S_ISREG(sb.st_mode))
    return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': it is %s, not a regular file (want %s)", flag,
                  path, S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                  : "a device or socket", want);
  if (access(path, R_OK) != 0)
    return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': %s (want %s)", flag, path, strerror(errno), want);
  return FB_OK;
}
