// Experiment 1 toward the Hopper family (dev/sm90, outside the library): the forward pass of
// Algorithm 1 on wgmma, with the tiles still staged by cp.async and no warp specialization.
// It answers two questions before the production kernel is written: are the descriptors and
// the register layouts right (checked against a float32 reference on awkward shapes), and how
// much of the gap to cuDNN does wgmma alone close (timed on the leaderboard problem).
//
// Block: two warpgroups, each owning 64 query rows of a 128-row tile Q_i; key tiles of 128.
// Per key tile j (last to first, so the tiles that need a mask come first):
//   S = Q_i K_j^T        wgmma m64n128k16, A and B from shared memory (both K-major)
//   m, P~, l, rescale    Alg. 1 lines 10-13 in registers, log2 domain (scale * log2 e folded)
//   O += P~ V_j          wgmma m64n{d}k16, A = P~ from registers, B = V_j (MN-major)
// K_{j-1}, V_{j-1} are fetched into the other stage while tile j is computed.
//
// Build (here or there): nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
//   -Xptxas -v dev/sm90/fwd_wgmma.cu -o fwd_wgmma
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "wgmma.cuh"

namespace flashref::dev::sm90 {

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

struct Tensor4 {  // (B, S, H, d) with element strides; d contiguous
  void* ptr = nullptr;
  int64_t batch_stride = 0, row_stride = 0, head_stride = 0;
};

struct FwdArgs {
  Tensor4 q, k, v, o;
  float* lse = nullptr;  // (B, H, S_q)
  int B = 1, H = 1, H_kv = 1, group = 1, S_q = 1, S_k = 1;
  float scale_log2 = 1.0f;
  int causal = 0, causal_offset = 0;
};

template <typename Element, int kD_>
struct FwdWgmmaTraits {
  static constexpr int kD = kD_;
  static constexpr int kBlockM = 128;  // two warpgroups of 64 rows
  static constexpr int kBlockN = 128;
  static constexpr int kThreads = 256;
  static constexpr int kColBlocks = kD / 64;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kKVBytes = kBlockN * kD * 2;
  // Q, then two stages of (K, V); 1024 bytes of slack to align the base for the swizzle.
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes + 1024;
  static_assert(kD % 64 == 0, "this experiment covers d = 64 and 128");
};

template <typename Element>
__device__ __forceinline__ const Element* row_ptr(const Tensor4& t, int b, int row, int h) {
  return static_cast<const Element*>(t.ptr) + b * t.batch_stride +
         static_cast<int64_t>(row) * t.row_stride + h * t.head_stride;
}

// All threads of the block copy an R x kD tile into kD / 64 swizzled column blocks; rows at or
// past rows_valid are zero-filled (a partial last tile).
template <int R, int kD, int kThreads, typename Element>
__device__ __forceinline__ void load_tile(uint32_t dst, const Element* src, int64_t row_stride,
                                          int rows_valid, int tid) {
  constexpr int kChunksPerRow = kD / 8;
#pragma unroll
  for (int idx = tid; idx < R * kChunksPerRow; idx += kThreads) {
    const int r = idx / kChunksPerRow, cc = idx % kChunksPerRow;
    const bool pred = r < rows_valid;
    const Element* s = pred ? src + r * row_stride + cc * 8 : src;
    cp_async_16(dst + (cc / 8) * (R * 128) + swizzled_chunk(r, cc % 8), s, pred);
  }
}

template <typename Element, int kD>
__global__ void __launch_bounds__(256, 1) fwd_wgmma_kernel(const FwdArgs args) {
  using T = FwdWgmmaTraits<Element, kD>;
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kThreads = T::kThreads;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t sQ = base;
  auto sK = [&](int stage) { return base + T::kQBytes + stage * 2 * T::kKVBytes; };
  auto sV = [&](int stage) { return sK(stage) + T::kKVBytes; };

  const int tid = threadIdx.x, wg = tid / 128, warp_in_wg = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  const int bh_count = args.B * args.H;
  const int m_block = static_cast<int>(gridDim.x / bh_count) - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = (blockIdx.x % bh_count) / args.H, h = (blockIdx.x % bh_count) % args.H;
  const int h_kv = h / args.group;
  const int row0 = m_block * kBlockM;
  const int rows_valid = min(kBlockM, args.S_q - row0);

  int n_end = (args.S_k + kBlockN - 1) / kBlockN;
  if (args.causal) {
    const int64_t last_key = static_cast<int64_t>(row0 + rows_valid - 1) + args.causal_offset;
    n_end = last_key < 0 ? 0 : static_cast<int>(min(static_cast<int64_t>(n_end), last_key / kBlockN + 1));
  }

  // Rows of this thread: r_lo and r_lo + 8 inside the tile.
  const int r_lo = wg * 64 + warp_in_wg * 16 + g;
  Element* o_base = static_cast<Element*>(args.o.ptr) + b * args.o.batch_stride + h * args.o.head_stride;
  float* lse_rows = args.lse + (static_cast<int64_t>(b) * args.H + h) * args.S_q;

  if (n_end == 0) {  // no row of the tile sees a key: O = 0, L = -inf
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = row0 + r_lo + hf * 8;
      if (row >= args.S_q) continue;
      for (int c = 2 * t; c < kD; c += 8)
        *reinterpret_cast<uint32_t*>(o_base + static_cast<int64_t>(row) * args.o.row_stride + c) = 0u;
      if (t == 0) lse_rows[row] = -INFINITY;
    }
    return;
  }

  const Element* q_tile = row_ptr<Element>(args.q, b, row0, h);
  const Element* k_head = row_ptr<Element>(args.k, b, 0, h_kv);
  const Element* v_head = row_ptr<Element>(args.v, b, 0, h_kv);

