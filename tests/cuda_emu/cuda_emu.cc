/* The CPU emulator's scheduler and collectives (see cuda_emu.h): fibers per CUDA thread,
 * rounds of resumes in a seeded order, warp collectives executed when their lanes have all
 * arrived, block barriers when every live thread has, deferred cp.async groups. It aborts
 * with a message naming the block, warp and lanes on anything a GPU would hang on or leave
 * undefined. It is single-threaded and not reentrant (one launch at a time). */
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <map>
#include <numeric>
#include <random>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

emu_builtins *emu_cur;

namespace {

enum fstate { F_RUN, F_WARP, F_BAR, F_DONE, F_SPIN /* yielded in mbar_wait: runs again */ };
enum opkind { OP_SHFL_XOR, OP_SHFL_IDX, OP_SHFL_DOWN, OP_RED_MAX, OP_RED_MIN, OP_RED_ADD,
              OP_BALLOT, OP_ANY, OP_ALL, OP_SYNCWARP, OP_LDSM, OP_LDSM_T, OP_MMA,
              /* warpgroup collectives (128 threads) from here on */
              OP_WGMMA, OP_WG_FENCE, OP_WG_COMMIT, OP_WG_WAIT };
const char *const op_names[] = {"shfl_xor", "shfl_idx", "shfl_down", "reduce_max",
                                "reduce_min", "reduce_add", "ballot", "any", "all",
                                "syncwarp", "ldmatrix", "ldmatrix.trans", "mma", "wgmma",
                                "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group"};

/* Switching stacks. On x86-64 a six-register switch (the System V callee-saved registers and
 * the stack pointer): glibc's swapcontext also saves the signal mask, a system call per
 * switch, which made the emulator several times slower. Elsewhere, ucontext. */
#if defined(__x86_64__)
extern "C" void emu_switch(void **save_sp, void *new_sp);
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch, .-emu_switch\n");
struct context {
  void *sp;
};
/* A fresh stack whose first switch "returns" into entry(), aligned as after a call. */
void context_init(context *c, char *stack, size_t bytes, void (*entry)(void)) {
  uintptr_t top = ((uintptr_t)stack + bytes) & ~(uintptr_t)15;
  void **sp = (void **)top;
  *--sp = nullptr;          /* entry's return address: it never returns */
  *--sp = (void *)entry;    /* popped by emu_switch's ret */
  for (int i = 0; i < 6; i++) *--sp = nullptr; /* rbp rbx r12 r13 r14 r15 */
  c->sp = sp;
}
void context_switch(context *from, context *to) { emu_switch(&from->sp, to->sp); }
#else
struct context {
  ucontext_t uc;
};
void context_init(context *c, char *stack, size_t bytes, void (*entry)(void)) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = bytes;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}
void context_switch(context *from, context *to) { swapcontext(&from->uc, &to->uc); }
#endif

struct warp_op {
  int kind;
  unsigned mask;
  uint32_t in[6]; /* shuffles/votes: in[0]; mma: a0..a3, b0, b1 */
  int arg;        /* shuffle lane, xor mask or delta */
  const void *ptr;
  uint32_t out[4];
  float acc[4];
  /* wgmma: the accumulators (the fiber's own registers), N, descriptors, flags */
  float *d;
  int n, accumulate, tb, rs;
  uint64_t da, db;
};

/* One issued wgmma of a warpgroup, computed when a wait retires its group. */
struct wg_mma {
  int n, accumulate, tb, rs;
  uint64_t da, db;
  float *d[128];
  uint32_t a[128][4];
};
struct wg_state {
  std::vector<wg_mma> open;
  std::vector<std::vector<wg_mma>> groups; /* committed, oldest first */
  bool fenced;
};

struct copy16 {
  void *dst;
  const void *src;
  bool pred;
};

/* An mbarrier (keyed by its shared-memory offset) and the TMA copies reporting to it. */
struct tma_copy {
  unsigned char *dst;
  fb_tmap map;
  int c[4];
};
struct mbar {
  int expected, pending;
  long long tx;
  unsigned phase; /* phases completed */
  std::vector<tma_copy> copies;
};

struct fiber {
  context ctx;
  emu_builtins b;
  int state;
  warp_op op;
  std::vector<copy16> open;               /* cp.async not yet committed */
  std::vector<std::vector<copy16>> groups; /* committed, oldest first */
  char *stack;
  void *fake_stack;
};

