// Forward pass on Hopper (sm_90a): Algorithm 1 on wgmma, with the tiles brought by the TMA and
// the block split by role (FlashAttention-3's structure).
//
// Grid: one block per (query tile, head, batch), longest query tiles first within sections of
// heads that share L2 (QueryTileSchedule's sectioned order), or with kPersistent one block per
// multiprocessor that loops over query tiles (tile_of_round). Warpgroup 0 is the producer: after
// lending its registers (setmaxnreg), one thread loads Q_i (once the consumers have released the
// previous tile's) and then, for each key tile j and stage s (the block's running count of K/V
// loads mod kStages), waits for s to be empty and loads K_j and V_j into it, each completing on its
// own "full" mbarrier. Warpgroups 1..kConsumers are the consumers, each owning 64 query rows; they
// wait on "full" and arrive on "empty", and release Q once the tile's last S has landed. With
// kHandTile (FwdTraitsHandTile) Q has two buffers, taken in turn, and the producer hands each
// tile's coordinates to the consumers with it, so that they start a tile without decoding it.
//
// A consumer, per key tile j (walked from the last to the first, so the masked tiles come
// first), with the products pipelined so that the softmax runs under a product:
//   S_j = Q_i K_j^T                  wgmma m64n{B_k}k16, Q and K from shared memory (line 9)
//   O += P~_{j-1} V_{j-1}            wgmma m64n{d}k16, P~ from registers, V MN-major (line 13)
//   wait for S_j; m, P~_j, l          lines 10-12 in the log2 domain, under the P~ V product
//   wait for P~ V; O *= 2^(m_{j-1} - m_j); release the stage of j-1
// and the last P~ V after the loop; then O / l and L (lines 15-16): L from the registers, O
// from the registers or (kStoreOByTma) staged in the last stage's K tile and stored by the TMA.
// The key tiles that cross the diagonal or the end of the keys (the first ones walked) run in a
// loop of their own; the full tiles' loop has no index compares.
// With kPingPong the consumers take turns issuing their pair of products (named barriers), so
// one warpgroup's softmax runs while another's products do; with kExpTurns they take them around
// the softmax's exponentials instead (FwdTraitsExpTurns). With kNarrowSteps a consumer whose
// rows see at most 64 keys of a key tile takes a narrow step (FwdTraitsNarrowSteps).
#pragma once

#include <cuda.h>

#include <type_traits>

#include "kernels/common/args.hpp"
#include "kernels/common/epilogue.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/fwd_rows_unfolded.cuh"
#include "kernels/sm90/fwd_softmax.cuh"
#include "kernels/sm90/fwd_traits.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/stage_rows.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace flashref::cuda::kernels::sm90 {

// The named barriers: 0 the block's, 1 + c the consumers' ping-pong turns, 3 + c consumer c's
// O staging (kStoreOByTma), kPinBarrier + c consumer c's arrive-only mark (kPinPvWait).
inline constexpr int kPinBarrier = 8;

