/* libFuzzer target: a hardware profile (models/hardware/NAME.yaml) through fb_hardware_load;
 * a profile that loads must pass fb_hardware_validate, and its nested kernel table must stay
 * within bounds. Any input must end in FB_OK or one FB_EUSAGE line. */
#include <assert.h>
#include <string.h>

#include "engine/sim/hardware.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_file(data, size, ".yaml");
  fb_hardware hw;
  fb_status st = fb_hardware_load(path, &hw);
  if (st != FB_OK) {
    assert(st == FB_EUSAGE);
    assert(fb_error_msg()[0] && !strchr(fb_error_msg(), '\n'));
    return 0;
  }
  assert(hw.nkernels >= 0 && hw.nkernels <= FB_HW_MAX_KERNELS);
  assert(fb_hardware_validate(&hw, path) == FB_OK);
  return 0;
}