constexpr size_t STACK_BYTES = 512 * 1024;

struct launch_state {
  std::vector<fiber> f;
  context sched;
  const std::function<void()> *body;
  fiber *cur;
  void *sched_fake;
  const void *sched_bottom;
  size_t sched_size;
  dim3 block_id;
  emu_counts counts;
  std::vector<wg_state> wgs; /* the block's warpgroups */
  std::map<uint32_t, mbar> bars;
  bool progress; /* a thread did more than spin this round */
  uint64_t tma_rng; /* when each TMA copy lands: at issue or at the next wait (seeded) */
  size_t smem_bytes;
};
launch_state *g;
emu_counts g_last;

[[noreturn]] void die(const char *what, int warp, unsigned lanes) {
  fprintf(stderr, "cuda_emu: block (%u,%u,%u) warp %d lanes 0x%08x: %s\n", g->block_id.x,
          g->block_id.y, g->block_id.z, warp, lanes, what);
  abort();
}

/* ---- switching ---------------------------------------------------------------------------- */
void to_scheduler(fiber *f) {
  if (f->state != F_SPIN) g->progress = true;
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(f->state == F_DONE ? nullptr : &f->fake_stack,
                                 g->sched_bottom, g->sched_size);
#endif
  context_switch(&f->ctx, &g->sched);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, nullptr, nullptr);
#endif
}

void resume(fiber *f) {
  g->cur = f;
  emu_cur = &f->b;
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(&g->sched_fake, f->stack, STACK_BYTES);
#endif
  context_switch(&g->sched, &f->ctx);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(g->sched_fake, nullptr, nullptr);
#endif
}

void fiber_entry(void) {
  fiber *f = g->cur;
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g->sched_bottom, &g->sched_size);
#endif
  (*g->body)();
  f->state = F_DONE;
  to_scheduler(f);
  abort(); /* a finished fiber is never resumed */
}

/* The calling fiber waits at a collective; returns once it executed. */
warp_op &arrive(int kind, unsigned mask) {
  fiber *f = g->cur;
  f->op.kind = kind;
  f->op.mask = mask;
  f->state = F_WARP;
  to_scheduler(f);
  return f->op;
}

