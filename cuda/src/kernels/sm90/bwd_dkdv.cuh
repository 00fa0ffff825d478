// Backward on Hopper (sm_90a), the pass that owns dK and dV: Alg. 2 from the key side on
// wgmma, with the tiles brought by the TMA and the block split by role.
//
// Grid as the sm80 pass (KeyTileSchedule): one block per (key tile, key/value head, batch), in
// sections of heads that share L2 (its sectioned order); the block loops over (query head of
// its group, query tile that sees the key tile), heads ascending then tiles ascending (fused:
// descending, kWalkDown), and sums each dK/dV row in that fixed order: no atomics, bitwise
// reproducible, GQA's sum over the group inside the loop. The fused kernels run the same key
// tiles on a persistent grid (kPersistent): a block per multiprocessor, taking them in that
// order from a counter, one after another.
//
// Warpgroup 0 is the producer: one thread loads K_j and V_j once a key tile, then for each step,
// into the next free stage, Q_i, dO_i (TMA) and L'_i, D_i (bulk copies of the padded workspace
// rows), all on the stage's "full" barrier. Warpgroups 1 and 2 are the consumers, each owning 64
// keys, on transposed tiles so that P^T and dS^T come out of one product in the register layout the
// next takes as its A operand (the wgmma accumulator is the mma.sync C fragment repeated, so
// the sm80 pass's fragment steps apply as they are):
//   S^T = K_j Q_i^T, dP^T = V_j dO_i^T       wgmma m64n{B_q}k16, both from shared memory (11, 14)
//   P^T = 2^(s'^T - L'_i)                    line 12; 0 above the causal diagonal
//   dV_j += P^T dO_i                          line 13; P^T from registers, dO MN-major
//   dS^T = P^T * (dP^T - D_i)                 line 15
//   dK_j += dS^T Q_i                          line 17; dK *= scale once at the end
// (at d = 128 and with 128-query steps dS^T is made before either gradient product is issued,
// kDsFirst). Fused (DqMode below), also, with a writer thread in the producer warpgroup, line
// 16: dS to shared memory (stmatrix.trans), a barrier over both consumers, then dQ_i = dS K_j
// over the whole key tile (wgmma, K_j MN-major), split between the consumers: by rows with
// 128-query steps (d = 64; each consumer's 64 query rows), by columns with 64-query steps
// (d = 128; each consumer's 64 columns). The writer adds the tiles to dQ's accumulator.
#pragma once

#include <cuda.h>

#include <type_traits>

#include "kernels/common/args.hpp"
#include "kernels/common/causal.cuh"
#include "kernels/common/fragment_softmax.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/bwd_common.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/stage_rows.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace flashref::cuda::kernels::sm90 {

// How dQ is made. kDqPass: by the separate dQ pass (bwd_dq.cuh), this kernel writes dK and dV
// only. Fused (kDqOrdered, kDqAtomic): this kernel also takes Alg. 2 line 16, dQ_i += dS_ij K_j,
// and adds each step's dQ tiles (64 query rows x d each) into a float32 accumulator in global
// memory (args.dq_accum, scaled and converted by bwd_dq_postprocess_kernel after) with the TMA's
// bulk reduction. kDqOrdered adds them in ascending key tile order, the blocks ordered by a
// semaphore per 64-row tile (args.dq_semaphore): the same bits on every run. With
// kDqFirstStore (BwdTraitsDqFirstStore, the default's) its first add, key tile 0's, is a TMA store
// and the preprocess does not zero its accumulator (a tile no key tile sees keeps a semaphore of 0,
// and the postprocess writes its zeros); otherwise the accumulator is zeroed by the preprocess, as
// kDqAtomic's always is. kDqAtomic adds them in whatever order the blocks reach them: not
// reproducible, and faster. Which one runs where: dispatch.cu, dq_strategy.
enum DqMode : int { kDqPass = 0, kDqOrdered = 1, kDqAtomic = 2 };

template <typename Element_, int kD_, int kStages_, int kDqMode_, int kBlockM_ = 64,
          bool kPersistent_ = false, int kDqBuffers_ = 1, bool kDqDeferred_ = false,
          int kDqWriters_ = kDqBuffers_>
