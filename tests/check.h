/* Minimal test harness: CHECK macros that count failures and print file:line, and a main
 * epilogue. Tests stay real programs; nothing here hides a failure. */
#ifndef FB_TEST_CHECK_H
#define FB_TEST_CHECK_H
#include <math.h>
#include <stdio.h>

static int fb_test_failures, fb_test_checks;

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    fb_test_checks++;                                                                          \
    if (!(cond)) {                                                                             \
      fb_test_failures++;                                                                      \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);                 \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fputc('\n', stderr);                                                                     \
    }                                                                                          \
  } while (0)

#define CHECK_OK(expr)                                                                         \
  do {                                                                                         \
    fb_status chk_st_ = (expr);                                                                \
    CHECK(chk_st_ == FB_OK, "%s -> %s: %s (%s)", #expr, fb_status_name(chk_st_),               \
          fb_error_msg(), fb_error_where());                                                   \
  } while (0)

#define CHECK_CLOSE(a, b, rtol, atol)                                                          \
  do {                                                                                         \
    double chk_a_ = (a), chk_b_ = (b);                                                         \
    CHECK(fabs(chk_a_ - chk_b_) <= (atol) + (rtol) * fabs(chk_b_), "%s = %.17g, %s = %.17g",   \
          #a, chk_a_, #b, chk_b_);                                                             \
  } while (0)

static inline int fb_test_done(const char *name) {
  printf("%s: %d checks, %d failed\n", name, fb_test_checks, fb_test_failures);
  return fb_test_failures ? 1 : 0;
}

#endif