/* ---- collectives -------------------------------------------------------------------------- */
float bf(uint32_t h) {
  uint32_t u = (h & 0xffffu) << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

void exec_ldsm(fiber *l, bool trans) {
  uint16_t m[4][8][8];
  for (int i = 0; i < 32; i++) {
    const uintptr_t p = (uintptr_t)l[i].op.ptr;
    if (p % 16) die("ldmatrix row address not 16-byte aligned", -1, 1u << i);
    memcpy(m[i / 8][i % 8], l[i].op.ptr, 16);
  }
  for (int i = 0; i < 32; i++)
    for (int r = 0; r < 4; r++) {
      const int a = i / 4, c = 2 * (i % 4);
      const uint16_t lo = trans ? m[r][c][a] : m[r][a][c];
      const uint16_t hi = trans ? m[r][c + 1][a] : m[r][a][c + 1];
      l[i].op.out[r] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}

void exec_mma(fiber *l) {
  float A[16][16], B[16][8], C[16][8];
  for (int i = 0; i < 32; i++) {
    const int gid = i / 4, t = i % 4;
    const uint32_t *a = l[i].op.in;
    for (int h = 0; h < 2; h++) {
      A[gid][2 * t + h] = bf(a[0] >> (16 * h));
      A[gid + 8][2 * t + h] = bf(a[1] >> (16 * h));
      A[gid][2 * t + 8 + h] = bf(a[2] >> (16 * h));
      A[gid + 8][2 * t + 8 + h] = bf(a[3] >> (16 * h));
      B[2 * t + h][gid] = bf(a[4] >> (16 * h));
      B[2 * t + 8 + h][gid] = bf(a[5] >> (16 * h));
    }
    C[gid][2 * t] = l[i].op.acc[0];
    C[gid][2 * t + 1] = l[i].op.acc[1];
    C[gid + 8][2 * t] = l[i].op.acc[2];
    C[gid + 8][2 * t + 1] = l[i].op.acc[3];
  }
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 8; c++) {
      float s = C[r][c];
      for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
      C[r][c] = s;
    }
  for (int i = 0; i < 32; i++) {
    const int gid = i / 4, t = i % 4;
    l[i].op.acc[0] = C[gid][2 * t];
    l[i].op.acc[1] = C[gid][2 * t + 1];
    l[i].op.acc[2] = C[gid + 8][2 * t];
    l[i].op.acc[3] = C[gid + 8][2 * t + 1];
  }
}

void exec_lanes(fiber *l, unsigned mask, int kind) {
  uint32_t red = kind == OP_RED_MIN ? 0xffffffffu : 0, ballot = 0;
  for (int i = 0; i < 32; i++) {
    if (!(mask >> i & 1)) continue;
    const uint32_t v = l[i].op.in[0];
    if (kind == OP_RED_MAX) red = v > red ? v : red;
    if (kind == OP_RED_MIN) red = v < red ? v : red;
    if (kind == OP_RED_ADD) red += v;
    if (v) ballot |= 1u << i;
  }
  uint32_t vals[32];
  for (int i = 0; i < 32; i++) vals[i] = l[i].op.in[0];
  for (int i = 0; i < 32; i++) {
    if (!(mask >> i & 1)) continue;
    warp_op &o = l[i].op;
    int src = i;
    if (kind == OP_SHFL_XOR) src = i ^ o.arg;
    if (kind == OP_SHFL_IDX) src = o.arg & 31;
    if (kind == OP_SHFL_DOWN) src = i + o.arg < 32 ? i + o.arg : i;
    if (kind <= OP_SHFL_DOWN && !(mask >> src & 1)) die("shuffle reads a lane outside its mask", -1, mask);
    o.out[0] = kind <= OP_SHFL_DOWN ? vals[src]
               : kind <= OP_RED_ADD ? red
               : kind == OP_BALLOT  ? ballot
               : kind == OP_ANY     ? (ballot != 0)
               : kind == OP_ALL     ? (ballot == mask)
                                    : 0;
  }
  g->counts.shfl += kind <= OP_SHFL_DOWN;
}

/* Executes the collectives of warp w whose lanes have all arrived; true if any ran. */
bool step_warp(fiber *l, int nlanes, int w) {
  bool ran = false;
  for (int i = 0; i < nlanes; i++) {
    if (l[i].state != F_WARP) continue;
    const unsigned mask = l[i].op.mask;
    const int kind = l[i].op.kind;
    if (kind >= OP_WGMMA) continue; /* warpgroup collectives: step_warpgroup */
    const bool aligned = kind == OP_LDSM || kind == OP_LDSM_T || kind == OP_MMA;
    if (!(mask >> i & 1)) die("a lane's collective mask does not name the lane", w, mask);
    if (aligned && mask != 0xffffffffu) die("ldmatrix/mma with a partial mask", w, mask);
    bool ready = true;
    for (int j = 0; j < 32; j++) {
      if (!(mask >> j & 1)) continue;
      if (j >= nlanes || l[j].state == F_DONE) die("a lane of the mask has exited", w, mask);
      if (l[j].state == F_BAR) die("lanes of one mask at __syncthreads and a collective", w, mask);
      if (l[j].state == F_RUN || l[j].state == F_SPIN) { ready = false; break; }
      if (l[j].op.kind != kind || l[j].op.mask != mask) {
        char msg[96];
        snprintf(msg, sizeof msg, "lanes at different collectives (%s, %s)", op_names[kind],
                 op_names[l[j].op.kind]);
        die(msg, w, mask);
      }
    }
    if (!ready) continue;
    if (kind == OP_MMA) exec_mma(l), g->counts.mma++;
    else if (kind == OP_LDSM || kind == OP_LDSM_T) exec_ldsm(l, kind == OP_LDSM_T), g->counts.ldsm++;
    else exec_lanes(l, mask, kind);
    for (int j = 0; j < 32; j++)
      if (mask >> j & 1) l[j].state = F_RUN;
    ran = true;
  }
  return ran;
}

/* ---- warpgroup MMA ------------------------------------------------------------------------ */
/* The byte in shared memory of element (row r, column k) of a K-major operand, or of
 * (k, column nn) of an N-major one, per the descriptor: 128-byte swizzle only. */
struct desc {
  uint32_t start, lbo, sbo;
};
desc decode(uint64_t d, int w) {
  if ((d >> 62) != 1) die("wgmma descriptor: only the 128-byte swizzle is emulated", w, 0);
  if ((d >> 49 & 7) != 0) die("wgmma descriptor: a nonzero base offset is not emulated", w, 0);
  return desc{(uint32_t)(d & 0x3fff) << 4, (uint32_t)(d >> 16 & 0x3fff) << 4,
               (uint32_t)(d >> 32 & 0x3fff) << 4};
}
float smem_bf16(uint32_t addr, int w) {
  addr ^= ((addr >> 7) & 7) << 4; /* the 128-byte swizzle */
  if ((size_t)addr + 2 > g->smem_bytes) die("wgmma reads past the block's shared memory", w, 0);
  uint16_t h;
  memcpy(&h, g->f[0].b.smem + addr, 2);
  return bf(h);
}
float k_major(const desc &d, int r, int k, int w) { /* ((8,m),(8,2)):((128B,SBO),(2B,16B)) */
  return smem_bf16(d.start + (uint32_t)(r / 8) * d.sbo + (uint32_t)(r % 8) * 128 + 2u * k, w);
}
float n_major(const desc &d, int k, int nn, int w) { /* ((64,m),(8,k)):((2B,LBO),(128B,SBO)) */
  return smem_bf16(d.start + (uint32_t)(nn / 64) * d.lbo + 2u * (nn % 64) +
                       (uint32_t)(k / 8) * d.sbo + (uint32_t)(k % 8) * 128, w);
}

void exec_wgmma(const wg_mma &op, int wg) {
  static float A[64][16], B[16][256];
  const int N = op.n;
  if (op.rs) {
    for (int t = 0; t < 128; t++) {
      const int r = 16 * (t / 32) + (t % 32) / 4, c = 2 * (t % 4);
      for (int h = 0; h < 2; h++) {
        A[r][c + h] = bf(op.a[t][0] >> (16 * h));
        A[r + 8][c + h] = bf(op.a[t][1] >> (16 * h));
        A[r][c + 8 + h] = bf(op.a[t][2] >> (16 * h));
        A[r + 8][c + 8 + h] = bf(op.a[t][3] >> (16 * h));
      }
    }
  } else {
    const desc da = decode(op.da, 4 * wg);
    for (int r = 0; r < 64; r++)
      for (int k = 0; k < 16; k++) A[r][k] = k_major(da, r, k, 4 * wg);
  }
  const desc db = decode(op.db, 4 * wg);
  for (int k = 0; k < 16; k++)
    for (int nn = 0; nn < N; nn++)
      B[k][nn] = op.tb ? n_major(db, k, nn, 4 * wg) : k_major(db, nn, k, 4 * wg);
  for (int t = 0; t < 128; t++) {
    const int r0 = 16 * (t / 32) + (t % 32) / 4, c0 = 2 * (t % 4);
    for (int i = 0; i < N / 8; i++)
      for (int e = 0; e < 4; e++) {
        const int r = r0 + 8 * (e >> 1), c = 8 * i + c0 + (e & 1);
        float acc = op.accumulate ? op.d[t][4 * i + e] : 0.0f;
        for (int k = 0; k < 16; k++) acc += A[r][k] * B[k][c];
        op.d[t][4 * i + e] = acc;
      }
  }
}

/* Executes the collective warpgroup wg's 128 threads all wait at; true if it ran. */
bool step_warpgroup(fiber *l, int wg) {
  int kind = -1;
  for (int i = 0; i < 128; i++) {
    if (l[i].state == F_RUN || l[i].state == F_SPIN) return false;
    if (l[i].state == F_WARP && l[i].op.kind < OP_WGMMA) return false; /* a warp op first */
    if (l[i].state != F_WARP) {
      for (int j = 0; j < 128; j++)
        if (l[j].state == F_WARP && l[j].op.kind >= OP_WGMMA)
          die("a warpgroup collective with threads of the warpgroup exited or at a barrier",
              4 * wg + i / 32, 0);
      return false;
    }
    if (kind < 0) kind = l[i].op.kind;
    if (l[i].op.kind != kind) die("warpgroup threads at different wgmma calls", 4 * wg + i / 32, 0);
  }
  const warp_op &o = l[0].op;
  wg_state &st = g->wgs[(size_t)wg];
  for (int i = 1; i < 128; i++) {
    const warp_op &x = l[i].op;
    if (x.arg != o.arg || x.n != o.n || x.accumulate != o.accumulate || x.tb != o.tb ||
        x.rs != o.rs || x.da != o.da || x.db != o.db)
      die("warpgroup threads at one wgmma call with different operands", 4 * wg + i / 32, 0);
  }
  if (kind == OP_WG_FENCE) st.fenced = true;
  if (kind == OP_WGMMA) {
    if (!st.fenced) die("wgmma without a wgmma.fence since the warpgroup's last wait", 4 * wg, 0);
    wg_mma m;
    m.n = o.n, m.accumulate = o.accumulate, m.tb = o.tb, m.rs = o.rs, m.da = o.da, m.db = o.db;
    for (int i = 0; i < 128; i++) {
      m.d[i] = l[i].op.d;
      memcpy(m.a[i], l[i].op.in, sizeof m.a[i]);
    }
    st.open.push_back(m);
    g->counts.wgmma++;
  }
  if (kind == OP_WG_COMMIT) {
    st.groups.push_back(st.open);
    st.open.clear();
  }
  if (kind == OP_WG_WAIT) {
    while ((int)st.groups.size() > o.arg) {
      for (const wg_mma &m : st.groups.front()) exec_wgmma(m, wg);
      st.groups.erase(st.groups.begin());
    }
    st.fenced = false;
  }
  for (int i = 0; i < 128; i++) l[i].state = F_RUN;
  return true;
}

/* After a round: run what can run; false if nothing can (a deadlock). */
bool settle(int n) {
  bool ran = false;
  for (int w = 0; w * 32 < n; w++) ran |= step_warp(&g->f[w * 32], n - w * 32 < 32 ? n - w * 32 : 32, w);
  for (int w = 0; w * 128 < n; w++) {
    bool any = false;
    for (int i = w * 128; i < n && i < w * 128 + 128; i++)
      any |= g->f[i].state == F_WARP && g->f[i].op.kind >= OP_WGMMA;
    if (!any) continue;
    if (n < w * 128 + 128) die("a warpgroup collective in a block without whole warpgroups", 4 * w, 0);
    ran |= step_warpgroup(&g->f[(size_t)w * 128], w);
  }
  bool spin = false; /* threads that yielded in mbar_wait try again next round */
  for (int i = 0; i < n; i++)
    if (g->f[i].state == F_SPIN) g->f[i].state = F_RUN, spin = true;
  if (ran) return true;
  int bar = 0, live = 0;
  for (int i = 0; i < n; i++) {
    live += g->f[i].state != F_DONE;
    bar += g->f[i].state == F_BAR;
  }
  if (live == 0) return true;
  if (bar == live) {
    for (int i = 0; i < n; i++)
      if (g->f[i].state == F_BAR) g->f[i].state = F_RUN;
    g->counts.barriers++;
    return true;
  }
  return spin && g->progress; /* a round in which every thread only spun changes nothing */
}

/* On a deadlock: where each thread stopped (runs of equal states), and the mbarriers. */
void dump_block(int n) {
  static const char *const st[] = {"running", "at a collective", "at a barrier", "exited",
                                   "spinning"};
  for (int i = 0; i < n;) {
    int j = i;
    while (j < n && g->f[j].state == g->f[i].state &&
           (g->f[i].state != F_WARP || g->f[j].op.kind == g->f[i].op.kind))
      j++;
    fprintf(stderr, "cuda_emu:   threads %d-%d %s%s%s\n", i, j - 1, st[g->f[i].state],
            g->f[i].state == F_WARP ? " " : "", g->f[i].state == F_WARP ? op_names[g->f[i].op.kind] : "");
    i = j;
  }
  for (const auto &kv : g->bars)
    fprintf(stderr, "cuda_emu:   mbarrier at %u: %d of %d arrivals pending, %lld bytes, %u phases done\n",
            kv.first, kv.second.pending, kv.second.expected, kv.second.tx, kv.second.phase);
}

void run_block(dim3 grid, dim3 block, dim3 bid, std::vector<unsigned char> &smem,
               std::mt19937 &rng) {
  const int n = (int)(block.x * block.y * block.z);
  g->block_id = bid;
  memset(smem.data(), 0xff, smem.size()); /* bf16 NaN: reading unwritten shared memory shows */
  for (int i = 0; i < n; i++) {
    fiber &f = g->f[i];
    f.b.tid = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
    f.b.bid = bid;
    f.b.bdim = block;
    f.b.gdim = grid;
    f.b.smem = smem.data();
    f.state = F_RUN;
    f.open.clear();
    f.groups.clear();
    f.fake_stack = nullptr;
    context_init(&f.ctx, f.stack, STACK_BYTES, fiber_entry);
  }
  g->wgs.assign((size_t)(n + 127) / 128, wg_state{});
  g->bars.clear();
  std::vector<int> order((size_t)n);
  std::iota(order.begin(), order.end(), 0);
  const int nwg = n / 128;
  int stall_wg = -1, stall_left = 0;
  for (;;) {
    g->progress = false;
    std::shuffle(order.begin(), order.end(), rng);
    if (stall_left == 0 && nwg > 1 && rng() % 8 == 0) /* hold one warpgroup back a while */
      stall_wg = (int)(rng() % (unsigned)nwg), stall_left = 1 + (int)(rng() % 256);
    bool held = false; /* threads that could run but were held back */
    for (int i : order) {
      if (g->f[i].state != F_RUN) continue;
      if (stall_left > 0 && i / 128 == stall_wg) held = true;
      else resume(&g->f[i]);
    }
    if (stall_left > 0) stall_left--;
    bool done = true;
    for (int i = 0; i < n; i++) done &= g->f[i].state == F_DONE;
    if (done) break;
    if (!settle(n) && !held) {
      dump_block(n);
      die("deadlock: threads wait at collectives or a barrier that cannot complete", -1, 0);
    }
  }
  for (const wg_state &w : g->wgs)
    if (!w.open.empty() || !w.groups.empty())
      die("the block exits with wgmma issued and not waited for", -1, 0);
}

} /* namespace */