struct BwdDkvTraitsOf {
  using Element = Element_;
  static constexpr int kD = kD_;
  static constexpr int kStages = kStages_;  // (Q_i, dO_i, L'_i, D_i) stages
  static constexpr int kDqMode = kDqMode_;
  static constexpr bool kFused = kDqMode != kDqPass;
  // Fused only: a block per multiprocessor, each taking key tiles one after another from a
  // counter in the workspace (AttnArgs::tile_counter) in the order a grid of one block per key
  // tile would launch them. Its next tile's first stages load under the last steps and the
  // epilogue of the one before, and its launch and barrier setup are paid once.
  static constexpr bool kPersistent = kPersistent_;
  static constexpr int kConsumers = 2;             // warpgroups of 64 keys
  static constexpr int kBlockN = 64 * kConsumers;  // B_k
  static constexpr int kBlockM = kBlockM_;         // B_q: queries per step
  // Fused, dQ_i over the whole key tile from both consumers' dS in shared memory, handed to the
  // writer as it is (no partials added between the consumers): with 128-query steps each
  // consumer makes its 64 query rows (one accumulator tile each), with 64-query steps its 64
  // of dQ's 128 columns (FlashAttention-3's d = 128 split; one tile, both halves in it).
  static constexpr bool kDqByRows = kFused && kBlockM == 128;
  static constexpr bool kDqByCols = kFused && kBlockM == 64;
  // Fused: each head's query tiles visited from the last to the first. With a causal mask every
  // key tile then meets query tile i at the same step of its walk, so in kDqOrdered a key tile
  // waits for the one before it by the latency of one addition; walked up from the diagonal,
  // key tile j reaches query tile i one step before key tile j - 1 does and waits that step
  // (run 15a, ordered: -2% on the d = 64 leaderboard, -3 to -4% at d = 128; atomic: the same
  // within the rounds' spread).
  static constexpr bool kWalkDown = kFused;
  // dS^T is made into dP^T's registers before either gradient product is issued, so that no
  // fragment is live beside S^T, dP^T, dK and dV: at 128-query steps (64 + 64 + 32 + 32 floats)
  // the other order spilled 152 bytes, and at d = 128 (32 + 32 + 64 + 64) ptxas serialized the
  // wgmmas for want of registers (C7512, every d = 128 dK/dV kernel up to run 14).
  static constexpr bool kDsFirst = kDqByRows || kD == 128;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kColBlocks = kD / kBlockCols;
  static constexpr int kKVBytes = kBlockN * kD * 2, kQBytes = kBlockM * kD * 2;
  static constexpr int kVecBytes = kBlockM * 4;
  static constexpr int kStageBytes = 2 * kQBytes + 2 * kVecBytes;
  static constexpr int kOutBytes = kBlockN * (kD + 4) * 4;  // the epilogue's staging, reused
  // Fused: per consumer its dS (B_q queries x 64 keys, 16-bit, one column block), and the dQ
  // tiles (64 rows x kD float32 each, in the accumulator's register order: by rows one per
  // consumer, by columns one).
  static constexpr int kDsBytes = kBlockM * 64 * 2;
  static constexpr int kDqBytes = kDqTileRows * kD * 4;
  static constexpr int kDqTiles = kBlockM / kDqTileRows;
  // Fused: the step's dQ tiles are in one of kDqBuffers sets (step s in set s % kDqBuffers),
  // each with a writer thread of its own. The ordered writer's step is a chain of memory
  // round trips (poll the semaphore, add, wait for the add to complete, release) that does not
  // scale with the SM clock (run 27d: the ordered kernel 9% slower than the atomic one at 1.77
  // GHz, level at 1.36); two writers keep two steps' chains in flight, and neither defers its
  // release to the other's progress (a release deferred to the next step's issue would chain
  // every key tile of a head one step behind the one before).
  static constexpr int kDqBuffers = kDqBuffers_;
  static constexpr int kDqSlots = kDqTiles * kDqBuffers;
  // Deferred (tuning variant, run 29e): two writers may share one set, writer w taking the
  // steps s % 2 = w, so that a step's poll and release overlap the next step's add; the
  // "full" and "empty" barriers are then per (tile, writer), kDqBarSlots of them, and the
  // consumers wait for the set's last reader, step s - 1's writer.
  static constexpr int kDqWriters = kDqWriters_;
  static constexpr int kDqBarSlots = kDqTiles * kDqWriters;
  // Fused: when step s's dQ product is issued. In step s (the default at d = 64), after both
  // consumers' dS_s is in shared memory: two named barriers over both a step, which keep the
  // consumers in lock step, so that their softmax phases leave the tensor pipe idle together.
  // kDqDeferred (the default at d = 128 since run 29a): in step s + 1, after its dV and dK
  // products are issued (the tile's last step's after the walk), with dS in two sets (step s in
  // set s % 2). A consumer waits only for the other's dS of the step before (one named barrier,
  // which the other arrives on), and the two take turns issuing S^T and dP^T
  // (FlashAttention-3's forward ping-pong), which sets them half a step apart: one's softmax
  // runs under the other's products.
  static constexpr bool kDqDeferred = kFused && kDqDeferred_;
  static constexpr int kDsSets = kDqDeferred ? 2 : 1;
  // Whether dK and dV may leave by the TMA (BwdTraitsStoreDkvByTma below).
  static constexpr bool kStoreDkvByTma = false;
  // Whether the ordered adds' first is a store (BwdTraitsDqFirstStore below).
  static constexpr bool kDqFirstStore = false;
  // Shared memory: K_j, V_j, (fused) both consumers' dS and the dQ tiles, then the stages. The
  // epilogue stages dK and dV over the first bytes: fused, over K_j, V_j and dS alone, all free
  // once the last step's dQ product is done, so that the bulk reductions still reading the dQ
  // tiles never meet it and a persistent block's next stages load beside it; in the dK/dV pass
  // over everything.
  static constexpr int kDsOffset = 2 * kKVBytes;
  static constexpr int kDqOffset = kDsOffset + (kFused ? kDsSets * kConsumers * kDsBytes : 0);
  static constexpr int kStagesOffset = kDqOffset + (kFused ? kDqSlots * kDqBytes : 0);
  static constexpr int kTileBytes = kStagesOffset + kStages * kStageBytes;
  static constexpr int kBodyBytes = kTileBytes > kOutBytes ? kTileBytes : kOutBytes;
  // Persistent: one more barrier, K_j and V_j "empty" (the block's consumers are past the
  // epilogue and its writer has read the tile's index), and the index itself (a slot of 8
  // bytes) after the barriers.
  static constexpr int kBarriers = 1 + 2 * kStages + (kFused ? 2 * kDqBarSlots : 0) + kPersistent;
  static constexpr int kSmemBytes = kBodyBytes + kSwizzleAtom + 8 * kBarriers + 8 * kPersistent;
  static_assert(!kFused || kOutBytes <= kDqOffset, "the fused epilogue stages over K, V and dS");
  static_assert(kFused || !kPersistent, "the persistent grid is the fused kernel's");
  static_assert(kDqBuffers == 1 || kDqBuffers == 2, "one or two sets of dQ tiles");
  static_assert(kFused || kDqBuffers == 1, "dQ tiles are the fused kernel's");
  static_assert(kDqWriters == kDqBuffers || (kDqDeferred && kDqBuffers == 1 && kDqWriters == 2),
                "two writers on one set: the deferred kernels");
  static_assert(!kDqDeferred || (kPersistent && kDsFirst), "deferred dQ: the persistent kernels");
  static_assert(kDsOffset % kSwizzleAtom == 0 && kStagesOffset % kSwizzleAtom == 0,
                "tiles must stay 1024-byte aligned");
  // Persistent: the producer's loop over tiles needs 56 registers (at 40 ptxas spilled 16-24
  // bytes), the consumers spill nothing at 224 (ptxas, d = 64 and 128).
  static constexpr int kProducerRegs = kPersistent ? 56 : 40;
  static constexpr int kConsumerRegs = kPersistent ? 224 : 232;
  // Persistent: the epilogue's copy loop unrolled 4 times, not 16: fully unrolled beside the
  // tile loop's live values, ptxas spilled 400-450 bytes at d = 128.
  static constexpr int kEpilogueUnroll = kPersistent ? 4 : 0;
  static_assert(setmaxnreg_fits(kProducerRegs, kConsumerRegs, kConsumers),
                "setmaxnreg: the consumers' registers come from those the producer gives back");
  static_assert(kD % kBlockCols == 0, "the sm90 backward is compiled for d = 64 and 128");
  static_assert(kWorkspaceRowPad % kBlockM == 0, "workspace padding must cover a query tile");
  static_assert(!kDqByRows || kBlockM == kConsumers * kDqTileRows,
                "by rows: an accumulator tile per consumer");
  static_assert(!kDqByCols || (kBlockM == kDqTileRows && kD == 64 * kConsumers),
                "by columns: one accumulator tile per step, a 64-column half per consumer");
  static_assert(kBlockM == 64 || kDqByRows, "128-query steps are the fused d = 64 kernel's");
  static_assert(kQBytes % kSwizzleAtom == 0, "stage tiles must stay 1024-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory past the H100/H200 block limit");
};

