// The ring's data movement and merge on the device: what ring/shard.cpp and core/merge.cpp do
// on the host, as small CUDA kernels on a stream, with the same results bit for bit (the merge:
// see merge_into). Views are device memory, logically (B, S, H, d) with a contiguous last dim;
// L buffers are (B, H, S) contiguous float32. Every function only queues work on `stream`
// (nullptr: the default stream) and throws std::runtime_error naming the CUDA error when a
// launch or a copy cannot be queued.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashref/merge.hpp"
#include "flashref/tensor.hpp"

namespace flashref::ring::device {

// local = rows [begin, begin + local.seq) of global, each element converted to local's dtype
// (bytes as they are when the dtypes match).
void gather_rows(const TensorView& global, std::int64_t begin, const TensorView& local,
                 cudaStream_t stream);
// global rows [begin, begin + local.seq) = local, each element rounded once (to nearest even,
// as flashref's store_from_float: NaN payloads kept) to global's dtype.
void scatter_rows(const TensorView& local, const TensorView& global, std::int64_t begin,
                  cudaStream_t stream);
// acc += part elementwise, in float32 (one rounded add per element); acc is float32.
void add_rows(const TensorView& acc, const TensorView& part, cudaStream_t stream);

// L's rows [begin, begin + rows) of a (B, H, S) logsumexp into a (B, H, rows) one, and back.
void gather_lse(const float* global, std::int64_t B, std::int64_t H, std::int64_t S,
                std::int64_t begin, std::int64_t rows, float* local, cudaStream_t stream);
void scatter_lse(const float* local, std::int64_t rows, float* global, std::int64_t B,
                 std::int64_t H, std::int64_t S, std::int64_t begin, cudaStream_t stream);

// core/merge.hpp's clear_merge and merge_into. The merge follows core/merge.cpp step by step:
// the fully masked cases exactly (a block with L = -inf leaves the row's bits alone, a first
// block is copied bit for bit), the rest in double with each product and sum rounded as the
// host rounds them (no fused multiply-add), stored in float32. Only the double exp and log
// differ from the host's C library (both within an ulp of double), so a float32 result can
// differ from the host's by one float32 rounding step, and does only when the double value lies
// within a few double ulps of a float32 rounding boundary.
void clear_merge(const MergeTarget& target, cudaStream_t stream);
void merge_into(const MergeTarget& target, const TensorView& O_part, const float* L_part,
                cudaStream_t stream);

}  // namespace flashref::ring::device
