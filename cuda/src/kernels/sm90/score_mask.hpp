// The causal mask of the sm90 forward as bits (fwd_softmax.cuh, visible_score_bits): how many of
// a thread's scores in a row are visible. Host and device code, so that the host tests check it.
#pragma once

#ifndef FLASHREF_HOST_DEVICE
#ifdef __CUDACC__
#define FLASHREF_HOST_DEVICE __host__ __device__
#else
#define FLASHREF_HOST_DEVICE
#endif
#endif

namespace flashref::cuda::kernels::sm90 {

// In the wgmma accumulator's layout a thread's k-th score in a row (k = 2 i + e, e = 0 or 1) is
// column 8 i + e past the thread's first. It is visible iff 8 i + e < `room`, the row's limit less
// that first column. Those k are a prefix, of length 2 floor(room / 8) + min(room mod 8, 2) for
// room >= 0 (every i below floor(room / 8) has both its columns; at i = floor(room / 8) the
// columns 8 i and 8 i + 1 are visible iff room mod 8 exceeds 0 and 1), and 0 for room <= 0.
FLASHREF_HOST_DEVICE constexpr int visible_score_count(int room) {
#ifdef __CUDA_ARCH__
  // (CUDA's max and min: the ternaries below gave the kernels other SASS, the same counts.)
  const int r = max(room, 0);
  return (r >> 3) * 2 + min(r & 7, 2);
#else
  const int r = room > 0 ? room : 0;
  return (r >> 3) * 2 + ((r & 7) < 2 ? (r & 7) : 2);
#endif
}

}  // namespace flashref::cuda::kernels::sm90
