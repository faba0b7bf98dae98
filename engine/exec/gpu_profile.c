/* GPU name -> hardware profile (gpu_profile.h). The names are those cudaGetDeviceProperties
 * reports ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 PCIe", "NVIDIA H100
 * NVL", "NVIDIA H200", "NVIDIA GH200 480GB"); the rules go from the most specific to the least,
 * and a card whose bf16 peak no profile states maps to none rather than to a near one. */
#include "gpu_profile.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Whether `word` occurs in s, ignoring case, not inside a longer alphanumeric token on its
 * left ("H200" is not found in "GH200"). */
static bool has(const char *s, const char *word) {
  const size_t w = strlen(word);
  for (const char *p = s; *p; p++) {
    if (p > s && isalnum((unsigned char)p[-1])) continue;
    size_t i = 0;
    while (i < w && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)word[i])) i++;
    if (i == w) return true;
  }
  return false;
}

static const char *pick(const char *profile, char *why, size_t n, const char *reason) {
  if (why && n) snprintf(why, n, "%s", reason);
  return profile;
}

const char *fb_gpu_profile_for(const char *gpu_name, char *why, size_t n) {
  const char *g = gpu_name ? gpu_name : "";
  if (has(g, "GH200") || has(g, "GB200") || has(g, "B200") || has(g, "B100"))
    return pick(NULL, why, n, "no profile describes it");
  if (has(g, "H200")) {
    if (has(g, "NVL")) return pick(NULL, why, n, "no profile for the H200 NVL");
    return pick("h200", why, n, "an H200 SXM 141 GB");
  }
  if (has(g, "H100")) {
    if (has(g, "NVL")) return pick("h100-nvl", why, n, "an H100 NVL 94 GB");
    if (has(g, "PCIe"))
      return pick(NULL, why, n, "no profile for the H100 PCIe (756 TFLOP/s bf16 dense, not the "
                  "SXM's 989)");
    if (has(g, "96GB")) return pick("h100-96gb", why, n, "an H100 SXM 96 GB");
    return pick("h100", why, n, "an H100 SXM 80 GB");
  }
  if (has(g, "A100")) {
    const bool pcie = has(g, "PCIe");
    if (strstr(g, "40GB"))
      return pick("a100-40gb", why, n, pcie ? "an A100 40 GB PCIe: the SXM profile (the same "
                  "312 TFLOP/s bf16 dense)" : "an A100 SXM4 40 GB");
    if (strstr(g, "80GB"))
      return pick("a100", why, n, pcie ? "an A100 80 GB PCIe: the SXM profile (the same 312 "
                  "TFLOP/s bf16 dense)" : "an A100 SXM4 80 GB");
    return pick(NULL, why, n, "an A100 of unknown memory size");
  }
  return pick(NULL, why, n, "no profile describes it");
}