  // Alg. 1 line 5 (and line 8 for the first key tile).
  load_tile<kBlockM, kD, kThreads>(sQ, q_tile, args.q.row_stride, rows_valid, tid);
  {
    const int n0 = (n_end - 1) * kBlockN;
    load_tile<kBlockN, kD, kThreads>(sK(0), k_head + n0 * args.k.row_stride, args.k.row_stride,
                                     args.S_k - n0, tid);
    load_tile<kBlockN, kD, kThreads>(sV(0), v_head + n0 * args.v.row_stride, args.v.row_stride,
                                     args.S_k - n0, tid);
  }
  cp_async_commit();

  // Line 6: O = 0, l = 0, m = -inf.
  float acc_o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.0f;
  float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.0f, 0.0f};

  int stage = 0;
  for (int n = n_end - 1; n >= 0; --n, stage ^= 1) {
    const int n0 = n * kBlockN;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // K_j, V_j landed; every warpgroup is done with the other stage
    if (n > 0) {
      const int n0p = n0 - kBlockN;
      load_tile<kBlockN, kD, kThreads>(sK(stage ^ 1), k_head + n0p * args.k.row_stride,
                                       args.k.row_stride, args.S_k - n0p, tid);
      load_tile<kBlockN, kD, kThreads>(sV(stage ^ 1), v_head + n0p * args.v.row_stride,
                                       args.v.row_stride, args.S_k - n0p, tid);
      cp_async_commit();
    }

    // Line 9: S = Q_i K_j^T.
    float acc_s[kBlockN / 2];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t blk = ks / 4, kin = ks % 4;
      const uint64_t da = make_desc(sQ + blk * (kBlockM * 128) + wg * (64 * 128) + kin * 32, 16, 1024);
      const uint64_t db = make_desc(sK(stage) + blk * (kBlockN * 128) + kin * 32, 16, 1024);
      WgmmaSS<Element, kBlockN>::run(acc_s, da, db, ks > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_s);

    // Lines 10-12 (log2 domain), with -inf past S_k and above the diagonal.
    const bool needs_mask =
        n0 + kBlockN > args.S_k ||
        (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
    float alpha[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      int limit = args.S_k;
      if (needs_mask && args.causal) {
        const int64_t last = static_cast<int64_t>(row0 + r_lo + hf * 8) + args.causal_offset;
        limit = static_cast<int>(max(static_cast<int64_t>(0), min(static_cast<int64_t>(limit), last + 1)));
      }
      float mx = row_m[hf];
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& s = acc_s[4 * i + 2 * hf + c];
          s *= args.scale_log2;
          if (needs_mask && n0 + 8 * i + 2 * t + c >= limit) s = -INFINITY;
          mx = fmaxf(mx, s);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      const float base_m = mx == -INFINITY ? 0.0f : mx;  // a row with no key yet stays at 0
      alpha[hf] = fast_exp2(row_m[hf] - base_m);
      row_m[hf] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& s = acc_s[4 * i + 2 * hf + c];
          s = fast_exp2(s - base_m);
          sum += s;
        }
      row_l[hf] = alpha[hf] * row_l[hf] + sum;
    }
    // Line 13, first term: O = diag(exp(m_old - m)) O.
#pragma unroll
    for (int i = 0; i < kD / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * i + e] *= alpha[e / 2];

    // Line 13, second term: O += P~ V_j, P~ rounded to the input type straight from registers.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<Element>(acc_s[8 * kk + 0], acc_s[8 * kk + 1]);
      a[1] = pack2<Element>(acc_s[8 * kk + 2], acc_s[8 * kk + 3]);
      a[2] = pack2<Element>(acc_s[8 * kk + 4], acc_s[8 * kk + 5]);
      a[3] = pack2<Element>(acc_s[8 * kk + 6], acc_s[8 * kk + 7]);
      const uint64_t dv = make_desc(sV(stage) + kk * (16 * 128), kBlockN * 128, 1024);
      WgmmaRS<Element, kD>::run(acc_o, a, dv, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_o);
  }

  // Lines 15-16: O / l and L = ln 2 (m' + log2 l), written straight from registers.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = row_l[hf];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    const int row = row0 + r_lo + hf * 8;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    if (row < args.S_q) {
      Element* o_row = o_base + static_cast<int64_t>(row) * args.o.row_stride;
#pragma unroll
      for (int i = 0; i < kD / 8; ++i)
        *reinterpret_cast<uint32_t*>(o_row + 8 * i + 2 * t) =
            pack2<Element>(acc_o[4 * i + 2 * hf] * inv, acc_o[4 * i + 2 * hf + 1] * inv);
      if (t == 0) lse_rows[row] = l > 0.0f ? (row_m[hf] + __log2f(l)) * 0.69314718055994531f : -INFINITY;
    }
  }
}


// Experiment 2: the same math with the block split by role (FlashAttention-3's structure).
// Warpgroup 0 is the producer: one thread issues TMA loads of Q_i and of each stage's K_j, V_j,
// each completing on its stage's "full" mbarrier, after waiting for the stage's "empty"
// mbarrier. Warpgroups 1 and 2 are consumers of 64 query rows each; they wait on "full",
// compute, and arrive on "empty". setmaxnreg moves registers from the producer to the
// consumers. With kPingPong, named barriers make the two consumers take turns issuing their
// S = Q K^T product, so one warpgroup's softmax runs while the other's product does.
template <typename Element, int kD_, int kStages_, bool kPingPong_>
struct FwdWsTraits {
  static constexpr int kD = kD_, kStages = kStages_;
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kBlockM = 128, kBlockN = 128, kThreads = 384;
  static constexpr int kColBlocks = kD / 64;
  static constexpr int kQBytes = kBlockM * kD * 2, kKVBytes = kBlockN * kD * 2;
  static constexpr int kTileBytes = kQBytes + 2 * kStages * kKVBytes;
  static constexpr int kSmemBytes = kTileBytes + 1024 + 8 * (1 + 3 * kStages);
};

