/* The hardware profile a GPU gets from its name (engine/sim/gpu_profile.c): the
 * names CUDA reports for H100 SXM/PCIe/NVL, H200, A100 40/80 GB (SXM and PCIe) and cards
 * without a profile; every profile it names exists and loads, and a card whose peak no profile
 * states gets none, with a reason. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine/sim/gpu_profile.h"
#include "engine/sim/hardware.h"

typedef struct gcase {
  const char *gpu, *profile; /* profile NULL: none */
} gcase;

int main(void) {
  const gcase cases[] = {
      {"NVIDIA H100 80GB HBM3", "h100"},
      {"NVIDIA H100", "h100"},
      {"NVIDIA H100 96GB HBM2e", "h100-96gb"},
      {"NVIDIA H100 NVL", "h100-nvl"},
      {"NVIDIA H100 PCIe", NULL},
      {"NVIDIA H200", "h200"},
      {"NVIDIA H200 NVL", NULL},
      {"NVIDIA GH200 480GB", NULL},
      {"NVIDIA A100-SXM4-80GB", "a100"},
      {"NVIDIA A100-SXM4-40GB", "a100-40gb"},
      {"NVIDIA A100-PCIE-40GB", NULL},
      {"NVIDIA A100 80GB PCIe", NULL},
      {"NVIDIA A100-SXM4", "a100"},
      {"A100-SXM4-40GB", "a100-40gb"},
      {"Tesla V100-SXM2-32GB", "v100"},
      {"Tesla V100-SXM3-32GB", "v100"},
      {"Tesla V100-SXM2-16GB", NULL},
      {"Tesla V100-PCIE-32GB", NULL},
      {"H100-SXM", "h100"},
      {"H100 (SXM, HBM2e, 500W)", "h100-96gb"},
      {"GH200-SXM", NULL},
      {"NVIDIA B200", NULL},
      {"NVIDIA GeForce RTX 4090", NULL},
      {"Tesla V100-SXM2-16GB", NULL},
      {"", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char why[160] = "unset";
    const char *p = fb_gpu_profile_for(cases[i].gpu, 0, why, sizeof why);
    const bool same = p && cases[i].profile ? !strcmp(p, cases[i].profile) : p == cases[i].profile;
    CHECK(same, "'%s': profile %s, want %s", cases[i].gpu, p ? p : "none",
          cases[i].profile ? cases[i].profile : "none");
    CHECK(why[0] && strcmp(why, "unset"), "'%s': no reason given", cases[i].gpu);
    if (p) {
      fb_hardware hw;
      CHECK_OK(fb_hardware_load(p, &hw));
      CHECK(hw.gpu_arch != FB_ARCH_NONE, "'%s': profile %s is not a GPU profile", cases[i].gpu, p);
    }
    printf("  %-28s -> %-10s (%s)\n", cases[i].gpu, p ? p : "none", why);
  }
  CHECK(!strcmp(fb_gpu_profile_for("A100", 40, NULL, 0), "a100-40gb"), "A100 with 40 GB stated");
  CHECK(!strcmp(fb_gpu_profile_for("A100", 80, NULL, 0), "a100"), "A100 with 80 GB stated");
  CHECK(!strcmp(fb_gpu_profile_for("H100", 95, NULL, 0), "h100-96gb"), "H100 with 95 GB stated");
  CHECK(!strcmp(fb_gpu_profile_for("V100", 32, NULL, 0), "v100"), "V100 with 32 GB stated");
  CHECK(fb_gpu_profile_for("V100", 16, NULL, 0) == NULL, "V100 16 GB has no profile");
  CHECK(fb_gpu_profile_for(NULL, 0, NULL, 0) == NULL, "a NULL name maps to a profile");
  return fb_test_done("test_gpu_profile");
}