/* ---- the kernel-side calls ------------------------------------------------------------------ */
void __syncthreads(void) {
  g->cur->state = F_BAR;
  to_scheduler(g->cur);
}
void __syncwarp(unsigned mask) { arrive(OP_SYNCWARP, mask); }

static uint32_t lane_op(int kind, unsigned mask, uint32_t v, int arg) {
  fiber *f = g->cur;
  f->op.in[0] = v;
  f->op.arg = arg;
  return arrive(kind, mask).out[0];
}
static uint32_t fbits(float v) { uint32_t u; memcpy(&u, &v, 4); return u; }
static float bitsf(uint32_t u) { float v; memcpy(&v, &u, 4); return v; }

float __shfl_xor_sync(unsigned m, float v, int x, int w) { if (w != 32) abort(); return bitsf(lane_op(OP_SHFL_XOR, m, fbits(v), x)); }
int __shfl_xor_sync(unsigned m, int v, int x, int w) { if (w != 32) abort(); return (int)lane_op(OP_SHFL_XOR, m, (uint32_t)v, x); }
unsigned __shfl_xor_sync(unsigned m, unsigned v, int x, int w) { if (w != 32) abort(); return lane_op(OP_SHFL_XOR, m, v, x); }
float __shfl_sync(unsigned m, float v, int s, int w) { if (w != 32) abort(); return bitsf(lane_op(OP_SHFL_IDX, m, fbits(v), s)); }
int __shfl_sync(unsigned m, int v, int s, int w) { if (w != 32) abort(); return (int)lane_op(OP_SHFL_IDX, m, (uint32_t)v, s); }
unsigned __shfl_sync(unsigned m, unsigned v, int s, int w) { if (w != 32) abort(); return lane_op(OP_SHFL_IDX, m, v, s); }
float __shfl_down_sync(unsigned m, float v, unsigned d, int w) { if (w != 32) abort(); return bitsf(lane_op(OP_SHFL_DOWN, m, fbits(v), (int)d)); }
unsigned __reduce_max_sync(unsigned m, unsigned v) { return lane_op(OP_RED_MAX, m, v, 0); }
unsigned __reduce_min_sync(unsigned m, unsigned v) { return lane_op(OP_RED_MIN, m, v, 0); }
unsigned __reduce_add_sync(unsigned m, unsigned v) { return lane_op(OP_RED_ADD, m, v, 0); }
unsigned __ballot_sync(unsigned m, int p) { return lane_op(OP_BALLOT, m, p != 0, 0); }
int __any_sync(unsigned m, int p) { return (int)lane_op(OP_ANY, m, p != 0, 0); }
int __all_sync(unsigned m, int p) { return (int)lane_op(OP_ALL, m, p != 0, 0); }

