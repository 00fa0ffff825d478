// Launchers of the sm90 family (wgmma, TMA, warp specialization; sm_90a only): the TMA tensor
// maps of Q, K, V and dO, and the grids. sm90::forward and sm90::backward are what the generated
// instantiation files (inst/sm90_*.cu, cuda/cmake/flashref_cuda_instances.cmake) call.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

#include "family.hpp"
#include "flashref/dtype.hpp"
#include "flashref/error.hpp"
#include "initcheck_marks.hpp"
#include "instances.hpp"
#include "kernels/common/launch.cuh"
#include "kernels/common/tile_order.hpp"
#include "kernels/ffma/launch.cuh"
#include "kernels/sm90/bwd_dkdv.cuh"
#include "kernels/sm90/bwd_dkdv_3xtf32.cuh"
#include "kernels/sm90/bwd_dq.cuh"
#include "kernels/sm90/bwd_dq_3xtf32.cuh"
#include "kernels/sm90/bwd_postprocess.cuh"
#include "kernels/sm90/configs.hpp"
#include "kernels/sm90/fwd_3xtf32.cuh"
#include "launch.hpp"

namespace flashref::cuda::sm90 {

// cuTensorMapEncodeTiled from the driver, found through the runtime (no -lcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                cudaEnableDefault, &found),
               "looking up cuTensorMapEncodeTiled");
    if (fn == nullptr || found != cudaDriverEntryPointSuccess)
      throw Unsupported(
          "cuda backend: the driver has no cuTensorMapEncodeTiled (TMA), which the "
          "sm90 family needs");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A 4-D (d, S, H, B) tensor map over a (B, S, H, d) tensor of 16-bit elements (or float32,
// for the 3xTF32 forward): boxes of one 128-byte row (64 columns, or 32 of float32) x `rows`
// rows, 128-byte swizzled (kernels/sm90/hopper.cuh). Coordinates past S or d read as zeros.
// The driver's verdict, which refuses a pointer or stride the TMA cannot take.
inline CUresult try_tensor_map(CUtensorMap& map, const kernels::TensorArg& t,
                               CUtensorMapDataType type, int d, int S, int heads, int batch,
                               int rows) {
  const cuuint64_t bytes = type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 2;
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(S), cuuint64_t(heads), cuuint64_t(batch)};
  // A dimension of extent 1 is never stepped along, and the backend accepts any stride there
  // (backend.cpp, misalignment); the TMA wants every stride a multiple of 16 bytes, so such a
  // dimension gets the stride of a packed one.
  cuuint64_t strides[3] = {cuuint64_t(t.row_stride) * bytes, cuuint64_t(t.head_stride) * bytes,
                           cuuint64_t(t.batch_stride) * bytes};
  if (S == 1) strides[0] = cuuint64_t(d) * bytes;
  if (heads == 1) strides[1] = strides[0] * cuuint64_t(S);
  if (batch == 1) strides[2] = strides[1] * cuuint64_t(heads);
  const cuuint32_t box[4] = {cuuint32_t(kernels::sm90::kSwizzleBytes / bytes), cuuint32_t(rows), 1,
                             1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return tensor_map_encoder()(&map, type, 4, t.ptr, dims, strides, box, element_strides,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}
// The same, or Unsupported naming the tensor (`what`) where the driver refuses it.
inline CUtensorMap tensor_map(const kernels::TensorArg& t, CUtensorMapDataType type, int d, int S,
                              int heads, int batch, int rows, const char* what) {
  CUtensorMap map;
  const CUresult r = try_tensor_map(map, t, type, d, S, heads, batch, rows);
  if (r != CUDA_SUCCESS)
    throw Unsupported(std::string("cuda backend: the sm90 forward's TMA descriptor of ") + what +
                      " was refused (CUresult " + std::to_string(int(r)) +
                      "; d = " + std::to_string(d) + ", strides " + std::to_string(t.row_stride) +
                      "/" + std::to_string(t.head_stride) + "/" + std::to_string(t.batch_stride) +
                      " elements)");
  return map;
}

// The L2 bytes a tile order's section may fill with the other side's tiles
// (kernels/common/tile_order.hpp), for `sharing` kernels running at once: three quarters of L2
// (the rest for the tiles read or written once), or with `one_partition` three quarters of one
// of its two partitions. Hopper's L2 is two partitions, each caching for the multiprocessors
// attached to it; a section's keys and values are read by blocks on both sides, so each
// partition keeps its own copy and the section sees half the cache. Run 40a (bench/results/
// 2026-12-06-h100-run40a, H100, Nsight Compute, d = 64, S = 1k, B 32, causal): on the whole L2's
// budget the forward read 282 MB from memory (Q, K and V are 201 MB; cuDNN's kernel read 201) in
// 226 us, on one partition's 202 MB in 215 us. The forward and the fused backward take one
// partition's budget where configs.hpp's fwd_one_partition and fused_bwd_one_partition say
// (runs 40b and 41a: past those lengths the smaller sections were slower). FLASHREF_CUDA_TUNE's
// order90: 1 no limit (one section), 2 the whole L2's budget for every kernel (the budget before
// run 40a), 3 half the kernel's budget.
inline long long tile_order_budget(int sharing, bool one_partition) {
  const long long whole = l2_cache_bytes() * 3 / 4 / sharing;
  const long long budget = one_partition ? whole / 2 : whole;
  switch (tune().order90) {
    case 1:
      return std::numeric_limits<long long>::max() / 2;
    case 2:
      return whole;
    case 3:
      return budget / 2;
    default:
      return budget;
  }
}

// The wave of tile_order.hpp's rule that keeps one section where each wave holds a few tiles
// of each head or more: the multiprocessors (one block each) where the kernel keeps the rule,
// 0 (no rule) where it does not; order90=5 drops the rule everywhere, 6 keeps it everywhere
// (at two tiles where the kernel has none: run 17a's order).
inline long long tile_order_wave(bool rule) {
  const int order = tune().order90;
  return (order == 6 || (rule && order != 5)) ? sm_count() : 0;
}

// The section to run: `planned`, or with order90=4 three pairs whatever the sizes, so that the
// test suites' small problems run every path of the sectioned decode (several sections, a
// short last one).
inline long long section_to_run(long long planned) {
  return tune().order90 == 4 ? 3 : planned;
}

// What one (batch, head) pair's tiles read of the other side, two tensors of 16-bit elements: a
// query tile its head's keys and values (the heads of a GQA group share them), a key tile the
// queries and dO of its group's heads, and with a fused dQ the float32 accumulator rows it adds
// into as well. Run 18a's profile of the atomic fused kernel at S = 1k (B 32, H 16), sectioned
// on Q and dO alone (146 heads at d = 64): 38.9% of L2 hits, 3.0 TB/s from memory, where
// cuDNN's kernel reads 1.2 TB/s.
inline long long query_tile_bytes(const kernels::AttnArgs& args, int kD) {
  return static_cast<long long>(args.S_k) * kD * 2 * 2 / args.group;
}
inline long long key_tile_bytes(const kernels::AttnArgs& args, int kD, bool fused_dq) {
  return static_cast<long long>(args.S_q) * kD * (2 * 2 + (fused_dq ? 4 : 0)) * args.group;
}

// The sections of a grid of one block per tile, for `sharing` kernels at once, on one L2
// partition's budget or the whole L2's: over query tiles (the forward's, the dQ pass's), with or
// without the wave rule, or over key tiles (the dK/dV pass, fused_dq or not), with the wave rule
// at `wave_tiles` tiles of a head (0: none).
inline long long query_tile_section(const kernels::AttnArgs& args, int kD, int sharing,
                                    bool one_partition, bool wave_rule) {
  return section_to_run(
      kernels::tile_section(static_cast<long long>(args.B) * args.H, query_tile_bytes(args, kD),
                            tile_order_budget(sharing, one_partition), tile_order_wave(wave_rule)));
}
inline long long key_tile_section(const kernels::AttnArgs& args, int kD, int sharing,
                                  bool one_partition, int wave_tiles, bool fused_dq) {
  return section_to_run(kernels::tile_section(
      static_cast<long long>(args.B) * args.H_kv, key_tile_bytes(args, kD, fused_dq),
      tile_order_budget(sharing, one_partition), tile_order_wave(wave_tiles > 0),
      wave_tiles > 0 ? wave_tiles : 2));
}

template <DType kDtype>
constexpr CUtensorMapDataType tensor_map_type() {
  return kDtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// O and L (Alg. 1) with the forward of traits T.
template <DType kDtype, typename T>
void launch_fwd(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Element = typename T::Element;
  constexpr int kD = T::kD;
  constexpr CUtensorMapDataType type = tensor_map_type<kDtype>();
  const CUtensorMap q = tensor_map(args.q, type, args.d, args.S_q, args.H, args.B, T::kBlockM, "Q");
  const CUtensorMap k =
      tensor_map(args.k, type, args.d, args.S_k, args.H_kv, args.B, T::kBlockN, "K");
  const CUtensorMap v =
      tensor_map(args.v, type, args.d, args.S_k, args.H_kv, args.B, T::kBlockN, "V");
  // O in boxes of a consumer's 64 rows, for the epilogue that stores by the TMA (otherwise
  // unused: Q's map stands in).
  const CUtensorMap o =
      T::kStoreOByTma ? tensor_map(args.o, type, args.d, args.S_q, args.H, args.B, 64, "O") : q;
  const int m_blocks = kernels::ceil_div(args.S_q, T::kBlockM);
  const unsigned tiles = grid_size(m_blocks, args.H, args.B);
  if (tiles == 0) return;
  // Persistent: one block per multiprocessor (the registers allow no second one), or a few
  // less where that levels the load of a sectioned order.
  kernels::AttnArgs ordered = args;
  unsigned grid = tiles;
  constexpr bool kWaveRule = kernels::sm90::fwd_one_section_per_wave(kD);
  const bool one_partition = kernels::sm90::fwd_one_partition(kD, args.S_k);
  if constexpr (T::kPersistent) {
    const auto order = kernels::persistent_order(
        m_blocks, static_cast<long long>(args.B) * args.H, query_tile_bytes(args, kD),
        tile_order_budget(1, one_partition), sm_count(), tile_order_wave(kWaveRule));
    ordered.tile_section = static_cast<int>(section_to_run(order.section));
    grid = static_cast<unsigned>(order.grid);
  } else {
    ordered.tile_section =
        static_cast<int>(query_tile_section(args, kD, 1, one_partition, kWaveRule));
  }
  const char* name = T::kPersistent ? "fwd_wgmma_persistent" : "fwd_wgmma";
  const std::string label = kernel_label(name, element_name<Element>(), kD, T::kBlockM, T::kBlockN,
                                         T::kThreads, T::kSmemBytes);
  const auto kernel = kernels::sm90::fwd_wgmma_kernel<T>;
  configure_kernel(reinterpret_cast<const void*>(kernel), T::kSmemBytes, label);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(q, k, v, o, ordered);
  check_cuda(cudaGetLastError(), label);
  if constexpr (T::kFoldScale && !T::kRowsInKernel) {
    // At most as many blocks as the forward's tiles (256 rows a block, kBlockM <= 256).
    const unsigned rows_grid = grid_size(kernels::ceil_div(args.S_q, 256), args.H, args.B);
    kernels::sm90::fwd_rows_unfolded_kernel<Element, kD><<<rows_grid, 256, 0, stream>>>(args);
    check_cuda(cudaGetLastError(), "fwd_rows_unfolded");
  }
}

// Exact float32 (the sm90_3xtf32 family): O and L on the 3xTF32 forward
// (kernels/sm90/fwd_3xtf32.cuh), or on the ffma family's where the driver refuses a tensor map
// of Q, K or V.
template <typename T>
void launch_fwd_3xtf32(const kernels::AttnArgs& args, cudaStream_t stream) {
  constexpr int kD = T::kD;
  constexpr CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  CUtensorMap q, k, v;
  if (try_tensor_map(q, args.q, type, args.d, args.S_q, args.H, args.B, T::kBlockM) !=
          CUDA_SUCCESS ||
      try_tensor_map(k, args.k, type, args.d, args.S_k, args.H_kv, args.B, T::kBlockN) !=
          CUDA_SUCCESS ||
      try_tensor_map(v, args.v, type, args.d, args.S_k, args.H_kv, args.B, T::kBlockN) !=
          CUDA_SUCCESS)
    return run_forward<Family::ffma, DType::f32, kD>(args, stream);
  const unsigned grid = grid_size(kernels::ceil_div(args.S_q, T::kBlockM), args.H, args.B);
  if (grid == 0) return;
  kernels::AttnArgs ordered = args;
  ordered.tile_section = 0;  // one section: longest tiles first over every head
  const std::string label =
      kernel_label("fwd_3xtf32", "f32", kD, T::kBlockM, T::kBlockN, T::kThreads, T::kSmemBytes);
  const auto kernel = kernels::sm90::fwd_3xtf32_kernel<T>;
  configure_kernel(reinterpret_cast<const void*>(kernel), T::kSmemBytes, label);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(q, k, v, ordered);
  check_cuda(cudaGetLastError(), label);
}
// FLASHREF_CUDA_TUNE fwd90=13, 14 and 16-19 (tuning variants): the ways of making the halves of
// Q, K and V (Fwd3xTf32Traits::kSplitQ, kSplitK, kSplitV): 13 Q's rounded unclamped, 14 every
// operand's, 16 every operand's truncated, 17 K's and V's truncated, 18 V's truncated, 19 every
// operand's by cvt.rna.satfinite (the default's halves from one conversion).
template <int kD>
void forward_3xtf32(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Base = kernels::sm90::Fwd3xTf32Traits<kD>;
  if constexpr (kTuningVariants) {
    using kernels::sm90::Fwd3xTf32TraitsSplit;
    using S = kernels::sm90::Tf32Split;
    switch (tune().fwd90) {
      case 13:
        return launch_fwd_3xtf32<
            Fwd3xTf32TraitsSplit<Base, S::rounded, S::rounded_finite, S::rounded_finite>>(args,
                                                                                          stream);
      case 14:
        return launch_fwd_3xtf32<Fwd3xTf32TraitsSplit<Base, S::rounded, S::rounded, S::rounded>>(
            args, stream);
      case 16:
        return launch_fwd_3xtf32<
            Fwd3xTf32TraitsSplit<Base, S::truncated, S::truncated, S::truncated>>(args, stream);
      case 17:
        return launch_fwd_3xtf32<
            Fwd3xTf32TraitsSplit<Base, S::rounded_finite, S::truncated, S::truncated>>(args,
                                                                                       stream);
      case 18:
        return launch_fwd_3xtf32<
            Fwd3xTf32TraitsSplit<Base, S::rounded_finite, S::rounded_finite, S::truncated>>(args,
                                                                                            stream);
      case 19:
        return launch_fwd_3xtf32<Fwd3xTf32TraitsSplit<Base, S::rounded_satfinite,
                                                      S::rounded_satfinite, S::rounded_satfinite>>(
            args, stream);
      default:
        break;
    }
  }
  launch_fwd_3xtf32<Base>(args, stream);
}

// d = 64's short tiles (FwdShortConfig): their causal kernel for short walks, the one for long
// walks (or everywhere, fwd90=35: a default kernel, for the suites), or the overlapping one
// without the mask.
template <DType kDtype, typename Element>
void launch_fwd_short(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Short = kernels::sm90::FwdShortConfig<Element>;
  if (!args.causal) return launch_fwd<kDtype, typename Short::NoMaskTraits>(args, stream);
  if (args.S_k > Short::kShortWalkKeys || tune().fwd90 == 35)
    return launch_fwd<kDtype, typename Short::LongWalkTraits>(args, stream);
  launch_fwd<kDtype, typename Short::Traits>(args, stream);
}

// O and L (Alg. 1): the configured forward (its scale folded into the exponent for a positive
// scale, unfolded otherwise; at d = 64 where FwdShortConfig takes them, folded, its tiles), or the
// tuning variant asked for (fwd90=1..4 at d = 64; 2, 4 and 6 at d = 128, 6 for a positive
// scale; 12 at d = 128 and on d = 64's short tiles, for a positive scale; 15 on d = 64's short
// tiles, for a positive scale; 5, 21 and 22, causal, for a positive scale; 8-11, 23-26 and 30
// the same in bf16; 27 and 29 at d = 128, 28 at d = 64 (configs.hpp, below); another
// value keeps the configuration of that head dim).
template <DType kDtype, int kD>
void forward_16bit(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Element = std::conditional_t<kDtype == DType::bf16, __nv_bfloat16, __half>;
  using kernels::sm90::FwdVariant;
  using Config = kernels::sm90::FwdConfig<Element, kD>;
  const bool unfolded = !(args.scale_log2 > 0.0f);
  // (d = 256 has no tuning variants: each value keeps its configuration.)
  if constexpr (kTuningVariants && kD <= 128) {
    const int v = tune().fwd90;
    using Run10 = typename FwdVariant<Element, kD, 2>::Traits;
    if (v == 2) return launch_fwd<kDtype, Run10>(args, stream);
    if (v == 4) return launch_fwd<kDtype, typename Config::Unfolded>(args, stream);
    if constexpr (kD == 64) {
      using OneBlockPerTile = typename FwdVariant<Element, 64, 1>::Traits;
      using FourStages = typename FwdVariant<Element, 64, 3>::Traits;
      if (v == 1) return launch_fwd<kDtype, OneBlockPerTile>(args, stream);
      if (v == 3) return launch_fwd<kDtype, FourStages>(args, stream);
    } else {
      using TwoStages = typename FwdVariant<Element, 128, 6>::Traits;
      if (v == 6 && !unfolded) return launch_fwd<kDtype, TwoStages>(args, stream);
    }
    if constexpr (kD == 64) {
      // 20: the marked rows in the other place (configs.hpp, FwdVariant<Element, 64, 20>).
      using Short = kernels::sm90::FwdShortConfig<Element>;
      using kernels::sm90::FwdTraitsRowsAfter;
      if (v == 20 && !unfolded) {
        if (!Short::takes(args))
          return launch_fwd<kDtype, typename FwdVariant<Element, 64, 20>::Traits>(args, stream);
        if (!args.causal)
          return launch_fwd<kDtype, FwdTraitsRowsAfter<typename Short::NoMaskTraits>>(args, stream);
        return launch_fwd<kDtype, FwdTraitsRowsAfter<typename Short::Base>>(args, stream);
      }
      if (v == 15 && !unfolded && Short::takes(args))
        return launch_fwd<kDtype, typename FwdVariant<Element, 64, 15>::Traits>(args, stream);
    }
    if (v == 12 && !unfolded) {
      if constexpr (kD == 64) {
        if (kernels::sm90::FwdShortConfig<Element>::takes(args))
          return launch_fwd<kDtype, typename FwdVariant<Element, 64, 12>::Traits>(args, stream);
      } else {
        return launch_fwd<kDtype, typename FwdVariant<Element, 128, 12>::Traits>(args, stream);
      }
    }
    // 5: causal, for a positive scale, without ping-pong: d = 64's short tiles, d = 128's.
    if (v == 5 && !unfolded && args.causal) {
      if constexpr (kD == 64) {
        if (kernels::sm90::FwdShortConfig<Element>::takes(args))
          return launch_fwd<kDtype, typename FwdVariant<Element, 64, 5>::Traits>(args, stream);
      } else {
        return launch_fwd<kDtype, typename FwdVariant<Element, 128, 5>::Traits>(args, stream);
      }
    }
    // 8-11, 23-26 and 30-34: bf16, causal, for a positive scale: the configured kernel with one
    // of FwdStepVariant's options (configs.hpp: the softmax's tree max, exponentials on the FMA
    // pipe, the deferral's two forms, the descriptors, the consumer's index, L2's priorities,
    // the producer's suspended waits, the turns around the exponentials, the pinned P~ V wait).
    if constexpr (kDtype == DType::bf16) {
      // 33 and 34 also without the mask at d = 128, whose one kernel runs both.
      const bool masks_ok = args.causal || (kD == 128 && (v == 33 || v == 34));
      if (((v >= 8 && v <= 11) || (v >= 23 && v <= 26) || (v >= 30 && v <= 34)) && !unfolded &&
          masks_ok) {
        auto run = [&](auto variant) {
          constexpr int kV = decltype(variant)::value;
          using kernels::sm90::FwdStepVariant;
          if constexpr (kD == 64) {
            using Short = kernels::sm90::FwdShortConfig<Element>;
            // 34 on the short tiles: the other choice of each walk (the long walks' kernel is
            // the pin with two P~ arrays).
            if (kV == 34 && Short::takes(args) && args.S_k > Short::kShortWalkKeys)
              return launch_fwd<kDtype, typename Short::Traits>(args, stream);
            if (Short::takes(args))
              return launch_fwd<kDtype, typename FwdStepVariant<typename Short::Traits, kV>::type>(
                  args, stream);
            launch_fwd<kDtype, typename FwdStepVariant<typename Config::Traits, kV>::type>(args,
                                                                                           stream);
          } else if constexpr (kV == 33) {  // the other choice: without the pin
            launch_fwd<kDtype, typename Config::Deferred>(args, stream);
          } else if constexpr (kV >= 23) {
            launch_fwd<kDtype, typename FwdStepVariant<typename Config::Deferred, kV>::type>(
                args, stream);
          } else if constexpr (kV == 10) {  // the other choice: without the deferral
            launch_fwd<kDtype, typename Config::Base>(args, stream);
          } else {
            launch_fwd<kDtype, typename FwdStepVariant<typename Config::Base, kV>::type>(args,
                                                                                         stream);
          }
        };
        if (v == 8) return run(std::integral_constant<int, 8>{});
        if (v == 9) return run(std::integral_constant<int, 9>{});
        if (v == 10) return run(std::integral_constant<int, 10>{});
        if (v == 11) return run(std::integral_constant<int, 11>{});
        if (v == 23) return run(std::integral_constant<int, 23>{});
        if (v == 24) return run(std::integral_constant<int, 24>{});
        if (v == 25) return run(std::integral_constant<int, 25>{});
        if (v == 30) return run(std::integral_constant<int, 30>{});
        if (v == 31) return run(std::integral_constant<int, 31>{});
        if (v == 32) return run(std::integral_constant<int, 32>{});
        if (v == 33) return run(std::integral_constant<int, 33>{});
        if (v == 34) return run(std::integral_constant<int, 34>{});
        return run(std::integral_constant<int, 26>{});
      }
    }
    // 27 and 29: d = 128 with O stored by a warp of the producer's, 29 with narrow steps too
    // (configs.hpp), for a positive scale, 29 causal.
    if constexpr (kD == 128) {
      if (v == 27 && !unfolded)
        return launch_fwd<kDtype, typename FwdVariant<Element, 128, 27>::Traits>(args, stream);
      if (v == 29 && !unfolded && args.causal)
        return launch_fwd<kDtype, typename FwdVariant<Element, 128, 29>::Traits>(args, stream);
    }
    // 28: d = 64's short tiles (FwdShortConfig) up to S_q = 4096 with the causal mask, where
    // the 192-row tiles compute 7% more of S than the causal half, the short tiles 3.1% (half
    // that with narrow steps; at S = 2k 14.5% and 6.25%, where run 38c measured the short tiles
    // 3-5% faster, the default since), and up to 2048 without it.
    if (v == 28 && !unfolded) {
      if constexpr (kD == 64) {
        using Short = kernels::sm90::FwdShortConfig<Element>;
        if (args.S_q <= 2 * (args.causal ? Short::kMaxRows : Short::kMaxRowsNoMask))
          return launch_fwd_short<kDtype, Element>(args, stream);
      }
    }
    // 21: causal, for a positive scale, the other choice of narrow steps (FwdTraitsNarrowSteps):
    // d = 64's short tiles without them, the 192-row tiles and d = 128's with them; 22 narrow
    // steps on d = 64's 192-row tiles where the short ones run too (as fwd90=7), for the suites.
    if ((v == 21 || v == 22) && !unfolded && args.causal) {
      using kernels::sm90::FwdTraitsNarrowSteps;
      if constexpr (kD == 64) {
        using Short = kernels::sm90::FwdShortConfig<Element>;
        if (Short::takes(args) && v == 21)
          return launch_fwd<kDtype, typename Short::Base>(args, stream);
      }
      return launch_fwd<kDtype, FwdTraitsNarrowSteps<typename Config::Traits>>(args, stream);
    }
  } else {
    (void)tune();  // a variant asked for and not compiled is an error (common/launch.cuh)
  }
  if (unfolded) return launch_fwd<kDtype, typename Config::Unfolded>(args, stream);
  if constexpr (kD == 64) {
    // fwd90=7 (a default kernel, in any build): the 192-row tiles where the short ones run too, so
    // that the suites' small problems run the kernel of the long sequences (scripts/device-run).
    if (kernels::sm90::FwdShortConfig<Element>::takes(args) && tune().fwd90 != 7)
      return launch_fwd_short<kDtype, Element>(args, stream);
  }
  launch_fwd<kDtype, typename Config::Traits>(args, stream);
}

// O and L (Alg. 1) of the family: 16-bit inputs on the wgmma forwards above, exact float32 on
// the 3xTF32 one.
template <Family kFamily, DType kDtype, int kD>
void forward(const kernels::AttnArgs& args, cudaStream_t stream) {
  if constexpr (kFamily == Family::sm90_3xtf32) {
    static_assert(kDtype == DType::f32, "the sm90_3xtf32 family runs float32 only");
    forward_3xtf32<kD>(args, stream);
  } else {
    static_assert(kFamily == Family::sm90, "the sm90 folder runs the sm90 families only");
    forward_16bit<kDtype, kD>(args, stream);
  }
}

// One backward kernel with Q and dO in boxes of T::kBlockM rows and K and V in boxes of
// T::kBlockN rows; `tiles`, `heads` size the grid (per query tile and head, or per key tile and
// key/value head), at most `max_blocks` blocks when that is positive (a persistent grid);
// `section` numbers its tiles (AttnArgs::tile_section).
// (The dK/dV kernels take dK's and dV's maps and the dQ accumulator's too, `dkdv_maps`, which
// the dQ pass's kernel does not take.)
template <DType kDtype, typename T, typename Kernel, typename... DkdvMaps>
void launch_bwd(Kernel kernel, kernels::AttnArgs args, int tiles, int heads, long long section,
                const char* name, cudaStream_t stream, int max_blocks, DkdvMaps... dkdv_maps) {
  args.tile_section = static_cast<int>(section);
  constexpr CUtensorMapDataType type = tensor_map_type<kDtype>();
  const CUtensorMap q = tensor_map(args.q, type, args.d, args.S_q, args.H, args.B, T::kBlockM, "Q");
  const CUtensorMap d_o =
      tensor_map(args.dO, type, args.d, args.S_q, args.H, args.B, T::kBlockM, "dO");
  const CUtensorMap k =
      tensor_map(args.k, type, args.d, args.S_k, args.H_kv, args.B, T::kBlockN, "K");
  const CUtensorMap v =
      tensor_map(args.v, type, args.d, args.S_k, args.H_kv, args.B, T::kBlockN, "V");
  unsigned grid = grid_size(tiles, heads, args.B);
  if (grid == 0) return;
  if (max_blocks > 0) grid = std::min(grid, static_cast<unsigned>(max_blocks));
  const std::string label = kernel_label(name, element_name<typename T::Element>(), T::kD,
                                         T::kBlockM, T::kBlockN, T::kThreads, T::kSmemBytes);
  configure_kernel(reinterpret_cast<const void*>(kernel), T::kSmemBytes, label);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(q, k, v, d_o, args, dkdv_maps...);
  check_cuda(cudaGetLastError(), label);
}

// dK's and dV's maps for the dK/dV kernels' epilogue by the TMA (T::kStoreDkvByTma), boxes of a
// consumer's 64 rows: made where the gradients are in the input dtype at strides the TMA takes
// (`made`); the kernels that stage their epilogue take zeroed maps in their place, which they
// never read (no driver call for them).
struct DkdvMaps {
  CUtensorMap dk{}, dv{};
  bool made = false;
};
template <DType kDtype>
DkdvMaps dkdv_maps(const kernels::AttnArgs& args, bool wanted) {
  DkdvMaps m;
  const int code = kDtype == DType::bf16 ? kernels::kOutBF16 : kernels::kOutF16;
  constexpr CUtensorMapDataType type = tensor_map_type<kDtype>();
  if (wanted && args.grad_code == code &&
      try_tensor_map(m.dk, args.dk, type, args.d, args.S_k, args.H_kv, args.B, 64) ==
          CUDA_SUCCESS &&
      try_tensor_map(m.dv, args.dv, type, args.d, args.S_k, args.H_kv, args.B, 64) == CUDA_SUCCESS)
    m.made = true;
  else
    m = DkdvMaps{};
  return m;
}

// The ordered kernels' map of the dQ accumulator for key tile 0's store (T::kDqFirstStore,
// bwd_dkdv.cuh): the accumulator as (tiles, rows of 256 floats, 256 floats), a box a whole tile
// (64 x d floats in the consumers' register order, as they are in shared memory), no swizzle.
// Zeroed for the kernels that add every tile, which never read it (no driver call for them).
template <typename T>
CUtensorMap dq_accum_map(const kernels::AttnArgs& args) {
  CUtensorMap map{};
  if constexpr (T::kDqFirstStore) {
    constexpr int kTileFloats = kernels::kDqTileRows * T::kD;
    static_assert(kTileFloats % 256 == 0 && kTileFloats / 256 <= 256, "a tile is one box");
    const long long tiles =
        static_cast<long long>(args.B) * args.H * args.S_q_pad / kernels::kDqTileRows;
    const cuuint64_t dims[3] = {256, kTileFloats / 256, cuuint64_t(tiles)};
    const cuuint64_t strides[2] = {256 * sizeof(float), kTileFloats * sizeof(float)};
    const cuuint32_t box[3] = {256, kTileFloats / 256, 1};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUresult r = tensor_map_encoder()(
        &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, args.dq_accum, dims, strides, box,
        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
      throw Unsupported(
          "cuda backend: the sm90 backward's TMA descriptor of the dQ accumulator "
          "was refused (CUresult " +
          std::to_string(int(r)) + ", " + std::to_string(tiles) + " tiles)");
  }
  return map;
}

// The fused backward (args.dq_accum set, its accumulator and counters zeroed by the
// preprocess, dispatch.cu): the dK/dV pass that also adds dQ's tiles, and dQ out of the
// accumulator, both on `stream`.
template <DType kDtype, typename T>
void backward_fused(const kernels::AttnArgs& args, cudaStream_t stream) {
  const long long rows = static_cast<long long>(args.B) * args.H * args.S_q_pad;
  const long long section =
      key_tile_section(args, T::kD, 1, kernels::sm90::fused_bwd_one_partition(T::kD, args.S_q),
                       kernels::sm90::fused_bwd_wave_tiles(T::kD), true);
  const bool ordered = T::kDqMode == kernels::sm90::kDqOrdered;
  if (ordered && T::kDqFirstStore != dq_first_store())
    throw std::logic_error(
        "cuda backend: the ordered fused backward's first dQ add and the preprocess disagree on "
        "who zeroes the accumulator (dispatch.cu, dq_first_store)");
  if (T::kPersistent && args.tile_counter == nullptr)
    throw Unsupported(
        "cuda backend: the persistent fused backward needs its tile counter in the workspace "
        "(AttnArgs::tile_counter)");
  const DkdvMaps out = dkdv_maps<kDtype>(args, T::kStoreDkvByTma);
  if constexpr (T::kStoreDkvByTma) {
    if (!out.made) return backward_fused<kDtype, typename T::Staged>(args, stream);
  }
  launch_bwd<kDtype, T>(
      kernels::sm90::bwd_dkdv_wgmma_kernel<T>, args, kernels::ceil_div(args.S_k, T::kBlockN),
      args.H_kv, section,
      T::kPersistent
          ? (ordered ? "bwd_fused_ordered_persistent_wgmma" : "bwd_fused_atomic_persistent_wgmma")
          : (ordered ? "bwd_fused_ordered_wgmma" : "bwd_fused_atomic_wgmma"),
      stream, T::kPersistent ? (tune().grid90 > 0 ? tune().grid90 : sm_count()) : 0, out.dk, out.dv,
      dq_accum_map<T>(args));
  const long long tiles = rows / kernels::kDqTileRows;
  if (tiles > 0) {
    if constexpr (T::kDqFirstStore) {
      // The tiles it reads were stored by the TMA, which initcheck does not see; poison90=1
      // (dispatch.cu's preprocess) is the check that they were.
      mark_initialized_for_initcheck(
          args.dq_accum, static_cast<std::size_t>(rows) * T::kD * sizeof(float), stream);
      launch_kernel(kernels::sm90::bwd_dq_postprocess_first_store_kernel<T::kD>,
                    static_cast<unsigned>(tiles), 128, 0, args, stream, "bwd_dq_postprocess");
    } else
      launch_kernel(kernels::sm90::bwd_dq_postprocess_kernel<T::kD>, static_cast<unsigned>(tiles),
                    128, 0, args, stream, "bwd_dq_postprocess");
  }
}

// The fused kernel of `Ordered` or `Atomic`, as the workspace asks (args.dq_semaphore set: the
// ordered adds).
template <DType kDtype, typename Ordered, typename Atomic>
void backward_fused_as_asked(const kernels::AttnArgs& args, cudaStream_t stream) {
  if (args.dq_semaphore != nullptr) return backward_fused<kDtype, Ordered>(args, stream);
  backward_fused<kDtype, Atomic>(args, stream);
}

// The two passes: dQ's on `stream`, dK/dV's on `side`.
template <DType kDtype, typename Dq, typename Dkv>
void backward_two_passes(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  launch_bwd<kDtype, Dq>(
      kernels::sm90::bwd_dq_wgmma_kernel<Dq>, args, kernels::ceil_div(args.S_q, Dq::kBlockM),
      args.H, query_tile_section(args, Dq::kD, 2, false, false), "bwd_dq_wgmma", stream, 0);
  const DkdvMaps unused;  // the two passes' dK/dV kernel stages its epilogue
  launch_bwd<kDtype, Dkv>(kernels::sm90::bwd_dkdv_wgmma_kernel<Dkv>, args,
                          kernels::ceil_div(args.S_k, Dkv::kBlockN), args.H_kv,
                          key_tile_section(args, Dkv::kD, 2, false, 0, false), "bwd_dkdv_wgmma",
                          side, 0, unused.dk, unused.dv, CUtensorMap{});
}

// dQ, dK, dV (Alg. 2), after dispatch.cu's preprocess (L', D). Two passes: the dQ pass on
// `stream` and the dK/dV pass on `side`, which the caller forks from and joins back to
// `stream`; or fused (args.dq_accum set), on `stream`.
template <DType kDtype, int kD>
void backward_16bit(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  using Element = std::conditional_t<kDtype == DType::bf16, __nv_bfloat16, __half>;
  using Config = kernels::sm90::BwdConfig<Element, kD>;
  if (args.dq_accum != nullptr) {
    // Short walks store dK and dV by the TMA (configs.hpp, fused_bwd_store_by_tma).
    const long long walk_queries =
        static_cast<long long>(args.causal ? args.S_q / 2 : args.S_q) * args.group;
    const bool by_tma = kernels::sm90::fused_bwd_store_by_tma(walk_queries);
    if constexpr (kTuningVariants) {
      if (tune().fused90 == 1)  // a block per key tile, dQ in step (run 26)
        return backward_fused_as_asked<kDtype, typename Config::OtherOrdered,
                                       typename Config::OtherAtomic>(args, stream);
      if (tune().fused90 == 2)  // persistent, dQ in step (run 28)
        return backward_fused_as_asked<kDtype, typename Config::InStepOrdered,
                                       typename Config::InStepAtomic>(args, stream);
      if (tune().fused90 == 3)  // dK and dV stored by the TMA at every S (run 31b)
        return backward_fused_as_asked<kDtype, typename Config::TmaOrdered,
                                       typename Config::TmaAtomic>(args, stream);
    }
    // fused90=4 (default kernels, any build): the staged epilogue at every S, so that the
    // suites' small problems run the kernel of the long walks (scripts/device-run).
    if (by_tma && tune().fused90 != 4)
      return backward_fused_as_asked<kDtype, typename Config::TmaOrdered,
                                     typename Config::FusedAtomic>(args, stream);
    return backward_fused_as_asked<kDtype, typename Config::FusedOrdered,
                                   typename Config::FusedAtomic>(args, stream);
  }
  backward_two_passes<kDtype, typename Config::Dq, typename Config::Dkv>(args, stream, side);
}

// Which passes of exact float32's backward run on 3xTF32 wgmma (kernels/sm90/bwd_dq_3xtf32.cuh,
// bwd_dkdv_3xtf32.cuh); the others are the ffma family's.
enum class Wgmma3xTf32Passes { both, dkdv, dq };

// The four tensor maps of a 3xTF32 backward pass of traits T (Q and dO in boxes of T::kBlockM
// rows, K and V of T::kBlockN), or false where the driver refuses one.
struct Bwd3xTf32Maps {
  CUtensorMap q, k, v, d_o;
};
template <typename T>
bool bwd_3xtf32_maps(Bwd3xTf32Maps& m, const kernels::AttnArgs& args) {
  constexpr CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  return try_tensor_map(m.q, args.q, type, args.d, args.S_q, args.H, args.B, T::kBlockM) ==
             CUDA_SUCCESS &&
         try_tensor_map(m.d_o, args.dO, type, args.d, args.S_q, args.H, args.B, T::kBlockM) ==
             CUDA_SUCCESS &&
         try_tensor_map(m.k, args.k, type, args.d, args.S_k, args.H_kv, args.B, T::kBlockN) ==
             CUDA_SUCCESS &&
         try_tensor_map(m.v, args.v, type, args.d, args.S_k, args.H_kv, args.B, T::kBlockN) ==
             CUDA_SUCCESS;
}

// One 3xTF32 backward pass of traits T on `stream`: `kernel` on a grid of `tiles` x `heads` x B.
template <typename T, typename Kernel>
void launch_bwd_3xtf32_pass(Kernel kernel, const Bwd3xTf32Maps& m, const kernels::AttnArgs& args,
                            int tiles, int heads, const char* name, cudaStream_t stream) {
  const unsigned grid = grid_size(tiles, heads, args.B);
  if (grid == 0) return;
  const std::string label =
      kernel_label(name, "f32", T::kD, T::kBlockM, T::kBlockN, T::kThreads, T::kSmemBytes);
  configure_kernel(reinterpret_cast<const void*>(kernel), T::kSmemBytes, label);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(m.q, m.k, m.v, m.d_o, args);
  check_cuda(cudaGetLastError(), label);
}

// Exact float32's backward (the sm90_3xtf32 family), from the natural-log L of dispatch.cu's
// preprocess: the dQ pass (traits Dq) on `stream` and the dK/dV pass (Dkv) on `side`, those of
// `passes` on 3xTF32 wgmma and the others the ffma family's; both the ffma family's where the
// driver refuses a tensor map of Q, K, V or dO.
template <typename Dq, typename Dkv>
void launch_bwd_3xtf32(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side,
                       Wgmma3xTf32Passes passes) {
  constexpr int kD = Dq::kD;
  Bwd3xTf32Maps dq_maps, dkdv_maps;
  if (!bwd_3xtf32_maps<Dq>(dq_maps, args) || !bwd_3xtf32_maps<Dkv>(dkdv_maps, args))
    return run_backward<Family::ffma, DType::f32, kD>(args, stream, side);
  if (passes == Wgmma3xTf32Passes::dkdv)
    ffma::backward_dq<kD>(args, stream);
  else
    launch_bwd_3xtf32_pass<Dq>(kernels::sm90::bwd_dq_3xtf32_kernel<Dq>, dq_maps, args,
                               kernels::ceil_div(args.S_q, Dq::kBlockM), args.H, "bwd_dq_3xtf32",
                               stream);
  if (passes == Wgmma3xTf32Passes::dq)
    ffma::backward_dkdv<kD>(args, side);
  else
    launch_bwd_3xtf32_pass<Dkv>(kernels::sm90::bwd_dkdv_3xtf32_kernel<Dkv>, dkdv_maps, args,
                                kernels::ceil_div(args.S_k, Dkv::kBlockN), args.H_kv,
                                "bwd_dkdv_3xtf32", side);
}

// Exact float32's backward: both passes on 3xTF32 wgmma (launch_bwd_3xtf32; the default since
// run 34a, docs/perf-notes.md: 0.52-0.56x the ffma family's time at d = 64 and 128), where the
// driver takes the tensor maps. FLASHREF_CUDA_TUNE f32bwd=9 runs the ffma family's two passes
// instead (the backward before run 34a, for comparison), 7 the dK/dV pass alone and 8 the dQ
// pass alone beside ffma's other pass, in any build (6 is the default's both, kept so that the
// runs before it stay reproducible); in tuning builds f32bwd=2..5 run both with the dK/dV pass's
// groups summed from zero in other sizes (k-steps of S and dP, of dV and dK): 2 (2, 2), d = 128's
// default since run 35b, 3 (4, 4), 4 (1, 1), 5 (2, 4).
template <int kD>
void backward_3xtf32(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  using kernels::sm90::BwdDkv3xTf32Traits;
  using Dq = kernels::sm90::BwdDq3xTf32Traits<kD>;
  using P = Wgmma3xTf32Passes;
  if constexpr (kTuningVariants) {
    switch (tune().f32bwd) {
      case 2:
        return launch_bwd_3xtf32<Dq, BwdDkv3xTf32Traits<kD, 2, 2>>(args, stream, side, P::both);
      case 3:
        return launch_bwd_3xtf32<Dq, BwdDkv3xTf32Traits<kD, 4, 4>>(args, stream, side, P::both);
      case 4:
        return launch_bwd_3xtf32<Dq, BwdDkv3xTf32Traits<kD, 1, 1>>(args, stream, side, P::both);
      case 5:
        return launch_bwd_3xtf32<Dq, BwdDkv3xTf32Traits<kD, 2, 4>>(args, stream, side, P::both);
      default:
        break;
    }
  }
  using Dkv = BwdDkv3xTf32Traits<kD>;
  switch (tune().f32bwd) {
    case 7:
      return launch_bwd_3xtf32<Dq, Dkv>(args, stream, side, P::dkdv);
    case 8:
      return launch_bwd_3xtf32<Dq, Dkv>(args, stream, side, P::dq);
    case 1:  // ffma's plain passes (a tuning variant; ffma's launcher reads the knob)
    case 9:
      return run_backward<Family::ffma, DType::f32, kD>(args, stream, side);
    default:
      return launch_bwd_3xtf32<Dq, Dkv>(args, stream, side, P::both);
  }
}

template <Family kFamily, DType kDtype, int kD>
void backward(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  if constexpr (kFamily == Family::sm90_3xtf32) {
    static_assert(kDtype == DType::f32, "the sm90_3xtf32 family runs float32 only");
    backward_3xtf32<kD>(args, stream, side);
  } else if constexpr (kD == 256) {
    // d = 256's backward is the mma.sync kernels' (its forward is wgmma's, configs.hpp): the same
    // preprocess (L' = L log2(e), D) and the separate dQ pass (dispatch.cu's dq_strategy).
    run_backward<Family::sm80, kDtype, 256>(args, stream, side);
  } else {
    backward_16bit<kDtype, kD>(args, stream, side);
  }
}

}  // namespace flashref::cuda::sm90
