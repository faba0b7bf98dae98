/* Input files checked before they are opened: a regular, readable file, or one line naming
 * the flag, the path and what is wanted (a directory, a FIFO or a device would make fopen
 * block or read garbage). It does not open anything. */
#ifndef FB_FILES_H
#define FB_FILES_H
#include "status.h"

/* FB_OK, or FB_EUSAGE "<flag>: cannot read '<path>': <why> (want <want>)". */
fb_status fb_check_input(const char *path, const char *flag, const char *want);

#endif