void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  fiber *f = g->cur;
  memcpy(f->op.in, a, sizeof a);
  f->op.in[4] = b0;
  f->op.in[5] = b1;
  memcpy(f->op.acc, d, sizeof d);
  memcpy(d, arrive(OP_MMA, 0xffffffffu).acc, sizeof d);
}
void ldsm_x4(uint32_t (&r)[4], const void *p) {
  g->cur->op.ptr = p;
  memcpy(r, arrive(OP_LDSM, 0xffffffffu).out, sizeof r);
}
void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
  g->cur->op.ptr = p;
  memcpy(r, arrive(OP_LDSM_T, 0xffffffffu).out, sizeof r);
}

void cp_async16(void *dst, const void *src, bool pred) {
  if ((uintptr_t)dst % 16 || (pred && (uintptr_t)src % 16))
    die("cp.async with an address not 16-byte aligned", (int)(threadIdx.x / 32), 0);
  g->cur->open.push_back(copy16{dst, src, pred});
  g->counts.cp_async++;
}
void cp_async_commit(void) {
  fiber *f = g->cur;
  f->groups.push_back(f->open);
  f->open.clear();
}
void emu_cp_async_wait(int n) {
  fiber *f = g->cur;
  while ((int)f->groups.size() > n) {
    for (const copy16 &c : f->groups.front()) {
      if (c.pred) memcpy(c.dst, c.src, 16);
      else memset(c.dst, 0, 16);
    }
    f->groups.erase(f->groups.begin());
  }
}