// The two-pass dK/dV kernel, and the fused ones. Names of their own rather than a defaulted
// argument keep the first one's kernel symbol what it was before the fused ones existed, so
// that scripts/sass-compare maps it to its earlier builds.
template <typename Element, int kD, int kStages>
struct BwdDkvTraits : BwdDkvTraitsOf<Element, kD, kStages, kDqPass> {};
// Fused at d = 64: 128-query steps, dQ by rows (FlashAttention-3's d = 64 tiles).
template <typename Element, int kD, int kStages, int kDqMode, bool kPersistent = false>
struct BwdFusedRowsTraits : BwdDkvTraitsOf<Element, kD, kStages, kDqMode, 128, kPersistent> {
  static_assert(kDqMode != kDqPass, "the fused kernel adds dQ");
};
// Fused at d = 128: 64-query steps, dQ by columns.
template <typename Element, int kStages, int kDqMode, bool kPersistent = false>
struct BwdFusedColsTraits : BwdDkvTraitsOf<Element, 128, kStages, kDqMode, 64, kPersistent> {
  static_assert(kDqMode != kDqPass, "the fused kernel adds dQ");
};

// Persistent fused kernels with two sets of dQ tiles and two writers, with two stages to make
// room (the ordered kernel's; run 28a).
template <typename Element, int kD, int kStages, int kDqMode, int kDqBuffers>
struct BwdFusedRowsBufferedTraits
    : BwdDkvTraitsOf<Element, kD, kStages, kDqMode, 128, true, kDqBuffers> {};
template <typename Element, int kStages, int kDqMode, int kDqBuffers>
struct BwdFusedColsBufferedTraits
    : BwdDkvTraitsOf<Element, 128, kStages, kDqMode, 64, true, kDqBuffers> {};

// Persistent fused kernels with dQ's product deferred a step and the consumers taking turns
// (run 29).
template <typename Element, int kD, int kStages, int kDqMode, int kDqBuffers>
struct BwdFusedRowsDeferredTraits
    : BwdDkvTraitsOf<Element, kD, kStages, kDqMode, 128, true, kDqBuffers, true> {};
template <typename Element, int kStages, int kDqMode, int kDqBuffers>
struct BwdFusedColsDeferredTraits
    : BwdDkvTraitsOf<Element, 128, kStages, kDqMode, 64, true, kDqBuffers, true> {};
// Deferred, two writers on one set of dQ tiles (d = 64's ordered kernel, whose room holds one
// set: runs 29e and 30a).
template <typename Element, int kD, int kStages, int kDqMode>
struct BwdFusedRowsDeferredSharedTraits
    : BwdDkvTraitsOf<Element, kD, kStages, kDqMode, 128, true, 1, true, 2> {};

// The persistent fused kernel's epilogue by the TMA: each consumer writes its 64 rows of dK_j
// and dV_j, rounded to the gradient dtype, into K_j's and V_j's tiles (laid out as the TMA
// loaded them), and one thread stores them with four bulk tensor copies; K_j and V_j are free
// for the next tile once the copies have read them. The staged epilogue (store_consumer_tile)
// writes both as float32 rows over K_j, V_j and dS and copies them out with the consumers'
// loads and stores, two tiles one after the other, while the next tile's K_j and V_j wait for
// all of it. Where the host cannot make the gradients' tensor maps (float32 gradients, strides
// the TMA refuses) it runs `Staged`, the kernel with the staged epilogue (both epilogues in one
// kernel serialized the d = 128 kernels' wgmmas for want of registers, C7512). The same
// roundings of the same products: the same bits.
template <typename Base>
struct BwdTraitsStoreDkvByTma : Base {
  static constexpr bool kStoreDkvByTma = true;
  using Staged = Base;
  static_assert(Base::kPersistent && Base::kFused,
                "the TMA's epilogue frees K_j and V_j for a persistent block's next tile");
};

// The ordered kernel whose first dQ add (key tile 0's, the first adder of every query tile any
// key tile sees: a row's visible keys are a prefix of the keys) is a store, so that the
// preprocess need not zero the accumulator (268 MB at S = 1k, d = 128: half its 136 us, run 31a).
// The postprocess writes zeros for a tile no key tile saw (semaphore 0). The store is the TMA's
// tensor store of the whole tile (tmap_dq_accum, launch.cuh's dq_accum_map). compute-sanitizer's
// initcheck sees neither that store nor a plain bulk copy as a write (runs 34g and 35a: every
// read of every stored tile flagged), so launch.cuh marks the accumulator initialized for it
// once the kernel is queued, and the poison check (FLASHREF_CUDA_TUNE poison90=1, dispatch.cu)
// is what tests that claim: the accumulator filled with NaN first, so a tile read unwritten
// reaches dQ. The ordered kernels' default since run 35b (configs.hpp); fused90=1 and 2 add
// into a zeroed accumulator as before (dispatch.cu, dq_first_store).
template <typename Base>
struct BwdTraitsDqFirstStore : Base {
  static constexpr bool kDqFirstStore = true;
  static_assert(Base::kDqMode == kDqOrdered, "the first add is known in the ordered kernels");
};

// The key tile `index` of a dK/dV grid and the steps a block takes over it: the (query head
// of its group, query tile that sees the key tile) pairs, heads ascending, then tiles
// ascending or (kWalkDown) descending.
template <typename T>
struct KeyTileSteps {
  int b, h_kv, n0, keys_valid;
  int m_tiles, m_begin, per_head, total;

