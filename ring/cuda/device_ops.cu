#include "device_ops.hpp"

#include <math_constants.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace flashref::ring::device {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("ring device op: ") + what + ": " + cudaGetErrorName(e) +
                             " (" + cudaGetErrorString(e) + ")");
  }
}

// A TensorView as a kernel argument (TensorView's methods are host code).
struct Rows {
  void* data;
  DType dtype;
  std::int64_t B, S, H, d;
  std::int64_t sb, ss, sh;
};

Rows rows_of(const TensorView& v) {
  return Rows{v.data, v.dtype,        v.batch,      v.seq,        v.heads,
              v.dim,  v.batch_stride, v.seq_stride, v.head_stride};
}

// Element (b, s, h, i) of a view's logical index t in [0, B * S * H * d).
struct Index {
  std::int64_t b, s, h, i;
};
__device__ Index index_of(std::int64_t t, std::int64_t S, std::int64_t H, std::int64_t d) {
  Index x;
  x.i = t % d;
  t /= d;
  x.h = t % H;
  t /= H;
  x.s = t % S;
  x.b = t / S;
  return x;
}
__device__ std::int64_t offset(const Rows& v, std::int64_t b, std::int64_t s, std::int64_t h,
                               std::int64_t i) {
  return b * v.sb + s * v.ss + h * v.sh + i;
}

// flashref's conversions (dtype.hpp, core/dtype.cpp), bit for bit: CUDA's own intrinsics round
// the same way but give NaN a canonical payload, which the host keeps.
__device__ std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
__device__ float bf16_bits_to_float(std::uint16_t h) {
  return __uint_as_float(static_cast<std::uint32_t>(h) << 16);
}
__device__ std::uint16_t float_to_f16_bits(float f) {
  const std::uint32_t u = __float_as_uint(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (abs >= 0x38800000u) {
    std::uint32_t r = abs - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  if (abs < 0x33000000u) return sign;
  const std::uint32_t exponent = abs >> 23;
  const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;
  const std::uint32_t kept = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  return static_cast<std::uint16_t>(sign | rounded);
}
__device__ float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: exactly mantissa * 2^-24 (the product is exact).
  const float magnitude = __fmul_rn(static_cast<float>(mantissa), 5.9604644775390625e-8f);
  return sign ? -magnitude : magnitude;
}

__device__ float load(const Rows& v, std::int64_t at) {
  switch (v.dtype) {
    case DType::f32:
      return static_cast<const float*>(v.data)[at];
    case DType::f16:
      return f16_bits_to_float(static_cast<const std::uint16_t*>(v.data)[at]);
    case DType::bf16:
      return bf16_bits_to_float(static_cast<const std::uint16_t*>(v.data)[at]);
  }
  return 0.0f;
}
__device__ void store(const Rows& v, std::int64_t at, float x) {
  switch (v.dtype) {
    case DType::f32:
      static_cast<float*>(v.data)[at] = x;
      return;
    case DType::f16:
      static_cast<std::uint16_t*>(v.data)[at] = float_to_f16_bits(x);
      return;
    case DType::bf16:
      static_cast<std::uint16_t*>(v.data)[at] = float_to_bf16_bits(x);
      return;
  }
}

// dst rows [dst_begin, ...) = src rows [src_begin, ...), `rows` of them; converted when the
// dtypes differ, bits as they are when not.
__global__ void copy_rows_kernel(Rows src, std::int64_t src_begin, Rows dst, std::int64_t dst_begin,
                                 std::int64_t rows) {
  const std::int64_t total = src.B * rows * src.H * src.d;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const Index x = index_of(t, rows, src.H, src.d);
    const std::int64_t from = offset(src, x.b, src_begin + x.s, x.h, x.i);
    const std::int64_t to = offset(dst, x.b, dst_begin + x.s, x.h, x.i);
    if (src.dtype == dst.dtype) {
      if (src.dtype == DType::f32)
        static_cast<std::uint32_t*>(dst.data)[to] =
            static_cast<const std::uint32_t*>(src.data)[from];
      else
        static_cast<std::uint16_t*>(dst.data)[to] =
            static_cast<const std::uint16_t*>(src.data)[from];
    } else {
      store(dst, to, load(src, from));
    }
  }
}

// Whether a view is dense (B, S, H, d): element (b, s, h, i) at ((b S + s) H + h) d + i.
bool dense(const Rows& v) {
  return v.sh == v.d && v.ss == v.H * v.d && v.sb == v.S * v.H * v.d;
}

// acc += part over dense views of one shape: the partial gradients and their accumulators
// (most of the backward's extra traffic), with no index arithmetic per element.
__global__ void add_dense_kernel(float* acc, const float* part, std::int64_t total) {
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    acc[t] = __fadd_rn(acc[t], part[t]);
  }
}

__global__ void add_rows_kernel(Rows acc, Rows part) {
  const std::int64_t total = acc.B * acc.S * acc.H * acc.d;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const Index x = index_of(t, acc.S, acc.H, acc.d);
    float* a = static_cast<float*>(acc.data) + offset(acc, x.b, x.s, x.h, x.i);
    *a = __fadd_rn(*a, load(part, offset(part, x.b, x.s, x.h, x.i)));
  }
}

__global__ void clear_kernel(Rows O, float* L) {
  const std::int64_t total = O.B * O.S * O.H * O.d;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const Index x = index_of(t, O.S, O.H, O.d);
    static_cast<float*>(O.data)[offset(O, x.b, x.s, x.h, x.i)] = 0.0f;
    if (x.i == 0) L[(x.b * O.H + x.h) * O.S + x.s] = -CUDART_INF_F;
  }
}

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