template <typename T>
__global__ void __launch_bounds__(T::kThreads, 1)
    fwd_wgmma_kernel(const __grid_constant__ CUtensorMap tmap_q,
                     const __grid_constant__ CUtensorMap tmap_k,
                     const __grid_constant__ CUtensorMap tmap_v,
                     const __grid_constant__ CUtensorMap tmap_o, const AttnArgs args) {
  using Element = typename T::Element;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages;
  using Schedule = QueryTileSchedule<kBlockM, kBlockN>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + kSwizzleAtom - 1) & ~uint32_t(kSwizzleAtom - 1);
  // Q buffer qb (kQBuffers: one, or two in turn by the count of Q loads).
  auto sQ = [&](int qb) { return base + qb * T::kQBytes; };
  auto sK = [&](int st) { return base + T::kQBuffers * T::kQBytes + st * 2 * T::kKVBytes; };
  auto sV = [&](int st) { return sK(st) + T::kKVBytes; };
  const uint32_t bar_q0 = base + T::kTileBytes;
  auto bar_q = [&](int qb) { return qb == 0 ? bar_q0 : bar_q0 + 8 * (2 + 3 * kStages); };
  auto bar_k = [&](int st) { return bar_q0 + 8 * (1 + st); };
  auto bar_v = [&](int st) { return bar_q0 + 8 * (1 + kStages + st); };
  auto bar_empty = [&](int st) { return bar_q0 + 8 * (1 + 2 * kStages + st); };
  auto bar_q_empty = [&](int qb) { return bar_q0 + 8 * (1 + 3 * kStages) + (qb == 0 ? 0 : 16); };
  // kHandTile: tile coordinates (batch, head, first row, key tiles) for Q buffer qb.
  auto tile_words = [&](int qb) { return bar_q0 + 8 * (2 * T::kQBuffers + 3 * kStages) + 16 * qb; };
  // kStoreWarp: stage st's "O staged" barrier, and the store warp's "all stored".
  const uint32_t bar_o0 =
      bar_q0 + 8 * (2 * T::kQBuffers + 3 * kStages) + (T::kHandTile ? 16 * T::kQBuffers : 0);
  auto bar_o = [&](int st) { return bar_o0 + 8 * st; };
  const uint32_t bar_o_done = bar_o0 + 8 * kStages;

  // The block's query tiles: blockIdx.x, then (a persistent grid, smaller than the tile count)
  // one per round of gridDim.x, every other round walked backwards. The tiles are numbered
  // longest first within sections of heads (Schedule), so the snake pairs a
  // block's long tile of one round with a short one of the next and the blocks' totals stay
  // level (the launcher picks sections and grid for it, kernels/common/tile_order.hpp). One
  // block per tile: one round.
  const int m_blocks = ceil_div(args.S_q, kBlockM);
  const int tiles = m_blocks * args.B * args.H;
  auto tile_of_round = [&](int r) {
    const int blocks = static_cast<int>(gridDim.x), x = static_cast<int>(blockIdx.x);
    return r * blocks + ((r & 1) ? blocks - 1 - x : x);
  };
  auto key_tiles_end = [&](const Schedule& tile) {
    const int n_blocks = ceil_div(args.S_k, kBlockN);
    return args.causal ? tile.causal_key_tiles_end(args, n_blocks) : n_blocks;
  };

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    mbar_init(bar_q(0), 1);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bar_k(st), 1);
      mbar_init(bar_v(st), 1);
      mbar_init(bar_empty(st), 128 * T::kConsumers);
    }
    mbar_init(bar_q_empty(0), 128 * T::kConsumers);
    if constexpr (T::kStoreWarp) {
      for (int st = 0; st < kStages; ++st) mbar_init(bar_o(st), 128 * T::kConsumers);
      mbar_init(bar_o_done, 1);
    }
    if constexpr (T::kQBuffers == 2) {
      mbar_init(bar_q(1), 1);
      mbar_init(bar_q_empty(1), 128 * T::kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // the producer
    setmaxnreg_dec<T::kProducerRegs>();
    if (tid == 0) {
      auto producer_wait = [](uint32_t bar, uint32_t parity) {
        if constexpr (T::kProducerSuspends)
          mbar_wait_suspending<10000>(bar, parity);
        else
          mbar_wait(bar, parity);
      };
      int it = 0, q_loads = 0;  // K/V stage uses and Q loads, over the block's tiles
      for (int r = 0;; ++r) {
        const int index = tile_of_round(r);
        if (index >= tiles) break;
        const Schedule tile(args, index, m_blocks);
        const int n_end = key_tiles_end(tile);
        const int qb = q_loads % T::kQBuffers;
        if constexpr (T::kHandTile) {
          // The tile's coordinates, with Q (a tile no row of which sees a key: alone), once
          // the consumers are done with the buffer's last tile.
          producer_wait(bar_q_empty(qb), ((q_loads / T::kQBuffers) & 1) ^ 1);
          ++q_loads;
          st_shared_s32(tile_words(qb), tile.b);
          st_shared_s32(tile_words(qb) + 4, tile.h);
          st_shared_s32(tile_words(qb) + 8, tile.row0);
          st_shared_s32(tile_words(qb) + 12, n_end);
          if (n_end == 0) {
            mbar_arrive(bar_q(qb));
            continue;
          }
        } else {
          if (n_end == 0) continue;  // the consumers write it; nothing to load
          // Alg. 1 line 5: load Q_i, once the consumers are done with the previous tile's.
          producer_wait(bar_q_empty(qb), (q_loads & 1) ^ 1);
          ++q_loads;
        }
        mbar_expect_tx(bar_q(qb), T::kQBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb) {
          if constexpr (T::kL2Hints)
            tma_load_4d_hinted(sQ(qb) + cb * (kBlockM * kSwizzleBytes), &tmap_q, bar_q(qb),
                               cb * kBlockCols, tile.row0, tile.h, tile.b, l2_policy_evict_first());
          else
            tma_load_4d(sQ(qb) + cb * (kBlockM * kSwizzleBytes), &tmap_q, bar_q(qb),
                        cb * kBlockCols, tile.row0, tile.h, tile.b);
        }
        // Line 8, for every key tile, into the next free stage.
        for (int n = n_end - 1; n >= 0; --n, ++it) {
          const int st = it % kStages;
          producer_wait(bar_empty(st), ((it / kStages) & 1) ^ 1);
          auto load_kv = [&](uint32_t dst, const CUtensorMap* tmap, uint32_t bar) {
            mbar_expect_tx(bar, T::kKVBytes);
#pragma unroll
            for (int cb = 0; cb < T::kColBlocks; ++cb) {
              if constexpr (T::kL2Hints)
                tma_load_4d_hinted(dst + cb * (kBlockN * kSwizzleBytes), tmap, bar, cb * kBlockCols,
                                   n * kBlockN, tile.h_kv, tile.b, l2_policy_evict_last());
              else
                tma_load_4d(dst + cb * (kBlockN * kSwizzleBytes), tmap, bar, cb * kBlockCols,
                            n * kBlockN, tile.h_kv, tile.b);
            }
          };
          load_kv(sK(st), &tmap_k, bar_k(st));
          load_kv(sV(st), &tmap_v, bar_v(st));
        }
      }
    } else if (T::kStoreWarp && tid == 32) {  // the store warp (FwdTraitsStoreWarp)
      // Each tile's O sits in the K tile of its last stage, as the consumers count stages.
      int it = 0;
      uint32_t o_phase = 0;  // bit st: the parity of stage st's next "O staged" phase
      for (int r = 0;; ++r) {
        const int index = tile_of_round(r);
        if (index >= tiles) break;
        const Schedule tile(args, index, m_blocks);
        const int n_end = key_tiles_end(tile);
        if (n_end == 0) continue;  // the consumers write it
        it += n_end;
        const int st = (it - 1) % kStages;
        mbar_wait_sleeping(bar_o(st), (o_phase >> st) & 1);
        o_phase ^= 1u << st;
#pragma unroll
        for (int c = 0; c < T::kConsumers; ++c)
#pragma unroll
          for (int cb = 0; cb < T::kColBlocks; ++cb)
            tma_store_4d(&tmap_o,
                         sK(st) + cb * (kBlockM * kSwizzleBytes) + c * (64 * kSwizzleBytes),
                         cb * kBlockCols, tile.row0 + c * 64, tile.h, tile.b);
        bulk_wait_read();
        mbar_arrive_count(bar_empty(st), 128 * T::kConsumers);
      }
      bulk_wait_complete();
      mbar_arrive(bar_o_done);
    }
    return;
  }

  setmaxnreg_inc<T::kConsumerRegs>();
  const int c = T::kUniformConsumer ? __shfl_sync(0xffffffffu, wg - 1, 0) : wg - 1;
  const int lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r_lo = c * 64 + ((tid % 128) / 32) * 16 + g;  // rows r_lo and r_lo + 8 of the tile

  uint32_t q_tile = sQ(0);                                  // the current tile's Q buffer
  static_assert(!(T::kNarrowSteps && T::kTileOverlap), "narrow steps run without the overlap");
  constexpr int kNarrowN = T::kNarrowN;
  using Yes = std::true_type;
  using No = std::false_type;
  // A step's products and P~ over its columns: B_k, or kNarrowN in a narrow step (the first
  // kNarrowN of acc_s, the first kNarrowN / 16 k-steps of P~ V; FwdTraitsNarrowSteps). Arrays
  // come in as auto&: an array parameter whose size depends on T crashes cudafe++ 13.0 in a
  // generic lambda.
  // kDescAdvance (FwdTraitsDescAdvance): each k-step's descriptor from the step's first by
  // smem_desc_advance, one add, where make_smem_desc takes four (the same descriptors).
  auto issue_s = [&](auto& acc_s, int st, auto narrow) {  // S = Q_i K_j^T
    constexpr int kN = decltype(narrow)::value ? kNarrowN : kBlockN;
    [[maybe_unused]] const uint64_t a0 =
        T::kDescAdvance ? make_smem_desc(q_tile + c * (64 * kSwizzleBytes), 16, kSwizzleAtom) : 0;
    [[maybe_unused]] const uint64_t b0 =
        T::kDescAdvance ? make_smem_desc(sK(st), 16, kSwizzleAtom) : 0;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t blk = ks / 4, k_bytes = (ks % 4) * 32;
      const uint64_t a = T::kDescAdvance
                             ? smem_desc_advance(a0, blk * (kBlockM * kSwizzleBytes) + k_bytes)
                             : make_smem_desc(q_tile + blk * (kBlockM * kSwizzleBytes) +
                                                  c * (64 * kSwizzleBytes) + k_bytes,
                                              16, kSwizzleAtom);
      const uint64_t bk = T::kDescAdvance
                              ? smem_desc_advance(b0, blk * (kBlockN * kSwizzleBytes) + k_bytes)
                              : make_smem_desc(sK(st) + blk * (kBlockN * kSwizzleBytes) + k_bytes,
                                               16, kSwizzleAtom);
      WgmmaSS<Element, kN>::run(*reinterpret_cast<float(*)[kN / 2]>(&acc_s[0]), a, bk,
                                ks > 0 ? 1 : 0);
    }
  };
  float acc_o[kD / 2];
  auto issue_pv = [&](const auto& p, int st, auto narrow) {  // O += P~ V_j
    constexpr int kN = decltype(narrow)::value ? kNarrowN : kBlockN;
    [[maybe_unused]] const uint64_t v0 =
        T::kDescAdvance ? make_smem_desc(sV(st), kBlockN * kSwizzleBytes, kSwizzleAtom) : 0;
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint64_t bv = T::kDescAdvance ? smem_desc_advance(v0, kk * (16 * kSwizzleBytes))
                                          : make_smem_desc(sV(st) + kk * (16 * kSwizzleBytes),
                                                           kBlockN * kSwizzleBytes, kSwizzleAtom);
      WgmmaRS<Element, kD>::run(acc_o, p[kk], bv, 1);
    }
  };
  // P~ rounded to the input type, as the A fragments of the P~ V product.
  auto pack_p = [&](auto& p, const auto& acc_s, auto narrow) {
    constexpr int kN = decltype(narrow)::value ? kNarrowN : kBlockN;
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        p[kk][e] = pack_pair<Element>(acc_s[8 * kk + 2 * e], acc_s[8 * kk + 2 * e + 1]);
  };
  // Ping-pong: consumer c issues its products after barrier 1 + c, then lets the next go. The
  // chain runs on across the block's tiles (every consumer takes the same turns), and the
  // last consumer's final signal is taken by consumer 0 after its last tile.
  // With kExpTurns the same turns are taken around the softmax's exponentials instead
  // (exp_turn, below), and the products are issued without one.
  auto take_turn = [&]() {
    if constexpr (T::kPingPong && !T::kExpTurns) named_bar_sync(1 + c, 256);
  };
  auto pass_turn = [&]() {
    if constexpr (T::kPingPong && !T::kExpTurns) named_bar_arrive(1 + (c + 1) % T::kConsumers, 256);
  };
  // (fwd_softmax.cuh's ExpTurn: the hand-over waits for the sums, and the exponentials for the
  // turn's ticket, so that ptxas keeps them inside the turn.)
  std::conditional_t<T::kExpTurns, ExpTurn, NoTurn> exp_turn{};
  if constexpr (T::kExpTurns) exp_turn = ExpTurn{1 + c, 1 + (c + 1) % T::kConsumers};
  if constexpr (T::kPingPong) {
    if (c == T::kConsumers - 1) named_bar_arrive(1, 256);  // consumer 0 goes first
  }
  // kStoreOByTma: the stage whose K tile holds O on its way out (-1: none), released by the
  // warpgroup's first thread once the TMA has read it.
  int staged_stage = -1;
  const bool elected = tid % 128 == 0;
  auto release_staged_o = [&]() {
    if constexpr (T::kStoreOByTma && !T::kStoreWarp) {
      if (staged_stage >= 0) {
        if (elected) {
          bulk_wait_read();
          mbar_arrive_count(bar_empty(staged_stage), 128);
        }
        staged_stage = -1;
      }
    }
  };

  int it = 0, q_loads = 0;  // as the producer counts them
  // kTileOverlap: the next tile, read under the tail of the one before (its Q buffer and
  // coordinates), and whether its first step has run there (its m, l and P~ then carried over
  // in carried_m, carried_l and carried_p).
  int ahead_qb = 0, ahead_b = 0, ahead_h = 0, ahead_row0 = 0, ahead_n_end = 0;
  bool ahead_read = false, ahead_started = false;
  float carried_m[2], carried_l[2];
  uint32_t carried_p[kBlockN / 16][4];
  // Keys < limit are visible to the thread's two rows of the tile at `row0`.
  auto row_limits = [&](int row0, int(&limit)[2]) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int64_t last = static_cast<int64_t>(row0 + r_lo + hf * 8) + args.causal_offset;
      limit[hf] = args.causal ? static_cast<int>(max64(0, min64(args.S_k, last + 1))) : args.S_k;
    }
  };
  // Only tiles that cross the diagonal or the end of the keys compare indices. Both
  // conditions grow with n0, so walked from the last key tile down the masked tiles come
  // first and the rest run a loop with no index math (Alg. 1's full tiles).
  auto needs_mask_at = [&](int row0, int n0) {
    return n0 + kBlockN > args.S_k ||
           (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
  };
  // Whether this consumer's rows of the tile at row0 see kNarrowN keys or fewer past n0 (keys
  // below S_k and, causal, below its last row's limit): a narrow step (FwdTraitsNarrowSteps).
  // It implies needs_mask_at.
  auto narrow_at = [&](int row0, int n0) {
    if constexpr (!T::kNarrowSteps) return false;
    int64_t end = args.S_k;
    if (args.causal)
      end = min64(end, static_cast<int64_t>(row0) + c * 64 + 64 + args.causal_offset);
    // The same for every thread of the warp, and said so by the vote: a branch on a value the
    // compiler cannot prove warp-uniform took the descriptors' arithmetic off the uniform
    // datapath in every step of the kernel (R2UR before each wgmma; run 36a: 12% slower).
    return __all_sync(0xffffffff, end - n0 <= kNarrowN) != 0;
  };
  // Lines 10-12 on a narrow step's kNarrowN columns (the rest are masked: P~ = 0 there).
  // Returns whether the step rescaled (always, but with FwdTraitsLazyRescale).
  auto narrow_softmax = [&](float(&acc_s)[kBlockN / 2], float(&m)[2], float(&l)[2],
                            float(&alpha)[2], const int(&limit)[2], int n) {
    return step_softmax<T, kNarrowN, true>(*reinterpret_cast<float(*)[kNarrowN / 2]>(&acc_s), m, l,
                                           alpha, limit, n * kBlockN, t, args.scale_log2, exp_turn);
  };
  // Lines 10-12 on a tile's first key tile n, from m = -inf and l = 0.
  auto first_softmax = [&](float(&acc_s)[kBlockN / 2], float(&m)[2], float(&l)[2], float(&alpha)[2],
                           const int(&limit)[2], int row0, int n) {
    if constexpr (T::kExpTurns) {
      if (needs_mask_at(row0, n * kBlockN))
        online_softmax_turns<kBlockN, true, T::kTreeMax, T::kPolyExpEvery>(
            acc_s, m, l, alpha, limit, n * kBlockN, t, args.scale_log2, exp_turn);
      else
        online_softmax_turns<kBlockN, false, T::kTreeMax, T::kPolyExpEvery>(
            acc_s, m, l, alpha, limit, n * kBlockN, t, args.scale_log2, exp_turn);
    } else if (needs_mask_at(row0, n * kBlockN)) {
      online_softmax<kBlockN, T::kFoldScale, true, T::kTreeMax, T::kPolyExpEvery>(
          acc_s, m, l, alpha, limit, n * kBlockN, t, args.scale_log2);
    } else {
      online_softmax<kBlockN, T::kFoldScale, false, T::kTreeMax, T::kPolyExpEvery>(
          acc_s, m, l, alpha, limit, n * kBlockN, t, args.scale_log2);
    }
  };
  // Whether this thread marked a row past the fold's range (fwd_rows_unfolded.cuh).
  [[maybe_unused]] bool refold = false;
  for (int r = 0;; ++r) {
    const int index = tile_of_round(r);
    if (index >= tiles) break;
    int qb, b, h, row0, rows_valid, n_end;
    bool started = false;  // kTileOverlap: the first step ran under the last tile's tail
    if (T::kTileOverlap && ahead_read) {
      qb = ahead_qb, b = ahead_b, h = ahead_h, row0 = ahead_row0, n_end = ahead_n_end;
      rows_valid = min(kBlockM, args.S_q - row0);
      started = ahead_started;
      ahead_read = false;
    } else {
      qb = q_loads % T::kQBuffers;
      if constexpr (T::kHandTile) {  // from the producer, with Q
        mbar_wait(bar_q(qb), (q_loads / T::kQBuffers) & 1);
        ++q_loads;
        b = ld_shared_s32(tile_words(qb));
        h = ld_shared_s32(tile_words(qb) + 4);
        row0 = ld_shared_s32(tile_words(qb) + 8);
        n_end = ld_shared_s32(tile_words(qb) + 12);
        rows_valid = min(kBlockM, args.S_q - row0);
      } else {
        const Schedule tile(args, index, m_blocks);
        b = tile.b, h = tile.h, row0 = tile.row0, rows_valid = tile.rows_valid;
        n_end = key_tiles_end(tile);
      }
    }
    q_tile = sQ(qb);
    Element* o_tile = row_ptr<Element>(args.o, b, row0, h);
    float* lse_rows = args.lse + (static_cast<int64_t>(b) * args.H + h) * args.S_q + row0;
    if (n_end == 0) {  // no row of the tile sees a key: O = 0, L = -inf
      write_fully_masked_tile<kBlockM, kD, 128 * T::kConsumers>(o_tile, args.o.row_stride, lse_rows,
                                                                rows_valid, args.d, tid - 128);
      if constexpr (T::kHandTile) mbar_arrive(bar_q_empty(qb));
      continue;
    }

    int limit[2];
    row_limits(row0, limit);
    auto needs_mask = [&](int n0) { return needs_mask_at(row0, n0); };

    float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.0f, 0.0f}, alpha[2];
    uint32_t p_frag[kBlockN / 16][4];
    if (!T::kTileOverlap || !started) {
      // Alg. 1 line 6: O = 0, l = 0, m = -inf.
#pragma unroll
      for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.0f;
      if constexpr (!T::kHandTile) {
        mbar_wait(bar_q(qb), q_loads & 1);
        ++q_loads;
      }
    } else {  // m, l and P~ carried from the last tile's tail
#pragma unroll
      for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.0f;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) row_m[hf] = carried_m[hf], row_l[hf] = carried_l[hf];
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) p_frag[kk][e] = carried_p[kk][e];
    }
    int n = n_end - 1;
    // Whether the step before (its P~ V still to issue) was narrow.
    bool prev_narrow = false;
    if (!T::kTileOverlap || !started) {
      // The first key tile visited: S, softmax and P~ (no P~ V yet).
      auto first_step = [&](auto narrow) {
        const int st = it % kStages;
        float acc_s[kBlockN / 2];
        mbar_wait(bar_k(st), (it / kStages) & 1);
        take_turn();
        wgmma_fence();
        issue_s(acc_s, st, narrow);
        wgmma_commit();
        pass_turn();
        release_staged_o();  // the last tile's O, under this product
        wgmma_wait<0>();
        fence_registers(acc_s);
        if constexpr (decltype(narrow)::value)
          narrow_softmax(acc_s, row_m, row_l, alpha, limit, n);
        else
          first_softmax(acc_s, row_m, row_l, alpha, limit, row0, n);
        pack_p(p_frag, acc_s, narrow);
      };
      if constexpr (T::kNarrowSteps) {
        prev_narrow = narrow_at(row0, n * kBlockN);
        if (prev_narrow)
          first_step(std::true_type{});
        else
          first_step(std::false_type{});
      } else {  // (written out: the lambda moved a register in the other kernels' SASS)
        const int st = it % kStages;
        float acc_s[kBlockN / 2];
        mbar_wait(bar_k(st), (it / kStages) & 1);
        take_turn();
        wgmma_fence();
        issue_s(acc_s, st, No{});
        wgmma_commit();
        pass_turn();
        release_staged_o();  // the last tile's O, under this product
        wgmma_wait<0>();
        fence_registers(acc_s);
        first_softmax(acc_s, row_m, row_l, alpha, limit, row0, n);
        pack_p(p_frag, acc_s, No{});
      }
    }
    // Key tile n (below the first), after the product of the one before it; `narrow` and
    // `narrow_prev`, the widths of this step and of the one before; P~_{j-1} from p_in, P~_j
    // into p_out (the same array, or the other one with FwdTraitsTwoPBuffers).
    auto visit = [&](int n, auto masked, auto narrow, auto narrow_prev, const auto& p_in,
                     auto& p_out) {
      const int st = it % kStages, st_prev = (it - 1) % kStages;
      float acc_s[kBlockN / 2];
      mbar_wait(bar_k(st), (it / kStages) & 1);
      mbar_wait(bar_v(st_prev), ((it - 1) / kStages) & 1);
      take_turn();
      wgmma_fence();
      issue_s(acc_s, st, narrow);
      wgmma_commit();
      issue_pv(p_in, st_prev, narrow_prev);
      wgmma_commit();
      pass_turn();
      wgmma_wait<1>();  // S_j has landed; P~_{j-1} V_{j-1} may still run
      fence_registers(acc_s);
      bool rescaled = true;  // (the warp's vote with FwdTraitsLazyRescale: uniform)
      if constexpr (decltype(narrow)::value)
        rescaled = narrow_softmax(acc_s, row_m, row_l, alpha, limit, n);
      else
        rescaled = step_softmax<T, kBlockN, decltype(masked)::value>(
            acc_s, row_m, row_l, alpha, limit, n * kBlockN, t, args.scale_log2, exp_turn);
      if constexpr (T::kPinPvWait)  // (the softmax made before the wait: FwdTraitsPinPvWait)
        named_bar_arrive_after(kPinBarrier + c, 128,
                               __float_as_uint(row_l[0]) | __float_as_uint(row_l[1]));
      wgmma_wait<0>();
      fence_registers(acc_o);
      mbar_arrive(bar_empty(st_prev));
      // Line 13's first term: O = diag(2^(m_{j-1} - m_j)) O.
      if (!T::kLazyRescale || rescaled) {
#pragma unroll
        for (int i = 0; i < kD / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_o[4 * i + e] *= alpha[e / 2];
      }
      pack_p(p_out, acc_s, narrow);
    };
    // The narrow steps are a prefix of the walk: a narrow step follows a narrow one.
    for (--n, ++it; n >= 0 && needs_mask(n * kBlockN); --n, ++it) {
      if constexpr (T::kNarrowSteps) {
        if (prev_narrow) {
          prev_narrow = narrow_at(row0, n * kBlockN);
          if (prev_narrow)
            visit(n, Yes{}, Yes{}, Yes{}, p_frag, p_frag);
          else
            visit(n, Yes{}, No{}, Yes{}, p_frag, p_frag);
          continue;
        }
      }
      visit(n, Yes{}, No{}, No{}, p_frag, p_frag);
    }
    if constexpr (T::kNarrowSteps) {
      if (prev_narrow && n >= 0) {  // a full tile after a narrow one
        visit(n, No{}, No{}, Yes{}, p_frag, p_frag);
        --n, ++it;
        prev_narrow = false;
      }
    }
    if constexpr (T::kTwoPBuffers) {
      // Two steps a turn of the loop, P~ back in p_frag at its end; an odd last step's P~ is
      // copied back (once a tile).
      uint32_t p_next[kBlockN / 16][4];
      for (; n >= 1; n -= 2) {
        visit(n, No{}, No{}, No{}, p_frag, p_next);
        ++it;
        visit(n - 1, No{}, No{}, No{}, p_next, p_frag);
        ++it;
      }
      if (n == 0) {
        visit(0, No{}, No{}, No{}, p_frag, p_next);
        --n, ++it;
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
          for (int e = 0; e < 4; ++e) p_frag[kk][e] = p_next[kk][e];
      }
    } else {
      for (; n >= 0; --n, ++it) visit(n, No{}, No{}, No{}, p_frag, p_frag);
    }
    // Every S of the tile has landed: the producer may load the next tile's Q under the last
    // P~ V and the epilogue.
    mbar_arrive(bar_q_empty(qb));
    const int st_last = (it - 1) % kStages;
    // kTileOverlap: the next tile's coordinates, and its first S issued with the last P~ V.
    bool next_started = false;
    float acc_s_next[kBlockN / 2];
    if constexpr (T::kTileOverlap) {
      if (tile_of_round(r + 1) < tiles) {
        ahead_qb = q_loads % T::kQBuffers;
        mbar_wait(bar_q(ahead_qb), (q_loads / T::kQBuffers) & 1);
        ++q_loads;
        ahead_b = ld_shared_s32(tile_words(ahead_qb));
        ahead_h = ld_shared_s32(tile_words(ahead_qb) + 4);
        ahead_row0 = ld_shared_s32(tile_words(ahead_qb) + 8);
        ahead_n_end = ld_shared_s32(tile_words(ahead_qb) + 12);
        ahead_read = true;
        next_started = ahead_n_end > 0;
      }
    }
    if (T::kTileOverlap && next_started) {
      const int st = it % kStages;
      int limit_next[2];
      row_limits(ahead_row0, limit_next);
      mbar_wait(bar_k(st), (it / kStages) & 1);
      mbar_wait(bar_v(st_last), ((it - 1) / kStages) & 1);
      take_turn();
      wgmma_fence();
      q_tile = sQ(ahead_qb);
      issue_s(acc_s_next, st, No{});
      wgmma_commit();
      issue_pv(p_frag, st_last, No{});
      wgmma_commit();
      pass_turn();
      wgmma_wait<1>();  // the next tile's first S has landed; the last P~ V may still run
      fence_registers(acc_s_next);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) carried_m[hf] = -INFINITY, carried_l[hf] = 0.0f;
      first_softmax(acc_s_next, carried_m, carried_l, alpha, limit_next, ahead_row0,
                    ahead_n_end - 1);
      wgmma_wait<0>();
      fence_registers(acc_o);
      mbar_arrive(bar_empty(st_last));
      pack_p(carried_p, acc_s_next, No{});  // p_frag's last reader is done
    } else {                          // the last P~ V
      mbar_wait(bar_v(st_last), ((it - 1) / kStages) & 1);
      if constexpr (T::kNarrowSteps) {
        auto last_pv = [&](auto narrow) {
          wgmma_fence();
          issue_pv(p_frag, st_last, narrow);
          wgmma_commit();
          wgmma_wait<0>();
          fence_registers(acc_o);
        };
        if (prev_narrow)
          last_pv(Yes{});
        else
          last_pv(No{});
      } else {  // (written out, as the first step: the lambda reordered the overlap kernel's SASS)
        wgmma_fence();
        issue_pv(p_frag, st_last, No{});
        wgmma_commit();
        wgmma_wait<0>();
        fence_registers(acc_o);
      }
      if constexpr (!T::kStoreOByTma) mbar_arrive(bar_empty(st_last));
    }

    // Lines 15-16: O = O / l, L = ln 2 (m' + log2 l) (natural log); a row that saw no key gets
    // O = 0 and L = -inf.
    if constexpr (T::kStoreOByTma) {
      float inv[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float l = row_l[hf];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        inv[hf] = l > 0.0f ? 1.0f / l : 0.0f;
        const int r = r_lo + hf * 8;
        const bool past = T::kFoldScale && past_fold_range(row_m[hf]);
        refold |= past;
        if (t == 0 && r < rows_valid)
          lse_rows[r] = past       ? past_fold_range_marker()
                        : l > 0.0f ? (row_m[hf] + __log2f(l)) * 0.69314718055994531f
                                   : -INFINITY;
      }
      // O into the K tile of the last stage, laid out as the TMA loads tiles (64-column blocks
      // of 128-byte swizzled rows), once every consumer's last S has landed (the tile's "Q
      // empty" phase); then this consumer's 64 rows out by the TMA, which clips the rows past
      // S_q and the columns past d.
      mbar_wait(bar_q_empty(qb), ((q_loads - 1) / T::kQBuffers) & 1);
      const uint32_t sO = sK(st_last);
      stage_rows<Element, kD, kBlockM>(sO, acc_o, inv, c * 64, (tid % 128) / 32, lane);
      fence_proxy_async_shared();
      if constexpr (T::kStoreWarp) {
        mbar_arrive(bar_o(st_last));
      } else {
        named_bar_sync(3 + c, 128);
        if (elected) {
          [[maybe_unused]] uint64_t streamed_policy = 0;
          if constexpr (T::kL2Hints) streamed_policy = l2_policy_evict_first();
#pragma unroll
          for (int cb = 0; cb < T::kColBlocks; ++cb) {
            const uint32_t src = sO + cb * (kBlockM * kSwizzleBytes) + c * (64 * kSwizzleBytes);
            if constexpr (T::kL2Hints)
              tma_store_4d_hinted(&tmap_o, src, cb * kBlockCols, row0 + c * 64, h, b,
                                  streamed_policy);
            else
              tma_store_4d(&tmap_o, src, cb * kBlockCols, row0 + c * 64, h, b);
          }
        }
        staged_stage = st_last;
      }
    } else {  // written from registers
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float l = row_l[hf];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        const int r = r_lo + hf * 8;
        if (r >= rows_valid) continue;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        Element* o_row = o_tile + static_cast<int64_t>(r) * args.o.row_stride;
#pragma unroll
        for (int i = 0; i < kD / 8; ++i)
          if (8 * i + 2 * t < args.d) {
            const uint32_t pair =
                pack_pair<Element>(acc_o[4 * i + 2 * hf] * inv, acc_o[4 * i + 2 * hf + 1] * inv);
            uint32_t* dst = reinterpret_cast<uint32_t*>(o_row + 8 * i + 2 * t);
            if constexpr (T::kL2Hints)
              __stcs(dst, pair);  // streamed (kL2Hints)
            else
              *dst = pair;
          }
        const bool past = T::kFoldScale && past_fold_range(row_m[hf]);
        refold |= past;
        if (t == 0)
          lse_rows[r] = past       ? past_fold_range_marker()
                        : l > 0.0f ? (row_m[hf] + __log2f(l)) * 0.69314718055994531f
                                   : -INFINITY;
      }
    }
    if constexpr (T::kTileOverlap) ahead_started = next_started;
  }
  if constexpr (T::kStoreOByTma && !T::kStoreWarp) {
    release_staged_o();
    if (elected) bulk_wait_complete();
  }
  if constexpr (T::kFoldScale && T::kRowsInKernel) {
    // Rows marked past the fold's range: walk this warp's tiles again and compute those rows
    // unfolded, over the main loop's O and L (with the TMA, once all of O's stores are done).
    bool any;
    if constexpr (T::kStoreOByTma)
      any = named_bar_sync_any(3 + c, 128, refold) && __any_sync(0xffffffff, refold);
    else
      any = __any_sync(0xffffffff, refold);
    if (any) {
      if constexpr (T::kStoreWarp) mbar_wait(bar_o_done, 0);  // every O stored
      __syncwarp();
      const int warp_row = r_lo - g;  // the warp's 16 rows of a tile
      for (int r = 0;; ++r) {
        const int index = tile_of_round(r);
        if (index >= tiles) break;
        const Schedule tile(args, index, m_blocks);
        const int row = warp_row + lane % 16;
        const float* lse =
            args.lse + (static_cast<int64_t>(tile.b) * args.H + tile.h) * args.S_q + tile.row0;
        const bool marked =
            lane < 16 && row < tile.rows_valid && __float_as_uint(lse[row]) == kPastFoldRange;
        for (uint32_t mask = __ballot_sync(0xffffffff, marked); mask != 0; mask &= mask - 1)
          rewrite_row_unfolded<Element, kD>(args, tile.b, tile.h,
                                            tile.row0 + warp_row + __ffs(mask) - 1, lane);
      }
    }
  }
  if constexpr (T::kPingPong) {
    if (c == 0) named_bar_sync(1, 256);  // the last consumer's final signal
  }
}

}  // namespace flashref::cuda::kernels::sm90