template <typename Element, int kD, int kStages, bool kPingPong>
__global__ void __launch_bounds__(384, 1)
    fwd_ws_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                  const __grid_constant__ CUtensorMap tmap_v, const FwdArgs args) {
  using T = FwdWsTraits<Element, kD, kStages, kPingPong>;
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t sQ = base;
  auto sK = [&](int st) { return base + T::kQBytes + st * 2 * T::kKVBytes; };
  auto sV = [&](int st) { return sK(st) + T::kKVBytes; };
  const uint32_t bar_q = base + T::kTileBytes;
  auto bar_k = [&](int st) { return bar_q + 8 * (1 + st); };
  auto bar_v = [&](int st) { return bar_q + 8 * (1 + kStages + st); };
  auto bar_empty = [&](int st) { return bar_q + 8 * (1 + 2 * kStages + st); };

  const int tid = threadIdx.x, wg = tid / 128;
  const int bh_count = args.B * args.H;
  const int m_block = static_cast<int>(gridDim.x / bh_count) - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = (blockIdx.x % bh_count) / args.H, h = (blockIdx.x % bh_count) % args.H;
  const int h_kv = h / args.group;
  const int row0 = m_block * kBlockM;
  const int rows_valid = min(kBlockM, args.S_q - row0);
  int n_end = (args.S_k + kBlockN - 1) / kBlockN;
  if (args.causal) {
    const int64_t last_key = static_cast<int64_t>(row0 + rows_valid - 1) + args.causal_offset;
    n_end = last_key < 0 ? 0 : static_cast<int>(min(static_cast<int64_t>(n_end), last_key / kBlockN + 1));
  }

  if (tid == 0) {
    mbar_init(bar_q, 1);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bar_k(st), 1);
      mbar_init(bar_v(st), 1);
      mbar_init(bar_empty(st), 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {  // the producer
    setmaxnreg_dec<40>();
    if (tid == 0 && n_end > 0) {
      mbar_expect_tx(bar_q, T::kQBytes);
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        tma_load_4d(sQ + cb * (kBlockM * 128), &tmap_q, bar_q, cb * 64, row0, h, b);
      int it = 0;
      for (int n = n_end - 1; n >= 0; --n, ++it) {
        const int st = it % kStages;
        const uint32_t phase = (it / kStages) & 1;
        mbar_wait(bar_empty(st), phase ^ 1);
        mbar_expect_tx(bar_k(st), T::kKVBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tma_load_4d(sK(st) + cb * (kBlockN * 128), &tmap_k, bar_k(st), cb * 64, n * kBlockN, h_kv, b);
        mbar_expect_tx(bar_v(st), T::kKVBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tma_load_4d(sV(st) + cb * (kBlockN * 128), &tmap_v, bar_v(st), cb * 64, n * kBlockN, h_kv, b);
      }
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int c = wg - 1, warp_in_wg = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r_lo = c * 64 + warp_in_wg * 16 + g;
  Element* o_base = static_cast<Element*>(args.o.ptr) + b * args.o.batch_stride + h * args.o.head_stride;
  float* lse_rows = args.lse + (static_cast<int64_t>(b) * args.H + h) * args.S_q;
  if (n_end == 0) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = row0 + r_lo + hf * 8;
      if (row >= args.S_q) continue;
      for (int col = 2 * t; col < kD; col += 8)
        *reinterpret_cast<uint32_t*>(o_base + static_cast<int64_t>(row) * args.o.row_stride + col) = 0u;
      if (t == 0) lse_rows[row] = -INFINITY;
    }
    return;
  }

  float acc_o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.0f;
  float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.0f, 0.0f};
  if constexpr (kPingPong) {
    if (c == 1) named_bar_arrive(1, 256);  // consumer 0 issues first
  }
  mbar_wait(bar_q, 0);

  int it = 0;
  for (int n = n_end - 1; n >= 0; --n, ++it) {
    const int n0 = n * kBlockN;
    const int st = it % kStages;
    const uint32_t phase = (it / kStages) & 1;
    mbar_wait(bar_k(st), phase);

    float acc_s[kBlockN / 2];
    if constexpr (kPingPong) named_bar_sync(1 + c, 256);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t blk = ks / 4, kin = ks % 4;
      const uint64_t da = make_desc(sQ + blk * (kBlockM * 128) + c * (64 * 128) + kin * 32, 16, 1024);
      const uint64_t db = make_desc(sK(st) + blk * (kBlockN * 128) + kin * 32, 16, 1024);
      WgmmaSS<Element, kBlockN>::run(acc_s, da, db, ks > 0 ? 1 : 0);
    }
    wgmma_commit();
    if constexpr (kPingPong) {
      if (!(c == 1 && n == 0)) named_bar_arrive(2 - c, 256);  // the other consumer's turn
    }
    wgmma_wait<0>();
    fence_regs(acc_s);

    const bool needs_mask =
        n0 + kBlockN > args.S_k ||
        (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
    float alpha[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      int limit = args.S_k;
      if (needs_mask && args.causal) {
        const int64_t last = static_cast<int64_t>(row0 + r_lo + hf * 8) + args.causal_offset;
        limit = static_cast<int>(max(static_cast<int64_t>(0), min(static_cast<int64_t>(limit), last + 1)));
      }
      float mx = row_m[hf];
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& s = acc_s[4 * i + 2 * hf + e];
          s *= args.scale_log2;
          if (needs_mask && n0 + 8 * i + 2 * t + e >= limit) s = -INFINITY;
          mx = fmaxf(mx, s);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      const float base_m = mx == -INFINITY ? 0.0f : mx;
      alpha[hf] = fast_exp2(row_m[hf] - base_m);
      row_m[hf] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& s = acc_s[4 * i + 2 * hf + e];
          s = fast_exp2(s - base_m);
          sum += s;
        }
      row_l[hf] = alpha[hf] * row_l[hf] + sum;
    }
#pragma unroll
    for (int i = 0; i < kD / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * i + e] *= alpha[e / 2];

    mbar_wait(bar_v(st), phase);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<Element>(acc_s[8 * kk + 0], acc_s[8 * kk + 1]);
      a[1] = pack2<Element>(acc_s[8 * kk + 2], acc_s[8 * kk + 3]);
      a[2] = pack2<Element>(acc_s[8 * kk + 4], acc_s[8 * kk + 5]);
      a[3] = pack2<Element>(acc_s[8 * kk + 6], acc_s[8 * kk + 7]);
      const uint64_t dv = make_desc(sV(st) + kk * (16 * 128), kBlockN * 128, 1024);
      WgmmaRS<Element, kD>::run(acc_o, a, dv, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_o);
    mbar_arrive(bar_empty(st));
  }

#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = row_l[hf];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    const int row = row0 + r_lo + hf * 8;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    if (row < args.S_q) {
      Element* o_row = o_base + static_cast<int64_t>(row) * args.o.row_stride;
#pragma unroll
      for (int i = 0; i < kD / 8; ++i)
        *reinterpret_cast<uint32_t*>(o_row + 8 * i + 2 * t) =
            pack2<Element>(acc_o[4 * i + 2 * hf] * inv, acc_o[4 * i + 2 * hf + 1] * inv);
      if (t == 0) lse_rows[row] = l > 0.0f ? (row_m[hf] + __log2f(l)) * 0.69314718055994531f : -INFINITY;
    }
  }
}