/* ---- TMA and mbarriers ---------------------------------------------------------------------- */
static mbar &bar_of(uint64_t *bar, const char *what) {
  const uint32_t off = smem_addr(bar);
  auto it = g->bars.find(off);
  if (off % 8 || it == g->bars.end()) die(what, (int)(threadIdx.x / 32), 0);
  return it->second;
}
static void bar_check(mbar &b) {
  if (b.pending == 0 && b.tx == 0) b.phase++, b.pending = b.expected;
}
static long long tma_bytes(const tma_copy &c) {
  return (long long)c.map.box[0] * c.map.box[1] * c.map.box[2] * c.map.box[3] *
         (long long)c.map.stride[0];
}
static void tma_do(const tma_copy &c) {
  const fb_tmap &m = c.map;
  const uint32_t es = (uint32_t)m.stride[0], base = smem_addr(c.dst);
  uint32_t i = 0;
  for (uint32_t i3 = 0; i3 < m.box[3]; i3++)
    for (uint32_t i2 = 0; i2 < m.box[2]; i2++)
      for (uint32_t i1 = 0; i1 < m.box[1]; i1++)
        for (uint32_t i0 = 0; i0 < m.box[0]; i0++, i++) {
          const int64_t x[4] = {c.c[0] + (int64_t)i0, c.c[1] + (int64_t)i1,
                                c.c[2] + (int64_t)i2, c.c[3] + (int64_t)i3};
          bool in = true;
          int64_t src = 0;
          for (int d = 0; d < 4; d++) {
            in &= x[d] >= 0 && x[d] < (int64_t)m.dim[d];
            src += x[d] * (int64_t)m.stride[d];
          }
          uint32_t a = base + i * es;
          if (m.swizzle128) a ^= ((a >> 7) & 7) << 4;
          if ((size_t)a + es > g->smem_bytes) die("TMA writes past the block's shared memory", -1, 0);
          unsigned char *d = g->f[0].b.smem + a;
          if (in) memcpy(d, (const unsigned char *)m.base + src, es);
          else memset(d, 0, es);
        }
}
void tma_load_4d(void *dst, const fb_tmap *map, int c0, int c1, int c2, int c3, uint64_t *bar) {
  const int w = (int)(threadIdx.x / 32);
  if (map->swizzle128 && (map->box[0] * map->stride[0] != 128 || smem_addr(dst) % 1024))
    die("TMA: only 128-byte box rows into 1024-byte aligned tiles are emulated (swizzle)", w, 0);
  mbar &b = bar_of(bar, "TMA reports to an address that is no initialized mbarrier");
  const tma_copy c{(unsigned char *)dst, *map, {c0, c1, c2, c3}};
  g->counts.tma++;
  g->tma_rng = g->tma_rng * 6364136223846793005ull + 1442695040888963407ull;
  if (g->tma_rng >> 63) { /* lands at once: overwriting a tile still in use shows */
    tma_do(c);
    b.tx -= tma_bytes(c);
    bar_check(b);
  } else { /* lands at the next wait: reading a tile before waiting for it shows */
    b.copies.push_back(c);
  }
}
void mbar_init(uint64_t *bar, int n) {
  if (smem_addr(bar) % 8 || n <= 0) die("mbarrier.init: misaligned or a count below 1", -1, 0);
  g->bars[smem_addr(bar)] = mbar{n, n, 0, 0, {}};
}
void mbar_arrive(uint64_t *bar) {
  mbar &b = bar_of(bar, "mbarrier.arrive on no initialized mbarrier");
  if (b.pending <= 0) die("mbarrier.arrive past the expected count", (int)(threadIdx.x / 32), 0);
  b.pending--;
  bar_check(b);
}
void mbar_arrive_tx(uint64_t *bar, int bytes) {
  mbar &b = bar_of(bar, "mbarrier.arrive.expect_tx on no initialized mbarrier");
  b.tx += bytes;
  mbar_arrive(bar);
}
void mbar_wait(uint64_t *bar, int parity) {
  for (;;) {
    mbar &b = bar_of(bar, "mbarrier.try_wait on no initialized mbarrier");
    const std::vector<tma_copy> copies = std::move(b.copies);
    b.copies.clear();
    for (const tma_copy &c : copies) {
      tma_do(c);
      b.tx -= tma_bytes(c);
    }
    if (!copies.empty()) bar_check(b);
    if ((int)(b.phase & 1) != parity) return; /* the phase of this parity has completed */
    g->cur->state = F_SPIN;
    to_scheduler(g->cur);
  }
}

