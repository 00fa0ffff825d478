// The "cuda" backend: checks what the kernels need, builds their argument struct, launches.
#include "flashref/cuda/backend.hpp"

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "check.hpp"
#include "device_runtime.hpp"
#include "dispatch.hpp"
#include "flashref/error.hpp"
#include "launch.hpp"

namespace flashref::cuda {
namespace {

// What the process's current device can do, looked up once.
struct DeviceInfo {
  bool ok = false;
  std::string reason;
  bool memory_pools = false;
};

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo r;
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      r.reason = std::string("no CUDA device: cudaGetDeviceCount failed with ") +
                 cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
      (void)cudaGetLastError();
      return r;
    }
    if (count == 0) {
      r.reason = "no CUDA device: the driver reports no GPU on this machine";
      return r;
    }
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      r.reason = "no CUDA device: could not read the properties of the current device";
      return r;
    }
    if (prop.major < 8) {
      r.reason = std::string("GPU '") + prop.name + "' has compute capability " +
                 std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                 "; the cuda backend needs sm_80 or newer (mma.sync bf16, cp.async)";
      return r;
    }
    int pools = 0;
    (void)cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
    r.memory_pools = pools != 0;
    r.ok = true;
    return r;
  }();
  return info;
}

Support no(std::string reason) {
  return Support{false, std::move(reason)};
}

// The vectorized loads and stores of the kernels need 16-byte aligned rows: base pointers
// aligned to 16 bytes, and strides and d whole numbers of 16 bytes (8 elements of bf16/f16,
// 4 of float32). Returns what is wrong, or "" when the view is fine.
std::string misalignment(const TensorView& v, const char* field) {
  const auto size = static_cast<std::int64_t>(dtype_size(v.dtype));
  const std::int64_t chunk = 16 / size;
  std::ostringstream o;
  if (reinterpret_cast<std::uintptr_t>(v.data) % 16 != 0) {
    o << field << ": data pointer " << v.data << " is not 16-byte aligned";
  } else {
    const std::int64_t strides[3] = {v.batch_stride, v.seq_stride, v.head_stride};
    const char* names[3] = {"batch_stride", "seq_stride", "head_stride"};
    for (int i = 0; i < 3; ++i) {
      // A stride over an extent of 1 is never used to step; any value is fine there.
      const std::int64_t extent = i == 0 ? v.batch : (i == 1 ? v.seq : v.heads);
      if (extent > 1 && strides[i] % chunk != 0) {
        o << field << ": " << names[i] << " = " << strides[i] << " is not a multiple of " << chunk
          << " elements (16 bytes of " << dtype_name(v.dtype) << ")";
        break;
      }
    }
  }
  if (o.str().empty()) return "";
  return o.str() + "; the cuda kernels move 16-byte vectors (pass aligned, padded tensors)";
}

// A pointer the kernels would dereference must be device (or managed) memory.
void require_device_pointer(const void* p, const char* field) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw InvalidArgument(field,
                          std::string("cudaPointerGetAttributes failed: ") + cudaGetErrorString(e));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    throw InvalidArgument(field,
                          "is not device memory; the cuda backend takes device pointers "
                          "(Backend::memory_space() is device)");
  }
}

kernels::TensorArg arg(const TensorView& v) {
  return kernels::TensorArg{v.data, v.batch_stride, v.seq_stride, v.head_stride};
}