// A 4-D (d, S, H, B) tensor map over a (B, S, H, d) tensor, boxes of 64 columns x `rows`, with
// the 128-byte swizzle the descriptors expect.
inline CUtensorMap make_tmap(const Tensor4& t, bool bf16, int d, int S, int H, int B, int rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (fn == nullptr || q != cudaDriverEntryPointSuccess) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
      std::exit(2);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap m;
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(S), cuuint64_t(H), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(t.row_stride) * 2, cuuint64_t(t.head_stride) * 2,
                                 cuuint64_t(t.batch_stride) * 2};
  const cuuint32_t box[4] = {64, cuuint32_t(rows), 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  const CUresult r = encode(&m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                            t.ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", int(r));
    std::exit(2);
  }
  return m;
}

template <typename Element, int kD, int kStages, bool kPingPong>
void launch_ws(const FwdArgs& a, cudaStream_t stream = 0) {
  using T = FwdWsTraits<Element, kD, kStages, kPingPong>;
  static bool configured = false;
  if (!configured) {
    CHECK(cudaFuncSetAttribute(fwd_ws_kernel<Element, kD, kStages, kPingPong>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
    configured = true;
  }
  constexpr bool bf16 = std::is_same_v<Element, bf16_t>;
  const CUtensorMap tq = make_tmap(a.q, bf16, kD, a.S_q, a.H, a.B, T::kBlockM);
  const CUtensorMap tk = make_tmap(a.k, bf16, kD, a.S_k, a.H_kv, a.B, T::kBlockN);
  const CUtensorMap tv = make_tmap(a.v, bf16, kD, a.S_k, a.H_kv, a.B, T::kBlockN);
  const int tiles = (a.S_q + T::kBlockM - 1) / T::kBlockM;
  fwd_ws_kernel<Element, kD, kStages, kPingPong>
      <<<tiles * a.B * a.H, T::kThreads, T::kSmemBytes, stream>>>(tq, tk, tv, a);
  CHECK(cudaGetLastError());
}


// Experiment 3: experiment 2 with the products pipelined inside each consumer (FlashAttention-3's
// intra-warpgroup overlap) and, optionally, ping-pong between consumers and a third consumer.
// Per key tile j a consumer issues S_j = Q K_j^T and then O += P~_{j-1} V_{j-1} as two commit
// groups, waits for S_j only, runs the softmax of tile j while P~_{j-1} V_{j-1} is still on the
// tensor cores, then waits for it, rescales O by exp(m_{j-1} - m_j) and packs P~_j. The last
// P~ V is issued after the loop. Stage j-1 is released once its P~ V has completed.
template <typename Element, int kD_, int kConsumers_, int kStages_, bool kPingPong_>
struct FwdPipeTraits {
  static constexpr int kD = kD_, kConsumers = kConsumers_, kStages = kStages_;
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kBlockM = 64 * kConsumers, kBlockN = 128, kThreads = 128 * (1 + kConsumers);
  static constexpr int kColBlocks = kD / 64;
  static constexpr int kQBytes = kBlockM * kD * 2, kKVBytes = kBlockN * kD * 2;
  static constexpr int kTileBytes = kQBytes + 2 * kStages * kKVBytes;
  static constexpr int kSmemBytes = kTileBytes + 1024 + 8 * (1 + 3 * kStages);
  // Registers per thread after setmaxnreg: the producer keeps few, the consumers take the rest
  // of the 64K (multiples of 8).
  static constexpr int kProducerRegs = kConsumers == 2 ? 40 : 24;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 232 : 160;
};

// Lines 10-12 of Alg. 1 on one 64 x kBlockN score tile of a consumer, in place: S to the log2
// domain, the mask, the running max, P~ = 2^(s - m), the running sum; returns alpha = 2^(m_old
// - m) per row through `alpha`.
template <int kBlockN>
__device__ __forceinline__ void softmax_tile(float (&acc_s)[kBlockN / 2], float (&row_m)[2],
                                             float (&row_l)[2], float (&alpha)[2], bool needs_mask,
                                             const int (&limit)[2], int n0, int t, float scale_log2) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float mx = row_m[hf];
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& s = acc_s[4 * i + 2 * hf + e];
        s *= scale_log2;
        if (needs_mask && n0 + 8 * i + 2 * t + e >= limit[hf]) s = -INFINITY;
        mx = fmaxf(mx, s);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
    const float base_m = mx == -INFINITY ? 0.0f : mx;
    alpha[hf] = fast_exp2(row_m[hf] - base_m);
    row_m[hf] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& s = acc_s[4 * i + 2 * hf + e];
        s = fast_exp2(s - base_m);
        sum += s;
      }
    row_l[hf] = alpha[hf] * row_l[hf] + sum;
  }
}