  __device__ __forceinline__ KeyTileSteps(const AttnArgs& args, int index) {
    const KeyTileSchedule<T::kBlockM, T::kBlockN> tile(args, index, ceil_div(args.S_k, T::kBlockN));
    b = tile.b;
    h_kv = tile.h_kv;
    n0 = tile.n0;
    keys_valid = tile.keys_valid;
    // Query tiles that see at least one key of this tile: all, or with a causal mask those
    // from the diagonal on.
    m_tiles = ceil_div(args.S_q, T::kBlockM);
    m_begin = args.causal ? tile.causal_query_tiles_begin(args, m_tiles) : 0;
    per_head = m_tiles - m_begin;
    total = per_head * args.group;
  }
  // The query tile of step k of a head's walk.
  __device__ __forceinline__ int query_tile(int k) const {
    return T::kWalkDown ? m_tiles - 1 - k : m_begin + k;
  }
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads, 1)
    bwd_dkdv_wgmma_kernel(const __grid_constant__ CUtensorMap tmap_q,
                          const __grid_constant__ CUtensorMap tmap_k,
                          const __grid_constant__ CUtensorMap tmap_v,
                          const __grid_constant__ CUtensorMap tmap_do, const AttnArgs args,
                          const __grid_constant__ CUtensorMap tmap_dk,
                          const __grid_constant__ CUtensorMap tmap_dv,
                          const __grid_constant__ CUtensorMap tmap_dq_accum) {
  using Element = typename T::Element;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + kSwizzleAtom - 1) & ~uint32_t(kSwizzleAtom - 1);
  unsigned char* base_ptr = smem_raw + (base - smem_addr(smem_raw));
  const uint32_t sK = base, sV = base + T::kKVBytes;
  auto stage = [&](int st) { return base + T::kStagesOffset + st * T::kStageBytes; };
  auto sQ = [&](int st) { return stage(st); };
  auto sdO = [&](int st) { return stage(st) + T::kQBytes; };
  auto vec_offset = [&](int st) { return T::kStagesOffset + st * T::kStageBytes + 2 * T::kQBytes; };
  const uint32_t bar_kv = base + T::kBodyBytes;
  auto bar_full = [&](int st) { return bar_kv + 8 * (1 + st); };
  auto bar_empty = [&](int st) { return bar_kv + 8 * (1 + kStages + st); };
  // Fused: consumer c's dS, and dQ tile u (by rows consumer u's, by columns the one). Each dQ
  // tile has a "full" barrier (its consumers' threads arrived) and an "empty" one (the writer
  // thread has read it).
  // (Deferred: dS in set `set`, consumer c's at set * kConsumers + c.)
  auto sDS = [&](int c, int set = 0) {
    return base + T::kDsOffset + (set * T::kConsumers + c) * T::kDsBytes;
  };
  // (u is a slot: tile u % kDqTiles of set u / kDqTiles; step s uses set s % kDqBuffers, at
  // phase (s / kDqBuffers) & 1 of its barriers.)
  auto sDQ = [&](int u) { return base + T::kDqOffset + u * T::kDqBytes; };
  auto bar_dq_full = [&](int u) { return bar_kv + 8 * (1 + 2 * kStages + u); };
  auto bar_dq_empty = [&](int u) { return bar_kv + 8 * (1 + 2 * kStages + T::kDqBarSlots + u); };
  auto dq_slot = [](int u, int s) { return u + T::kDqTiles * (s % T::kDqBuffers); };
  // (The barriers' slot of step s's tile u: the same as its memory's unless two writers share
  // a set.)
  auto dq_bar = [&](int u, int s) {
    if constexpr (T::kDqWriters == T::kDqBuffers) return dq_slot(u, s);
    return u + T::kDqTiles * (s % T::kDqWriters);
  };
  auto dq_phase = [](int s) { return (s / T::kDqWriters) & 1; };
  // Persistent: K_j and V_j free for the next tile, and the next tile's index (-1: none left),
  // written by the producer before it arrives on bar_kv.
  [[maybe_unused]] const uint32_t bar_kv_empty = bar_kv + 8 * (T::kBarriers - 1);
  [[maybe_unused]] const uint32_t next_index = bar_kv + 8 * T::kBarriers;

  const int tid = threadIdx.x, wg = tid / 128;
  [[maybe_unused]] const int tiles = ceil_div(args.S_k, kBlockN) * args.B * args.H_kv;

  if (tid == 0) {
    mbar_init(bar_kv, 1);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bar_full(st), 1);
      mbar_init(bar_empty(st), 128 * T::kConsumers);
    }
    if constexpr (T::kFused) {
      for (int u = 0; u < T::kDqBarSlots; ++u) {
        mbar_init(bar_dq_full(u), 128 * T::kConsumers / T::kDqTiles);
        mbar_init(bar_dq_empty(u), 1);
      }
    }
    // With the TMA's epilogue, each consumer's storing thread arrives once more (below).
    if constexpr (T::kPersistent)
      mbar_init(bar_kv_empty,
                128 * T::kConsumers + T::kDqWriters + (T::kStoreDkvByTma ? T::kConsumers : 0));
    mbar_init_fence();
  }
  __syncthreads();

  // The block's key tiles: blockIdx.x alone, or (persistent) those the producer takes from the
  // counter until none is left, each handed to the consumers and the writer with K_j and V_j
  // (on bar_kv, tile n of the block at phase n). Tiles are taken in ascending order by blocks
  // that run, so the lowest tile not finished is always being worked on, and its dQ adds wait
  // only on lower tiles (finished): the ordered dQ cannot deadlock, however many blocks are
  // resident (a fixed assignment could wait on a block that some other kernel keeps off the
  // device). Each role counts `steps`, the stage uses (and dQ tiles) of the block's tiles
  // before the current one, which the barriers' phases continue from.
  auto tile_index = [&](int n) -> int {
    if constexpr (T::kPersistent) {
      mbar_wait(bar_kv, n & 1);
      return ld_shared_s32(next_index);
    } else {
      if (n > 0) return -1;
      mbar_wait(bar_kv, 0);
      return static_cast<int>(blockIdx.x);
    }
  };

  if (wg == 0) {  // the producer
    setmaxnreg_dec<T::kProducerRegs>();
    if (tid == 0) {
      for (int n = 0, steps = 0;; ++n) {
        int index = static_cast<int>(blockIdx.x);
        if constexpr (T::kPersistent) {
          index = atomicAdd(args.tile_counter, 1);
          if (index >= tiles) index = -1;
        } else if (n > 0) {
          break;
        }
        const KeyTileSteps<T> w(args, index < 0 ? 0 : index);
        const int total = index < 0 ? 0 : w.total;
        // Alg. 2 line 7: K_j and V_j, once the last tile's consumers are past its epilogue
        // (which stages over them) and its writer has read the index; a tile no query sees
        // gets the index alone.
        auto load_kv = [&] {
          if constexpr (T::kPersistent) {
            mbar_wait(bar_kv_empty, (n & 1) ^ 1);
            st_shared_s32(next_index, index);
          }
          if (total == 0) {
            mbar_arrive(bar_kv);
            return;
          }
          mbar_expect_tx(bar_kv, 2 * T::kKVBytes);
#pragma unroll
          for (int cb = 0; cb < T::kColBlocks; ++cb) {
            tma_load_4d(sK + cb * (kBlockN * kSwizzleBytes), &tmap_k, bar_kv, cb * kBlockCols, w.n0,
                        w.h_kv, w.b);
            tma_load_4d(sV + cb * (kBlockN * kSwizzleBytes), &tmap_v, bar_kv, cb * kBlockCols, w.n0,
                        w.h_kv, w.b);
          }
        };
        // Line 10, for every step, into the next free stage; after the block's first tile, the
        // first stages before K_j and V_j, as they free during the last tile's last steps.
        // Step `it` is step k of the walk of query head hq (counted, not divided: fewer of the
        // producer's registers).
        const int kv_at = n == 0 ? 0 : (total < kStages ? total : kStages);
        for (int it = 0, k = 0, hq = w.h_kv * args.group; it < total;
             ++it, k = k + 1 == w.per_head ? (++hq, 0) : k + 1) {
          if (it == kv_at) load_kv();
          const int s = steps + it, st = s % kStages;
          const int m0 = w.query_tile(k) * kBlockM;
          mbar_wait(bar_empty(st), ((s / kStages) & 1) ^ 1);
          mbar_expect_tx(bar_full(st), T::kStageBytes);
#pragma unroll
          for (int cb = 0; cb < T::kColBlocks; ++cb) {
            tma_load_4d(sQ(st) + cb * (kBlockM * kSwizzleBytes), &tmap_q, bar_full(st),
                        cb * kBlockCols, m0, hq, w.b);
            tma_load_4d(sdO(st) + cb * (kBlockM * kSwizzleBytes), &tmap_do, bar_full(st),
                        cb * kBlockCols, m0, hq, w.b);
          }
          const int64_t ws = (static_cast<int64_t>(w.b) * args.H + hq) * args.S_q_pad + m0;
          const uint32_t vec = base + vec_offset(st);
          bulk_load(vec, args.lse2 + ws, T::kVecBytes, bar_full(st));
          bulk_load(vec + T::kVecBytes, args.dsum + ws, T::kVecBytes, bar_full(st));
        }
        if (kv_at == total) load_kv();
        if (index < 0) break;
        steps += total;
      }
    }
    if constexpr (T::kFused) {
      // Writer w (thread 32 + 32 w: a warp each, so that their polls do not serialize) takes
      // the steps of dQ set w.
      if (tid == 32 || (T::kDqWriters == 2 && tid == 64)) {
        const int writer = tid / 32 - 1;
        // The dQ writer (Alg. 2 line 16's sum over key tiles): for every step, the consumers'
        // dQ tiles into the query tile's float32 accumulator. Ordered: key tile j adds to
        // query tile i after the j tiles before it (every key tile below j sees the queries
        // j sees, and is taken earlier: the blocks it waits for are running or done).
        // By rows each consumer's 64 rows are a tile of the accumulator of their own, with
        // their own counter; by columns the step's tile is one.
        constexpr int kTilesPerStep = T::kDqTiles;
        const int m_tiles_pad = args.S_q_pad / kDqTileRows;
        for (int n = 0, steps = 0;; ++n) {
          const int index = tile_index(n);
          if constexpr (T::kPersistent) mbar_arrive(bar_kv_empty);
          if (index < 0) break;
          const KeyTileSteps<T> w(args, index);
          const int j = w.n0 / kBlockN;
          // The step's tiles are all in flight before the writer waits on them; the consumers
          // get a tile back once it has been read, and (ordered) the next key tile may add
          // once it has been written: the writer's latency per step is one round trip, not one
          // per tile and two in the consumers' way (run 15).
          for (int it = 0, k = 0, hq = w.h_kv * args.group; it < w.total;
               ++it, k = k + 1 == w.per_head ? (++hq, 0) : k + 1) {
            const int s = steps + it;
            if (T::kDqWriters == 2 && s % 2 != writer) continue;
            const int64_t first_tile = (static_cast<int64_t>(w.b) * args.H + hq) * m_tiles_pad +
                                       kTilesPerStep * w.query_tile(k);
#pragma unroll
            for (int u = 0; u < kTilesPerStep; ++u) {
              if constexpr (T::kDqMode == kDqOrdered) {
                semaphore_wait_equal(args.dq_semaphore + first_tile + u, j);
                fence_proxy_async_global();
              }
              mbar_wait(bar_dq_full(dq_bar(u, s)), dq_phase(s));
              float* accum = args.dq_accum + (first_tile + u) * (kDqTileRows * kD);
              // Key tile 0 adds first (BwdTraitsDqFirstStore): it stores.
              if (T::kDqFirstStore && j == 0)  // the tile whole, by its map (dq_accum_map)
                tma_store_3d(&tmap_dq_accum, sDQ(dq_slot(u, s)), 0, 0,
                             static_cast<int>(first_tile + u));
              else
                bulk_reduce_add_f32(accum, sDQ(dq_slot(u, s)), T::kDqBytes);
            }
            bulk_wait_read();
#pragma unroll
            for (int u = 0; u < kTilesPerStep; ++u) mbar_arrive(bar_dq_empty(dq_bar(u, s)));
            if constexpr (T::kDqMode == kDqOrdered) {
              bulk_wait_complete();  // written, before the next key tile may add
              fence_proxy_async_global();
#pragma unroll
              for (int u = 0; u < kTilesPerStep; ++u)
                semaphore_release_add(args.dq_semaphore + first_tile + u);
            }
          }
          steps += w.total;
        }
        bulk_wait_complete();
      }
    }
    return;
  }

  setmaxnreg_inc<T::kConsumerRegs>();
  // The consumer's index, broadcast from lane 0 so that the compiler knows it is the same in
  // every lane and keeps the shared memory descriptors that depend on it in uniform registers.
  const int c = __shfl_sync(0xffffffffu, wg - 1, 0);
  const int ctid = tid - 128, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int lane_row = c * 64 + ((tid % 128) / 32) * 16 + g;  // keys lane_row (+ 8) of the tile
  constexpr int kNT = kBlockM / 8;                            // 8-query column tiles of S^T

  // S^T or dP^T = (K_j or V_j) (Q_i or dO_i)^T over the head dim, both K-major.
  auto issue_transposed_scores = [&](float(&acc)[kBlockM / 2], uint32_t rows, uint32_t cols) {
    const uint64_t a0 = make_smem_desc(rows + c * (64 * kSwizzleBytes), 16, kSwizzleAtom);
    const uint64_t b0 = make_smem_desc(cols, 16, kSwizzleAtom);
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t blk = ks / 4, k_bytes = (ks % 4) * 32;
      const uint64_t a = smem_desc_advance(a0, blk * (kBlockN * kSwizzleBytes) + k_bytes);
      const uint64_t bq = smem_desc_advance(b0, blk * (kBlockM * kSwizzleBytes) + k_bytes);
      WgmmaSS<Element, kBlockM>::run(acc, a, bq, ks > 0 ? 1 : 0);
    }
  };
  // A C tile rounded to the input type, as the A fragments of the next product.
  auto pack = [&](uint32_t(&frag)[kBlockM / 16][4], const float(&acc)[kNT][4]) {
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        frag[kk][e] = pack_pair<Element>(acc[2 * kk + e / 2][2 * (e % 2)],
                                         acc[2 * kk + e / 2][2 * (e % 2) + 1]);
  };

  // Fused, line 16 for this consumer's keys. dS^T (keys x queries in the registers) goes to
  // shared memory as dS (queries x keys, K-major, the A of dQ = dS K): each 8 x 8 matrix of
  // ds_frag[kk] transposed by stmatrix, stored row r (query 16 kk + 8 (m / 2) + r) receiving
  // keys 16 w + 8 (m % 2) .. + 7, which is 16-byte chunk 2 w + m % 2 of the row, swizzled.
  const int warp = (tid % 128) / 32;
  auto store_ds = [&](const uint32_t(&frag)[kBlockM / 16][4], int set = 0) {
    const int m = lane / 8, r = lane % 8;
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      const int q = 16 * kk + 8 * (m / 2) + r;
      stmatrix_x4_trans(sDS(c, set) + q * kSwizzleBytes + (((2 * warp + m % 2) ^ r) * 16),
                        frag[kk]);
    }
  };
  // dQ_i = dS K_j over the whole key tile: both consumers' dS (keys 0-63 in sDS(0), 64-127 in
  // sDS(1)) against all of K_j, 64 columns of dQ (`half`) at a time; by rows (128-query steps)
  // this consumer's 64 query rows of dS, by columns (64-query steps) all 64 rows and the
  // columns half = c. Stored into a dQ tile in register order (float4 k of thread x at
  // ((8 half + k) x 128 + x) x 16 bytes: a warp's stores are 512 contiguous bytes), and handed
  // to the writer.
  auto issue_dq = [&](float(&acc)[32], int half, int set = 0) {
    constexpr uint32_t kRowsPerConsumer = T::kDqByRows ? 64 * kSwizzleBytes : 0;
    const uint64_t a0 = make_smem_desc(sDS(0, set) + c * kRowsPerConsumer, 16, kSwizzleAtom);
    const uint64_t b0 = make_smem_desc(sK + half * (kBlockN * kSwizzleBytes),
                                       kBlockN * kSwizzleBytes, kSwizzleAtom);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint64_t a = smem_desc_advance(a0, (kk / 4) * T::kDsBytes + (kk % 4) * 32);
      const uint64_t bk = smem_desc_advance(b0, kk * (16 * kSwizzleBytes));
      WgmmaSSt<Element, 64>::run(acc, a, bk, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  auto store_dq = [&](int u, const float(&acc)[32], int half) {
    float* out = reinterpret_cast<float*>(base_ptr + (sDQ(u) - base));
#pragma unroll
    for (int k = 0; k < 8; ++k)
      *reinterpret_cast<float4*>(out + ((half * 8 + k) * 128 + tid % 128) * 4) =
          make_float4(acc[4 * k], acc[4 * k + 1], acc[4 * k + 2], acc[4 * k + 3]);
  };

  // Deferred: dQ of step sd (in acc) to its tile for the writer; by rows the other 64-column
  // halves are made here from dS set `set`.
  [[maybe_unused]] auto hand_dq = [&](int sd, float(&acc)[32], int set) {
    const int tile = T::kDqByRows ? c : 0, first_half = T::kDqByCols ? c : 0;
    const int u = dq_slot(tile, sd);
    if constexpr (T::kDqWriters == T::kDqBuffers) {
      mbar_wait(bar_dq_empty(u), dq_phase(sd) ^ 1);  // the writer has read the set's last
    } else if (sd > 0) {  // step sd - 1's writer has read the set (and the one before it had)
      mbar_wait(bar_dq_empty(dq_bar(tile, sd - 1)), dq_phase(sd - 1));
    }
    store_dq(u, acc, first_half);
    if constexpr (T::kDqByRows) {
#pragma unroll
      for (int half = 1; half < kD / 64; ++half) {
        issue_dq(acc, half, set);
        wgmma_wait<0>();
        fence_registers(acc);
        store_dq(u, acc, half);
      }
    }
    fence_proxy_async_shared();  // read by the TMA (the async proxy)
    mbar_arrive(bar_dq_full(dq_bar(tile, sd)));
  };
  // Deferred: named barrier 6 + 2 c + s % 2 is consumer c's dS_s in place, and c done reading
  // the set's dS before it (its dQ product of step s - 1 complete); c arrives, the other waits.
  // Two per consumer, by the step's parity, since a consumer may arrive for step s + 1 before
  // the other has waited for step s. Turns: barrier 10 + c is consumer c's turn to issue.
  [[maybe_unused]] auto ds_ready = [](int c_of, int s) { return 6 + 2 * c_of + (s & 1); };
  if constexpr (T::kDqDeferred) {
    if (c == 1) named_bar_arrive(10, 256);  // consumer 0 goes first
  }

  // (A grid of one block per tile runs the body once: as a loop, ptxas spilled 400 bytes.)
  for (int n = 0, steps = 0; T::kPersistent || n < 1; ++n) {
    const int index = tile_index(n);
    if (index < 0) break;
    const KeyTileSteps<T> w(args, index);
    const int n0 = w.n0, keys_valid = w.keys_valid;

    float acc_dk[kD / 2], acc_dv[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) acc_dk[i] = acc_dv[i] = 0.0f;

    // dV_j or dK_j += (P^T or dS^T) (dO_i or Q_i): A from registers, B MN-major (queries as
    // rows, the head dim contiguous).
    auto issue_key_gradient = [&](float(&acc)[kD / 2], const uint32_t(&a)[kBlockM / 16][4],
                                  uint32_t rows) {
      const uint64_t b0 = make_smem_desc(rows, kBlockM * kSwizzleBytes, kSwizzleAtom);
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        WgmmaRS<Element, kD>::run(acc, a[kk], smem_desc_advance(b0, kk * (16 * kSwizzleBytes)), 1);
    };

    // One step (s of the block, query tile m0). `special`: whether the step's tile crosses the
    // causal diagonal or holds a query that sees one key; a compile-time constant, so that the
    // other steps run no index math (the mask's compares were predicated into every step, 133
    // ISETP and 64 FSEL of the d = 64 fused kernel's 1,066 instructions a step, run 19b; and
    // with the single-key rows' code in both copies ptxas spilled).
    auto step = [&](int s, int m0, bool needs_mask, bool has_single, auto first_step,
                    auto special) {
      // Deferred: a tile's first step has no dQ of a step before it (a compile-time constant:
      // products issued under a run-time condition made ptxas serialize every wgmma, C7512).
      [[maybe_unused]] constexpr bool first = decltype(first_step)::value;
      const int st = s % kStages;
      const float* sL2 = reinterpret_cast<const float*>(base_ptr + vec_offset(st));
      const float* sD = sL2 + kBlockM;
      mbar_wait(bar_full(st), (s / kStages) & 1);

      float acc_s[kNT][4], acc_dp[kNT][4];
      float(&flat_s)[kBlockM / 2] = *reinterpret_cast<float(*)[kBlockM / 2]>(&acc_s);
      float(&flat_dp)[kBlockM / 2] = *reinterpret_cast<float(*)[kBlockM / 2]>(&acc_dp);
      if constexpr (T::kDqDeferred) named_bar_sync(10 + c, 256);
      wgmma_fence();
      issue_transposed_scores(flat_s, sK, sQ(st));
      if constexpr (T::kDqByRows) {  // P^T under dP^T's product (run 14b: 1-3% faster)
        wgmma_commit();
        issue_transposed_scores(flat_dp, sV, sdO(st));
        wgmma_commit();
        if constexpr (T::kDqDeferred) named_bar_arrive(10 + (1 - c), 256);
        wgmma_wait<1>();
        fence_registers(flat_s);
      } else {
        issue_transposed_scores(flat_dp, sV, sdO(st));
        wgmma_commit();
        if constexpr (T::kDqDeferred) named_bar_arrive(10 + (1 - c), 256);
        wgmma_wait<0>();
        fence_registers(flat_s);
        fence_registers(flat_dp);
      }

      // Line 12. Queries past S_q have L' = +inf in the workspace: P = 0 with no compare.
      if constexpr (!decltype(special)::value) needs_mask = has_single = false;
      p_transposed_from_scores(acc_s, sL2, args, needs_mask, has_single, n0, lane_row, m0, t);
      if constexpr (T::kFused) {
        // Keys past S_k (zero rows of K and V) have scores 0 and P = 2^(-L'), which overflows
        // for a row whose scores are all very negative; their dK and dV rows are never stored,
        // but dQ would take inf * 0 = NaN from them: P = 0 there.
        if (keys_valid < kBlockN) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf)
            if (lane_row + 8 * hf >= keys_valid)
#pragma unroll
              for (int nt = 0; nt < kNT; ++nt) acc_s[nt][2 * hf] = acc_s[nt][2 * hf + 1] = 0.0f;
        }
      }
      uint32_t p_frag[kBlockM / 16][4], ds_frag[kBlockM / 16][4];
      if constexpr (T::kDsFirst) {
        if constexpr (T::kDqByRows) {  // dP^T's product may still run
          wgmma_wait<0>();
          fence_registers(flat_dp);
        }
        ds_transposed(acc_dp, acc_s, acc_dp, sD, args, has_single, m0, t);  // line 15
        pack(p_frag, acc_s);
        pack(ds_frag, acc_dp);
        if constexpr (T::kDqDeferred) {
          wgmma_fence();
          issue_key_gradient(acc_dv, p_frag, sdO(st));  // line 13
          issue_key_gradient(acc_dk, ds_frag, sQ(st));  // line 17
          wgmma_commit();
          // dS_s into set s % 2 once the other consumer's last reads of it (step s - 2's dQ)
          // are complete, as its arrival for step s - 1 says (a tile's first step: the last
          // tile's epilogue barriers said so). Then line 16 of step s - 1 (its dS set, both
          // halves), under dV's and dK's products.
          if (!first) named_bar_sync(ds_ready(1 - c, s - 1), 256);
          store_ds(ds_frag, s % 2);
          fence_proxy_async_shared();
          float acc_dq[32];
          if (!first) issue_dq(acc_dq, T::kDqByCols ? c : 0, (s - 1) % 2);
          wgmma_wait<0>();
          fence_registers(acc_dv);
          fence_registers(acc_dk);
          mbar_arrive(bar_empty(st));
          named_bar_arrive(ds_ready(c, s), 256);
          if (!first) {
            fence_registers(acc_dq);
            hand_dq(s - 1, acc_dq, (s - 1) % 2);
          }
          return;
        }
        wgmma_fence();
        issue_key_gradient(acc_dv, p_frag, sdO(st));  // line 13
        issue_key_gradient(acc_dk, ds_frag, sQ(st));  // line 17
        wgmma_commit();
      } else {
        pack(p_frag, acc_s);
        wgmma_fence();
        issue_key_gradient(acc_dv, p_frag, sdO(st));  // line 13
        wgmma_commit();

        ds_transposed(acc_s, acc_dp, sD, args, has_single, m0, t);  // line 15
        pack(ds_frag, acc_s);
        wgmma_fence();
        issue_key_gradient(acc_dk, ds_frag, sQ(st));  // line 17
        wgmma_commit();
      }
      if constexpr (T::kFused) {
        // Line 16: dS beside dK's product; once both consumers' dS is in shared memory (named
        // barriers over the two), dQ_i over the whole key tile, by rows or by columns, 64
        // columns at a time, into this consumer's dQ tile u for the writer.
        named_bar_sync(5, 256);  // both are done with the last dS (and the last epilogue)
        store_ds(ds_frag);
        fence_proxy_async_shared();
        named_bar_sync(4, 256);  // both consumers' dS is whole before either's dQ reads it
        const int u = dq_slot(T::kDqByRows ? c : 0, s), first_half = T::kDqByCols ? c : 0;
        float acc_dq[32];
        issue_dq(acc_dq, first_half);
        wgmma_wait<0>();
        fence_registers(acc_dv);
        fence_registers(acc_dk);
        fence_registers(acc_dq);
        mbar_arrive(bar_empty(st));
        mbar_wait(bar_dq_empty(u), dq_phase(s) ^ 1);  // the writer has read the set's last
        store_dq(u, acc_dq, first_half);
        if constexpr (T::kDqByRows) {
#pragma unroll
          for (int half = 1; half < kD / 64; ++half) {
            issue_dq(acc_dq, half);
            wgmma_wait<0>();
            fence_registers(acc_dq);
            store_dq(u, acc_dq, half);
          }
        }
        fence_proxy_async_shared();  // read by the TMA (the async proxy)
        mbar_arrive(bar_dq_full(u));
      } else {
        wgmma_wait<0>();
        fence_registers(acc_dv);
        fence_registers(acc_dk);
        mbar_arrive(bar_empty(st));
      }
    };
    // The special tiles are the query tiles [m_begin, special_end): the causal diagonal and
    // the single-key rows sit in the first query tiles a key tile sees. Each head's walk runs
    // them in a copy of the step of their own.
    auto is_special = [&](int m0) {
      return (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(m0) + args.causal_offset) ||
             tile_has_single_key_row(args, m0, kBlockM);
    };
    int special_end = w.m_begin;
    while (special_end < w.m_tiles && is_special(special_end * kBlockM)) ++special_end;
    const int specials = special_end - w.m_begin;
    // Step `it` is step k of its head's walk, at query tile m0.
    for (int it = 0, k = 0; it < w.total; ++it, k = k + 1 == w.per_head ? 0 : k + 1) {
      const int m0 = w.query_tile(k) * kBlockM;
      auto run = [&](auto first_step) {
        if (T::kWalkDown ? k >= w.per_head - specials : k < specials)
          step(steps + it, m0,
               args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(m0) + args.causal_offset,
               tile_has_single_key_row(args, m0, kBlockM), first_step, std::true_type{});
        else
          step(steps + it, m0, false, false, first_step, std::false_type{});
      };
      if constexpr (T::kDqDeferred) {
        if (it == 0)
          run(std::true_type{});
        else
          run(std::false_type{});
      } else {
        if (T::kWalkDown ? k >= w.per_head - specials : k < specials)
          step(steps + it, m0,
               args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(m0) + args.causal_offset,
               tile_has_single_key_row(args, m0, kBlockM), std::false_type{}, std::true_type{});
        else
          step(steps + it, m0, false, false, std::false_type{}, std::false_type{});
      }
    }
    if constexpr (T::kDqDeferred) {  // the tile's last step's line 16
      if (w.total > 0) {
        const int last = steps + w.total - 1;
        float acc_dq[32];
        named_bar_sync(ds_ready(1 - c, last), 256);
        issue_dq(acc_dq, T::kDqByCols ? c : 0, last % 2);
        wgmma_wait<0>();
        fence_registers(acc_dq);
        hand_dq(last, acc_dq, last % 2);
      }
    }
    steps += w.total;

    // Line 19: dK_j (times the scale) and dV_j in the gradient dtype; a key tile no query sees
    // gets zeros. Every consumer is past its last product before the tiles' memory is reused.
    // (Written from the registers instead, with K_j and V_j loading under the stores, the
    // persistent kernel was 9-16% slower at d = 128: run 26b.)
    named_bar_sync(1, 128 * T::kConsumers);
    if constexpr (T::kStoreDkvByTma) {
      // Each consumer's rows of dK_j over K_j's (the other consumer's dQ product, which reads
      // every row of K_j, is done: the barrier above) and of dV_j over V_j's, then out by the
      // TMA, which clips the rows past S_k and the columns past d.
      const float dk_mul[2] = {args.scale, args.scale}, dv_mul[2] = {1.0f, 1.0f};
      stage_rows<Element, kD, kBlockN>(sK, acc_dk, dk_mul, c * 64, warp, lane);
      stage_rows<Element, kD, kBlockN>(sV, acc_dv, dv_mul, c * 64, warp, lane);
      fence_proxy_async_shared();
      named_bar_sync(2 + c, 128);
      // Every thread arrives for itself, being done with the tile's index and its staging, and
      // the storing thread once more when the TMA has read the rows the next K_j and V_j load
      // over. (One arrival counting 128 for the warpgroup, after the barrier, orders the same
      // accesses, but racecheck credits an arrival to its own thread alone: it reported the
      // producer's next index as written over the other threads' read, run 35b.)
      mbar_arrive(bar_kv_empty);
      if (ctid % 128 == 0) {
#pragma unroll
        for (int cb = 0; cb < kD / kBlockCols; ++cb) {
          const uint32_t rows = cb * (kBlockN * kSwizzleBytes) + c * (64 * kSwizzleBytes);
          tma_store_4d(&tmap_dk, sK + rows, cb * kBlockCols, n0 + c * 64, w.h_kv, w.b);
          tma_store_4d(&tmap_dv, sV + rows, cb * kBlockCols, n0 + c * 64, w.h_kv, w.b);
        }
        bulk_wait_read();  // K_j's and V_j's rows read: the next tile's may load over them
        mbar_arrive(bar_kv_empty);
      }
    } else {
      float* sOut = reinterpret_cast<float*>(base_ptr);
      store_consumer_tile<kBlockN, kD, 128 * T::kConsumers, T::kEpilogueUnroll>(
          sOut, acc_dk, args.scale, args.dk, args.grad_code, row_offset(args.dk, w.b, n0, w.h_kv),
          keys_valid, args.d, lane_row, t, ctid, 1);
      store_consumer_tile<kBlockN, kD, 128 * T::kConsumers, T::kEpilogueUnroll>(
          sOut, acc_dv, 1.0f, args.dv, args.grad_code, row_offset(args.dv, w.b, n0, w.h_kv),
          keys_valid, args.d, lane_row, t, ctid, 1);
      if constexpr (T::kPersistent) {
        // The TMA (the async proxy) writes the next K_j and V_j over the staging just written.
        fence_proxy_async_shared();
        mbar_arrive(bar_kv_empty);
      }
    }
  }
  if constexpr (T::kStoreDkvByTma) {
    if (ctid % 128 == 0) bulk_wait_complete();  // the last tile's stores written
  }
  if constexpr (T::kDqDeferred) {
    if (c == 0) named_bar_sync(10, 256);  // consumer 1's last turn passed
  }
}

}  // namespace flashref::cuda::kernels::sm90