// The kernels' arguments for a problem and the views both directions share (Q, K, V, O, L).
template <class Params>
kernels::AttnArgs make_args(const Params& params) {
  const Problem& p = params.problem;
  kernels::AttnArgs a;
  a.B = static_cast<int>(p.B);
  a.H = static_cast<int>(p.H);
  a.H_kv = static_cast<int>(p.H_kv);
  a.group = static_cast<int>(p.H / p.H_kv);
  a.S_q = static_cast<int>(p.S_q);
  a.S_k = static_cast<int>(p.S_k);
  a.S_q_pad = workspace_rows(a.S_q);
  a.d = static_cast<int>(p.d);
  a.scale = static_cast<float>(p.scale);
  // log2(e) folded into the scale once, in double, then rounded: s' = S * scale * log2(e).
  a.scale_log2 = static_cast<float>(p.scale * 1.4426950408889634);
  a.causal = p.is_causal() ? 1 : 0;
  a.causal_offset = p.mask == Mask::causal_bottom_right ? static_cast<int>(p.S_k - p.S_q) : 0;
  a.grad_code = p.grad_dtype == DType::f32   ? kernels::kOutF32
                : p.grad_dtype == DType::f16 ? kernels::kOutF16
                                             : kernels::kOutBF16;
  a.q = arg(params.q);
  a.k = arg(params.k);
  a.v = arg(params.v);
  a.o = arg(params.o);
  // L: written by the forward, read only by the backward kernels.
  a.lse = const_cast<float*>(params.lse);
  return a;
}

void require_supported(const Support& s) {
  if (!s.ok) throw Unsupported("cuda backend: " + s.reason);
}

// Whether the float32 inputs run on TF32 tensor cores; refuses (nothing launched, nothing
// written) a head dim the TF32 kernels are not compiled for, rather than quietly running the
// exact kernels the caller did not ask for.
bool use_tf32(const Problem& p, const ExecutionOptions& options) {
  if (!options.allow_tf32 || p.dtype != DType::f32) return false;
  if (p.d > kMaxTf32HeadDim) {
    throw Unsupported(
        "cuda backend: allow_tf32 with head dim d = " + std::to_string(p.d) +
        ": the TF32 kernels are compiled for d <= " + std::to_string(kMaxTf32HeadDim) +
        " (at d = 256 a warp's float accumulator leaves no registers for the TF32 "
        "operands: every tiling spilled); without allow_tf32 the exact float32 "
        "kernels run d up to 256");
  }
  return true;
}

// The backward's workspace comes from a memory pool of our own that keeps its memory
// between calls. The device's default pool has a release threshold of 0: it hands its free
// memory back at every synchronization, so each backward after one (every timed run of
// `flashref bench`) mapped fresh memory. One pool per device, kept for the process.
cudaMemPool_t workspace_pool() {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  auto it = pools.find(device);
  if (it != pools.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaMemPoolCreate(&pool, &props), "creating the backward workspace pool");
  std::uint64_t keep_all = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
             "setting the workspace pool's release threshold");
  pools.emplace(device, pool);
  return pool;
}

void require_aligned(std::initializer_list<std::pair<const TensorView*, const char*>> views) {
  for (const auto& [v, field] : views) {
    const std::string why = misalignment(*v, field);
    if (!why.empty()) throw Unsupported("cuda backend: " + why);
  }
}