template <typename Element, int kD, int kConsumers, int kStages, bool kPingPong>
__global__ void __launch_bounds__(128 * (1 + kConsumers), 1)
    fwd_pipe_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                    const __grid_constant__ CUtensorMap tmap_v, const FwdArgs args) {
  using T = FwdPipeTraits<Element, kD, kConsumers, kStages, kPingPong>;
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t sQ = base;
  auto sK = [&](int st) { return base + T::kQBytes + st * 2 * T::kKVBytes; };
  auto sV = [&](int st) { return sK(st) + T::kKVBytes; };
  const uint32_t bar_q = base + T::kTileBytes;
  auto bar_k = [&](int st) { return bar_q + 8 * (1 + st); };
  auto bar_v = [&](int st) { return bar_q + 8 * (1 + kStages + st); };
  auto bar_empty = [&](int st) { return bar_q + 8 * (1 + 2 * kStages + st); };

  const int tid = threadIdx.x, wg = tid / 128;
  const int bh_count = args.B * args.H;
  const int m_block = static_cast<int>(gridDim.x / bh_count) - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = (blockIdx.x % bh_count) / args.H, h = (blockIdx.x % bh_count) % args.H;
  const int h_kv = h / args.group;
  const int row0 = m_block * kBlockM;
  const int rows_valid = min(kBlockM, args.S_q - row0);
  int n_end = (args.S_k + kBlockN - 1) / kBlockN;
  if (args.causal) {
    const int64_t last_key = static_cast<int64_t>(row0 + rows_valid - 1) + args.causal_offset;
    n_end = last_key < 0 ? 0 : static_cast<int>(min(static_cast<int64_t>(n_end), last_key / kBlockN + 1));
  }

  if (tid == 0) {
    mbar_init(bar_q, 1);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bar_k(st), 1);
      mbar_init(bar_v(st), 1);
      mbar_init(bar_empty(st), 128 * kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {  // the producer
    setmaxnreg_dec<T::kProducerRegs>();
    if (tid == 0 && n_end > 0) {
      mbar_expect_tx(bar_q, T::kQBytes);
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        tma_load_4d(sQ + cb * (kBlockM * 128), &tmap_q, bar_q, cb * 64, row0, h, b);
      int it = 0;
      for (int n = n_end - 1; n >= 0; --n, ++it) {
        const int st = it % kStages;
        const uint32_t phase = (it / kStages) & 1;
        mbar_wait(bar_empty(st), phase ^ 1);
        mbar_expect_tx(bar_k(st), T::kKVBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tma_load_4d(sK(st) + cb * (kBlockN * 128), &tmap_k, bar_k(st), cb * 64, n * kBlockN, h_kv, b);
        mbar_expect_tx(bar_v(st), T::kKVBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tma_load_4d(sV(st) + cb * (kBlockN * 128), &tmap_v, bar_v(st), cb * 64, n * kBlockN, h_kv, b);
      }
    }
    return;
  }

  setmaxnreg_inc<T::kConsumerRegs>();
  const int c = wg - 1, warp_in_wg = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r_lo = c * 64 + warp_in_wg * 16 + g;
  Element* o_base = static_cast<Element*>(args.o.ptr) + b * args.o.batch_stride + h * args.o.head_stride;
  float* lse_rows = args.lse + (static_cast<int64_t>(b) * args.H + h) * args.S_q;
  if (n_end == 0) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = row0 + r_lo + hf * 8;
      if (row >= args.S_q) continue;
      for (int col = 2 * t; col < kD; col += 8)
        *reinterpret_cast<uint32_t*>(o_base + static_cast<int64_t>(row) * args.o.row_stride + col) = 0u;
      if (t == 0) lse_rows[row] = -INFINITY;
    }
    return;
  }

  int limit[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int64_t last = static_cast<int64_t>(row0 + r_lo + hf * 8) + args.causal_offset;
    limit[hf] = args.causal
                    ? static_cast<int>(max(static_cast<int64_t>(0), min(static_cast<int64_t>(args.S_k), last + 1)))
                    : args.S_k;
  }
  auto needs_mask_at = [&](int n0) {
    return n0 + kBlockN > args.S_k ||
           (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
  };
  auto issue_s = [&](float (&acc_s)[kBlockN / 2], int st) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t blk = ks / 4, kin = ks % 4;
      const uint64_t da = make_desc(sQ + blk * (kBlockM * 128) + c * (64 * 128) + kin * 32, 16, 1024);
      const uint64_t db = make_desc(sK(st) + blk * (kBlockN * 128) + kin * 32, 16, 1024);
      WgmmaSS<Element, kBlockN>::run(acc_s, da, db, ks > 0 ? 1 : 0);
    }
  };
  float acc_o[kD / 2];
  auto issue_pv = [&](const uint32_t (&p)[kBlockN / 16][4], int st) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint64_t dv = make_desc(sV(st) + kk * (16 * 128), kBlockN * 128, 1024);
      WgmmaRS<Element, kD>::run(acc_o, p[kk], dv, 1);
    }
  };
  auto pack_p = [&](uint32_t (&p)[kBlockN / 16][4], const float (&acc_s)[kBlockN / 2]) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[kk][e] = pack2<Element>(acc_s[8 * kk + 2 * e], acc_s[8 * kk + 2 * e + 1]);
  };