void emu_wgmma(float *d, int n, const uint32_t *a, uint64_t da, uint64_t db, int acc, int tb) {
  fiber *f = g->cur;
  if (n % 8 || n < 8 || n > 256) die("wgmma with N not a multiple of 8 in 8..256", -1, 0);
  f->op.d = d, f->op.n = n, f->op.accumulate = acc != 0, f->op.tb = tb, f->op.rs = a != nullptr;
  f->op.da = da, f->op.db = db, f->op.arg = 0;
  if (a) memcpy(f->op.in, a, 16);
  arrive(OP_WGMMA, 0xffffffffu);
}
static void wg_simple(int kind, int arg) {
  fiber *f = g->cur;
  f->op.d = nullptr, f->op.n = 0, f->op.accumulate = 0, f->op.tb = 0, f->op.rs = 0;
  f->op.da = f->op.db = 0, f->op.arg = arg;
  arrive(kind, 0xffffffffu);
}
void wgmma_fence(void) { wg_simple(OP_WG_FENCE, 0); }
void wgmma_commit(void) { wg_simple(OP_WG_COMMIT, 0); }
void emu_wgmma_wait(int n) { wg_simple(OP_WG_WAIT, n); }

uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r = 0;
  for (int h = 0; h < 2; h++) {
    uint32_t u = fbits(h ? hi : lo), b;
    if ((u & 0x7fffffffu) > 0x7f800000u) b = (u >> 16) | 0x40u; /* NaN stays NaN */
    else b = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    r |= (b & 0xffffu) << (16 * h);
  }
  return r;
}