// One warp per row (b, s, h): every lane reads L_a and L_b before lane 0 writes the merged L.
__global__ void merge_kernel(Rows O, float* L, Rows part, const float* L_part) {
  const std::int64_t total_rows = O.B * O.S * O.H;
  const int lane = threadIdx.x % 32;
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(kRowsPerBlock) + threadIdx.x / 32;
       row < total_rows; row += static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock) {
    const std::int64_t h = row % O.H, s = (row / O.H) % O.S, b = row / (O.H * O.S);
    const std::int64_t li = (b * O.H + h) * O.S + s;
    const float L_b = L_part[li];
    if (L_b == -CUDART_INF_F) continue;  // the block saw no key of this row
    const float L_a = L[li];
    float* O_a = static_cast<float*>(O.data) + offset(O, b, s, h, 0);
    const std::int64_t part_row = offset(part, b, s, h, 0);
    if (L_a == -CUDART_INF_F) {  // nothing merged yet: the block's result, exactly
      for (std::int64_t i = lane; i < O.d; i += 32) O_a[i] = load(part, part_row + i);
      __syncwarp();
      if (lane == 0) L[li] = L_b;
      continue;
    }
    // core/merge.cpp's arithmetic, with each operation rounded on its own as the host does.
    const double a = L_a, bb = L_b;
    const double m = fmax(a, bb);
    const double L_ab = __dadd_rn(m, log(__dadd_rn(exp(__dsub_rn(a, m)), exp(__dsub_rn(bb, m)))));
    const double w_a = exp(__dsub_rn(a, L_ab));
    const double w_b = exp(__dsub_rn(bb, L_ab));
    for (std::int64_t i = lane; i < O.d; i += 32) {
      const double x = __dadd_rn(__dmul_rn(w_a, static_cast<double>(O_a[i])),
                                 __dmul_rn(w_b, static_cast<double>(load(part, part_row + i))));
      O_a[i] = static_cast<float>(x);
    }
    __syncwarp();
    if (lane == 0) L[li] = static_cast<float>(L_ab);
  }
}

unsigned blocks_for(std::int64_t work, std::int64_t per_block) {
  const std::int64_t n = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<std::int64_t>(n, 1, std::int64_t{1} << 20));
}

void copy_rows(const TensorView& src, std::int64_t src_begin, const TensorView& dst,
               std::int64_t dst_begin, std::int64_t rows, cudaStream_t stream) {
  const std::int64_t total = src.batch * rows * src.heads * src.dim;
  if (total == 0) return;
  copy_rows_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      rows_of(src), src_begin, rows_of(dst), dst_begin, rows);
  check(cudaGetLastError(), "copy_rows_kernel launch");
}

void copy_lse(const float* src, std::int64_t src_pitch, float* dst, std::int64_t dst_pitch,
              std::int64_t rows, std::int64_t planes, cudaStream_t stream) {
  if (rows == 0 || planes == 0) return;
  check(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dst_pitch) * sizeof(float), src,
                          static_cast<std::size_t>(src_pitch) * sizeof(float),
                          static_cast<std::size_t>(rows) * sizeof(float),
                          static_cast<std::size_t>(planes), cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpy2DAsync of L rows");
}

}  // namespace

void gather_rows(const TensorView& global, std::int64_t begin, const TensorView& local,
                 cudaStream_t stream) {
  copy_rows(global, begin, local, 0, local.seq, stream);
}

void scatter_rows(const TensorView& local, const TensorView& global, std::int64_t begin,
                  cudaStream_t stream) {
  copy_rows(local, 0, global, begin, local.seq, stream);
}

void add_rows(const TensorView& acc, const TensorView& part, cudaStream_t stream) {
  const std::int64_t total = acc.batch * acc.seq * acc.heads * acc.dim;
  if (total == 0) return;
  const Rows a = rows_of(acc), p = rows_of(part);
  if (dense(a) && dense(p) && p.dtype == DType::f32) {
    add_dense_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<float*>(a.data), static_cast<const float*>(p.data), total);
  } else {
    add_rows_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(a, p);
  }
  check(cudaGetLastError(), "add_rows_kernel launch");
}

void gather_lse(const float* global, std::int64_t B, std::int64_t H, std::int64_t S,
                std::int64_t begin, std::int64_t rows, float* local, cudaStream_t stream) {
  copy_lse(global + begin, S, local, rows, rows, B * H, stream);
}

void scatter_lse(const float* local, std::int64_t rows, float* global, std::int64_t B,
                 std::int64_t H, std::int64_t S, std::int64_t begin, cudaStream_t stream) {
  copy_lse(local, rows, global + begin, S, rows, B * H, stream);
}

void clear_merge(const MergeTarget& target, cudaStream_t stream) {
  const TensorView& O = target.O;
  const std::int64_t total = O.batch * O.seq * O.heads * O.dim;
  if (total == 0) return;
  clear_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(rows_of(O), target.L);
  check(cudaGetLastError(), "clear_kernel launch");
}

void merge_into(const MergeTarget& target, const TensorView& O_part, const float* L_part,
                cudaStream_t stream) {
  const TensorView& O = target.O;
  const std::int64_t rows = O.batch * O.seq * O.heads;
  if (rows == 0 || O.dim == 0) return;
  merge_kernel<<<blocks_for(rows, kRowsPerBlock), kThreads, 0, stream>>>(rows_of(O), target.L,
                                                                         rows_of(O_part), L_part);
  check(cudaGetLastError(), "merge_kernel launch");
}

}  // namespace flashref::ring::device