#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.0f;
  float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.0f, 0.0f}, alpha[2];
  uint32_t p_frag[kBlockN / 16][4];
  if constexpr (kPingPong) {
    if (c == kConsumers - 1) named_bar_arrive(1, 256);  // consumer 0 issues first
  }
  mbar_wait(bar_q, 0);

  // Key tile j = n_end - 1 (the first visited): S, softmax, P~; no P~ V yet.
  int n = n_end - 1;
  {
    float acc_s[kBlockN / 2];
    mbar_wait(bar_k(0), 0);
    if constexpr (kPingPong) named_bar_sync(1 + c, 256);
    wgmma_fence();
    issue_s(acc_s, 0);
    wgmma_commit();
    if constexpr (kPingPong) {
      if (!(c == kConsumers - 1 && n == 0)) named_bar_arrive(1 + (c + 1) % kConsumers, 256);
    }
    wgmma_wait<0>();
    fence_regs(acc_s);
    softmax_tile<kBlockN>(acc_s, row_m, row_l, alpha, needs_mask_at(n * kBlockN), limit, n * kBlockN, t,
                          args.scale_log2);
    pack_p(p_frag, acc_s);
  }
  int it = 1;
  for (--n; n >= 0; --n, ++it) {
    const int st = it % kStages, st_prev = (it - 1) % kStages;
    const uint32_t phase = (it / kStages) & 1, phase_prev = ((it - 1) / kStages) & 1;
    float acc_s[kBlockN / 2];
    mbar_wait(bar_k(st), phase);
    mbar_wait(bar_v(st_prev), phase_prev);
    if constexpr (kPingPong) named_bar_sync(1 + c, 256);
    wgmma_fence();
    issue_s(acc_s, st);  // S_j = Q K_j^T
    wgmma_commit();
    issue_pv(p_frag, st_prev);  // O += P~_{j-1} V_{j-1}
    wgmma_commit();
    if constexpr (kPingPong) {
      if (!(c == kConsumers - 1 && n == 0)) named_bar_arrive(1 + (c + 1) % kConsumers, 256);
    }
    wgmma_wait<1>();  // S_j is ready; P~_{j-1} V_{j-1} may still run
    fence_regs(acc_s);
    softmax_tile<kBlockN>(acc_s, row_m, row_l, alpha, needs_mask_at(n * kBlockN), limit, n * kBlockN, t,
                          args.scale_log2);
    wgmma_wait<0>();
    fence_regs(acc_o);
    mbar_arrive(bar_empty(st_prev));
#pragma unroll
    for (int i = 0; i < kD / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * i + e] *= alpha[e / 2];
    pack_p(p_frag, acc_s);
  }
  {  // the last P~ V
    const int st_prev = (it - 1) % kStages;
    const uint32_t phase_prev = ((it - 1) / kStages) & 1;
    mbar_wait(bar_v(st_prev), phase_prev);
    wgmma_fence();
    issue_pv(p_frag, st_prev);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_o);
    mbar_arrive(bar_empty(st_prev));
  }

#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = row_l[hf];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    const int row = row0 + r_lo + hf * 8;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    if (row < args.S_q) {
      Element* o_row = o_base + static_cast<int64_t>(row) * args.o.row_stride;
#pragma unroll
      for (int i = 0; i < kD / 8; ++i)
        *reinterpret_cast<uint32_t*>(o_row + 8 * i + 2 * t) =
            pack2<Element>(acc_o[4 * i + 2 * hf] * inv, acc_o[4 * i + 2 * hf + 1] * inv);
      if (t == 0) lse_rows[row] = l > 0.0f ? (row_m[hf] + __log2f(l)) * 0.69314718055994531f : -INFINITY;
    }
  }
}

template <typename Element, int kD, int kConsumers, int kStages, bool kPingPong>
void launch_pipe(const FwdArgs& a, cudaStream_t stream = 0) {
  using T = FwdPipeTraits<Element, kD, kConsumers, kStages, kPingPong>;
  auto kernel = fwd_pipe_kernel<Element, kD, kConsumers, kStages, kPingPong>;
  static bool configured = false;
  if (!configured) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
    configured = true;
  }
  constexpr bool bf16 = std::is_same_v<Element, bf16_t>;
  const CUtensorMap tq = make_tmap(a.q, bf16, kD, a.S_q, a.H, a.B, T::kBlockM);
  const CUtensorMap tk = make_tmap(a.k, bf16, kD, a.S_k, a.H_kv, a.B, T::kBlockN);
  const CUtensorMap tv = make_tmap(a.v, bf16, kD, a.S_k, a.H_kv, a.B, T::kBlockN);
  const int tiles = (a.S_q + T::kBlockM - 1) / T::kBlockM;
  kernel<<<tiles * a.B * a.H, T::kThreads, T::kSmemBytes, stream>>>(tq, tk, tv, a);
  CHECK(cudaGetLastError());
}

// The float32 reference: one warp per query row, plain online softmax over every key in
// float32 from the same 16-bit inputs.
template <typename Element>
__global__ void reference_kernel(const FwdArgs args, float* o_ref, float* lse_ref, int d) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const int rows = args.B * args.H * args.S_q;
  if (warp >= rows) return;
  const int row = warp % args.S_q, h = (warp / args.S_q) % args.H, b = warp / (args.S_q * args.H);
  const Element* q = row_ptr<Element>(args.q, b, row, h);
  float m = -INFINITY, l = 0.0f, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // d <= 256: 8 per lane
  for (int key = 0; key < args.S_k; ++key) {
    if (args.causal && key > row + args.causal_offset) break;
    const Element* k = row_ptr<Element>(args.k, b, key, h / args.group);
    const Element* v = row_ptr<Element>(args.v, b, key, h / args.group);
    float s = 0.0f;
    for (int c = lane; c < d; c += 32) s += float(q[c]) * float(k[c]);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
    s *= args.scale_log2;
    const float m_new = fmaxf(m, s), alpha = exp2f(m - m_new), p = exp2f(s - m_new);
    l = l * alpha + p;
    for (int c = lane, i = 0; c < d; c += 32, ++i) acc[i] = acc[i] * alpha + p * float(v[c]);
    m = m_new;
  }
  float* o = o_ref + ((static_cast<int64_t>(b) * args.S_q + row) * args.H + h) * d;
  for (int c = lane, i = 0; c < d; c += 32, ++i) o[c] = l > 0 ? acc[i] / l : 0.0f;
  if (lane == 0) lse_ref[(static_cast<int64_t>(b) * args.H + h) * args.S_q + row] =
      l > 0 ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;
}