/* ---- the launch -------------------------------------------------------------------------- */
void emu_launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &body,
                emu_launch_opts opts) {
  launch_state st;
  const size_t n = (size_t)block.x * block.y * block.z;
  if (n == 0 || n > 1024) { fprintf(stderr, "cuda_emu: bad block size %zu\n", n); abort(); }
  static std::vector<char> stacks; /* kept across launches: faulting in fresh stacks costs */
  if (stacks.size() < n * STACK_BYTES) stacks.resize(n * STACK_BYTES);
  st.f.resize(n);
  for (size_t i = 0; i < n; i++) st.f[i].stack = stacks.data() + i * STACK_BYTES;
  st.body = &body;
  st.counts = emu_counts{};
  st.sched_bottom = nullptr;
  st.sched_size = 0;
  st.smem_bytes = smem_bytes;
  st.tma_rng = opts.seed * 0x9e3779b97f4a7c15ull + 1;
  g = &st;
  std::vector<unsigned char> smem(smem_bytes ? (smem_bytes + 15) / 16 * 16 : 16);
  std::vector<dim3> blocks;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) blocks.push_back(dim3(x, y, z));
  std::mt19937 rng(opts.seed);
  if (opts.order == 1) std::reverse(blocks.begin(), blocks.end());
  if (opts.order == 2) std::shuffle(blocks.begin(), blocks.end(), rng);
  for (const dim3 &b : blocks) run_block(grid, block, b, smem, rng);
  g_last = st.counts;
  g = nullptr;
  emu_cur = nullptr;
}

emu_counts emu_last_counts(void) { return g_last; }