void require_device_pointers(std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [p, field] : pointers) require_device_pointer(p, field);
}

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  MemorySpace memory_space() const override { return MemorySpace::device; }
  const DeviceRuntime* device_runtime() const override { return &runtime_; }

  Support supports(const Problem& p) const override {
    const DeviceInfo& info = device_info();
    if (!info.ok) return no(info.reason);
    try {
      validate(p);
    } catch (const InvalidArgument& e) {
      return no(std::string("invalid problem: ") + e.what());
    }
    const long long chunk = p.dtype == DType::f32 ? 4 : 8;
    if (p.d % chunk != 0) {
      return no("head dim d = " + std::to_string(p.d) + " is not a multiple of " +
                std::to_string(chunk) + " (the " + std::string(dtype_name(p.dtype)) +
                " kernels load rows in 16-byte vectors; compiled head dims are 32, 64, 128, 256 "
                "and smaller multiples pad up)");
    }
    // Sequence indices are 32-bit inside the kernels (offsets are 64-bit), and the grid is one
    // dimension of at most 2^31 - 1 blocks of at least 16 rows.
    constexpr long long kMaxSeq = INT_MAX - 256;
    if (p.S_q > kMaxSeq || p.S_k > kMaxSeq) {
      return no("sequence length above " + std::to_string(kMaxSeq) +
                " (S_q = " + std::to_string(p.S_q) + ", S_k = " + std::to_string(p.S_k) + ")");
    }
    const long long tiles = (std::max(p.S_q, p.S_k) + 15) / 16;
    if (p.B * p.H > INT_MAX || tiles * p.B * p.H > INT_MAX) {
      return no("too many blocks: B * H * ceil(S / 16) exceeds 2^31 - 1");
    }
    if (!std::isfinite(static_cast<float>(p.scale * 1.4426950408889634))) {
      return no("softmax scale overflows float32");
    }
    return {};
  }

  void forward(const ForwardParams& params) const override {
    validate(params);
    const Problem& p = params.problem;
    require_supported(supports(p));
    require_aligned({{&params.q, "params.q"},
                     {&params.k, "params.k"},
                     {&params.v, "params.v"},
                     {&params.o, "params.o"}});
    require_device_pointers({{params.q.data, "params.q"},
                             {params.k.data, "params.k"},
                             {params.v.data, "params.v"},
                             {params.o.data, "params.o"},
                             {params.lse, "params.lse"}});
    const bool tf32 = use_tf32(p, params.options);
    launch_forward(make_args(params), p.dtype, tf32, params.options.stream);
  }

  void backward(const BackwardParams& params) const override {
    validate(params);
    const Problem& p = params.problem;
    require_supported(supports(p));
    require_aligned({{&params.q, "params.q"},
                     {&params.k, "params.k"},
                     {&params.v, "params.v"},
                     {&params.o, "params.o"},
                     {&params.dO, "params.dO"},
                     {&params.dq, "params.dq"},
                     {&params.dk, "params.dk"},
                     {&params.dv, "params.dv"}});
    require_device_pointers({{params.q.data, "params.q"},
                             {params.k.data, "params.k"},
                             {params.v.data, "params.v"},
                             {params.o.data, "params.o"},
                             {params.dO.data, "params.dO"},
                             {params.lse, "params.lse"},
                             {params.dq.data, "params.dq"},
                             {params.dk.data, "params.dk"},
                             {params.dv.data, "params.dv"}});
    const bool tf32 = use_tf32(p, params.options);

    kernels::AttnArgs a = make_args(params);
    a.dO = arg(params.dO);
    a.dq = arg(params.dq);
    a.dk = arg(params.dk);
    a.dv = arg(params.dv);

    // Workspace: L' and D, (B * H, S_q_pad) floats each, stream-ordered from our own pool so
    // repeated calls reuse its memory instead of paying cudaMalloc's synchronization.
    auto stream = static_cast<cudaStream_t>(params.options.stream);
    const std::size_t rows =
        static_cast<std::size_t>(p.B * p.H) * static_cast<std::size_t>(a.S_q_pad);
    const std::size_t bytes = 2 * rows * sizeof(float);
    void* ws = nullptr;
    const bool pools = device_info().memory_pools;
    check_cuda(pools ? cudaMallocFromPoolAsync(&ws, bytes, workspace_pool(), stream)
                     : cudaMalloc(&ws, bytes),
               "allocating the backward workspace (" + std::to_string(bytes) + " bytes)");
    a.lse2 = static_cast<float*>(ws);
    a.dsum = a.lse2 + rows;
    try {
      launch_backward(a, p.dtype, tf32, params.options.stream);
    } catch (...) {
      (void)(pools ? cudaFreeAsync(ws, stream) : cudaFree(ws));
      throw;
    }
    check_cuda(pools ? cudaFreeAsync(ws, stream) : cudaFree(ws), "freeing the backward workspace");
  }

 private:
  CudaRuntime runtime_;
};

}  // namespace

std::unique_ptr<Backend> make_backend() {
  return std::make_unique<CudaBackend>();
}

}  // namespace flashref::cuda