struct Problem {
  int B, H, H_kv, S_q, S_k, d;
  int causal;  // 0 none, 1 top-left, 2 bottom-right
};

template <typename Element>
struct Buffers {
  Element *q, *k, *v, *o;
  float *lse;
  FwdArgs args;
};

template <typename Element>
Buffers<Element> make_buffers(const Problem& p, unsigned seed) {
  Buffers<Element> bu{};
  const size_t nq = size_t(p.B) * p.S_q * p.H * p.d, nk = size_t(p.B) * p.S_k * p.H_kv * p.d;
  std::vector<Element> hq(nq), hk(nk), hv(nk);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : hq) x = Element(dist(rng));
  for (auto& x : hk) x = Element(dist(rng));
  for (auto& x : hv) x = Element(dist(rng));
  CHECK(cudaMalloc(&bu.q, nq * sizeof(Element)));
  CHECK(cudaMalloc(&bu.k, nk * sizeof(Element)));
  CHECK(cudaMalloc(&bu.v, nk * sizeof(Element)));
  CHECK(cudaMalloc(&bu.o, nq * sizeof(Element)));
  CHECK(cudaMalloc(&bu.lse, size_t(p.B) * p.H * p.S_q * sizeof(float)));
  CHECK(cudaMemcpy(bu.q, hq.data(), nq * sizeof(Element), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bu.k, hk.data(), nk * sizeof(Element), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bu.v, hv.data(), nk * sizeof(Element), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(bu.o, 0xff, nq * sizeof(Element)));  // NaN poison: every element must be written
  FwdArgs& a = bu.args;
  a.q = {bu.q, int64_t(p.S_q) * p.H * p.d, int64_t(p.H) * p.d, p.d};  // (B, S, H, d)
  a.k = {bu.k, int64_t(p.S_k) * p.H_kv * p.d, int64_t(p.H_kv) * p.d, p.d};
  a.v = {bu.v, int64_t(p.S_k) * p.H_kv * p.d, int64_t(p.H_kv) * p.d, p.d};
  a.o = {bu.o, int64_t(p.S_q) * p.H * p.d, int64_t(p.H) * p.d, p.d};
  a.lse = bu.lse;
  a.B = p.B; a.H = p.H; a.H_kv = p.H_kv; a.group = p.H / p.H_kv; a.S_q = p.S_q; a.S_k = p.S_k;
  a.scale_log2 = 1.4426950408889634f / std::sqrt(float(p.d));
  a.causal = p.causal != 0;
  a.causal_offset = p.causal == 2 ? p.S_k - p.S_q : 0;
  return bu;
}

template <typename Element>
void free_buffers(Buffers<Element>& bu) {
  cudaFree(bu.q); cudaFree(bu.k); cudaFree(bu.v); cudaFree(bu.o); cudaFree(bu.lse);
}

template <typename Element, int kD>
void launch(const FwdArgs& a, cudaStream_t stream = 0) {
  using T = FwdWgmmaTraits<Element, kD>;
  static bool configured = false;
  if (!configured) {
    CHECK(cudaFuncSetAttribute(fwd_wgmma_kernel<Element, kD>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
    configured = true;
  }
  const int tiles = (a.S_q + T::kBlockM - 1) / T::kBlockM;
  fwd_wgmma_kernel<Element, kD><<<tiles * a.B * a.H, T::kThreads, T::kSmemBytes, stream>>>(a);
  CHECK(cudaGetLastError());
}

// The kernel versions, timed side by side: 0 = experiment 1 (cp.async, no roles), 1 =
// experiment 2 (roles and TMA, 2 stages); experiment 3 (pipelined): 2 = two consumers, 3 = the
// same with ping-pong, 4 = three consumers with ping-pong, 5 = three consumers without
// (4 and 5: d = 64 only; d = 128 runs 3 and 2 there).
int g_variant = 0;
constexpr int kVariants = 6;
template <typename Element, int kD>
void run_d(const FwdArgs& a) {
  switch (g_variant) {
    case 0: launch<Element, kD>(a); break;
    case 1: launch_ws<Element, kD, 2, false>(a); break;
    case 2: launch_pipe<Element, kD, 2, 2, false>(a); break;
    case 3: launch_pipe<Element, kD, 2, 2, true>(a); break;
    case 4:  // three consumers (192 rows): d = 64 only, d = 128 lacks the registers
      if constexpr (kD == 64) launch_pipe<Element, kD, 3, 2, true>(a);
      else launch_pipe<Element, kD, 2, 2, true>(a);
      break;
    default:
      if constexpr (kD == 64) launch_pipe<Element, kD, 3, 2, false>(a);
      else launch_pipe<Element, kD, 2, 2, false>(a);
  }
}
template <typename Element>
void run(const Problem& p, const FwdArgs& a) {
  if (p.d == 64) run_d<Element, 64>(a);
  else run_d<Element, 128>(a);
}

const char* mask_name(int c) { return c == 0 ? "none" : c == 1 ? "causal" : "causal-bottom-right"; }

// Returns true when O and L agree with the float32 reference to within bf16/f16 output rounding
// plus the rounding of P~ (a loose screen; the library's rule judges the production kernel).
template <typename Element>
bool check(const Problem& p, const char* type) {
  auto bu = make_buffers<Element>(p, 1234u + p.S_q * 7 + p.S_k);
  run<Element>(p, bu.args);
  CHECK(cudaDeviceSynchronize());
  const size_t nq = size_t(p.B) * p.S_q * p.H * p.d, nl = size_t(p.B) * p.H * p.S_q;
  float *o_ref, *lse_ref;
  CHECK(cudaMalloc(&o_ref, nq * sizeof(float)));
  CHECK(cudaMalloc(&lse_ref, nl * sizeof(float)));
  const int rows = p.B * p.H * p.S_q;
  reference_kernel<Element><<<(rows * 32 + 255) / 256, 256>>>(bu.args, o_ref, lse_ref, p.d);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<Element> ho(nq);
  std::vector<float> hr(nq), hl(nl), hlr(nl);
  CHECK(cudaMemcpy(ho.data(), bu.o, nq * sizeof(Element), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hr.data(), o_ref, nq * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hl.data(), bu.lse, nl * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hlr.data(), lse_ref, nl * sizeof(float), cudaMemcpyDeviceToHost));
  double max_o = 0, max_l = 0;
  size_t bad = 0;
  for (size_t i = 0; i < nq; ++i) {
    const float x = float(ho[i]);
    if (!std::isfinite(x)) { ++bad; continue; }
    max_o = std::max(max_o, double(std::fabs(x - hr[i])));
  }
  for (size_t i = 0; i < nl; ++i) {
    if (std::isinf(hlr[i]) && hl[i] == hlr[i]) continue;
    if (!std::isfinite(hl[i])) { ++bad; continue; }
    max_l = std::max(max_l, double(std::fabs(hl[i] - hlr[i])));
  }
  const double tol_o = std::is_same_v<Element, bf16_t> ? 2e-2 : 4e-3;
  const bool ok = bad == 0 && max_o <= tol_o && max_l <= 1e-3;
  std::printf("check %-4s B=%d H=%d H_kv=%d S_q=%-5d S_k=%-5d d=%-3d %-19s max|dO|=%.3e max|dL|=%.3e nonfinite=%zu %s\n",
              type, p.B, p.H, p.H_kv, p.S_q, p.S_k, p.d, mask_name(p.causal), max_o, max_l, bad,
              ok ? "ok" : "FAIL");
  cudaFree(o_ref); cudaFree(lse_ref);
  free_buffers(bu);
  return ok;
}

template <typename Element>
void time_problem(const Problem& p, const char* type) {
  auto bu = make_buffers<Element>(p, 99u);
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  double flops = 4.0 * p.B * p.H * double(p.S_q) * p.S_k * p.d;
  if (p.causal) flops /= 2;
  std::printf("time  %-4s B=%d H=%d S=%-5d d=%-3d %-6s fwd ms (TFLOP/s) by variant:", type, p.B, p.H,
              p.S_q, p.d, mask_name(p.causal));
  for (g_variant = 0; g_variant < kVariants; ++g_variant) {
    for (int i = 0; i < 5; ++i) run<Element>(p, bu.args);
    std::vector<float> ms;
    for (int i = 0; i < 30; ++i) {
      CHECK(cudaEventRecord(e0));
      run<Element>(p, bu.args);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("  v%d %.3f (%.0f)", g_variant, med, flops / med / 1e9);
  }
  std::printf("\n");
  cudaEventDestroy(e0); cudaEventDestroy(e1);
  free_buffers(bu);
}

}  // namespace flashref::dev::sm90

int main(int argc, char** argv) {
  using namespace flashref::dev::sm90;
  const bool timing = argc < 2 || std::string(argv[1]) != "check";
  int failures = 0;
  const Problem checks[] = {
      {1, 1, 1, 1, 1, 64, 0},      {1, 2, 1, 17, 17, 64, 1},     {2, 2, 2, 100, 100, 64, 0},
      {1, 2, 2, 128, 128, 64, 1},  {1, 3, 1, 300, 300, 64, 1},   {1, 2, 2, 129, 257, 64, 2},
      {1, 2, 1, 300, 100, 64, 2},  {1, 2, 1, 300, 100, 64, 1},   {2, 4, 2, 1000, 1000, 64, 1},
      {1, 2, 2, 128, 128, 128, 0}, {1, 2, 1, 300, 300, 128, 1},  {1, 2, 2, 257, 129, 128, 2},
      {2, 4, 2, 1000, 777, 128, 0}, {1, 2, 2, 2048, 2048, 128, 1}, {1, 1, 1, 2048, 2048, 64, 2},
  };
  for (g_variant = 0; g_variant < kVariants; ++g_variant) {
    std::printf("== variant %d\n", g_variant);
    for (const Problem& p : checks) {
      failures += !check<bf16_t>(p, "bf16");
      failures += !check<f16_t>(p, "f16");
    }
  }
  std::printf("checks: %d failed\n", failures);
  if (timing) {
    time_problem<bf16_t>({1, 16, 16, 16384, 16384, 64, 1}, "bf16");   // the leaderboard
    time_problem<bf16_t>({1, 16, 16, 16384, 16384, 128, 1}, "bf16");
    time_problem<bf16_t>({1, 16, 16, 16384, 16384, 64, 0}, "bf16");
    for (int S = 1024; S <= 32768; S *= 2) {
      time_problem<bf16_t>({32768 / S, 16, 16, S, S, 64, 1}, "bf16");
      time_problem<bf16_t>({32768 / S, 16, 16, S, S, 128, 1}, "bf16");
    }
  }
  return failures == 0 ? 0 : 1;
}
