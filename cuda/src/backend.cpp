// The "cuda" backend: checks what the kernels need, builds their argument struct, launches.
#include "flashref/cuda/backend.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "check.hpp"
#include "device_runtime.hpp"
#include "family.hpp"
#include "flashref/error.hpp"
#include "launch.hpp"

namespace flashref::cuda {
namespace {

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

// The kernels' mask: key k is visible to query q iff k <= q + offset. A placed block compares
// global positions, q + q_offset against k + k_offset under the whole problem's mask, which is
// the same test with the offsets folded in. It is clamped to [-S_q, S_k], which keeps every
// row's visible keys (an offset past S_k shows every key to every row, one below -S_q none)
// and fits int for any block of at most 2^31 rows.
std::int64_t causal_offset(const Problem& p) {
  std::int64_t offset = 0;
  if (p.placement.placed()) {
    const Placement& at = p.placement;
    offset = at.q_offset - at.k_offset +
             (p.mask == Mask::causal_bottom_right ? at.S_k_total - at.S_q_total : 0);
  } else if (p.mask == Mask::causal_bottom_right) {
    offset = p.S_k - p.S_q;
  }
  return std::clamp(offset, -p.S_q, p.S_k);
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
  a.causal_offset = static_cast<int>(causal_offset(p));
  a.whole_rows = p.placement.placed() ? 0 : 1;
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

// The kernel family for this call (chosen in one place, family.cpp, from the device's compute
// capability, the dtype and allow_tf32), refused with its reason (nothing launched, nothing
// written) when the family cannot run the problem: TF32 above its compiled head dims, for one.
Family family_for(const Problem& p, const ExecutionOptions& options) {
  const Family f = choose_family(device_info().arch, p.dtype, p.d, options.allow_tf32);
  require_supported(family_supports(f, p));
  return f;
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

  std::string plan(const Problem& p, const ExecutionOptions& options) const override {
    const DeviceInfo& info = device_info();
    if (!info.ok) return "";
    return family_choice(info.arch, p.dtype, p.d, options.allow_tf32, family_override_from_env());
  }

  Support supports(const Problem& p) const override {
    const DeviceInfo& info = device_info();
    if (!info.ok) return no(info.reason);
    try {
      validate(p);
    } catch (const InvalidArgument& e) {
      return no(std::string("invalid problem: ") + e.what());
    }
    // What the family that would run it needs (the head dim's multiple; allow_tf32's limits are
    // checked when the options are known, in forward() and backward()).
    const Support family = family_supports(choose_family(info.arch, p.dtype, p.d, false), p);
    if (!family.ok) return family;
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
    const Family family = family_for(p, params.options);
    launch_forward(make_args(params), family, p.dtype, params.options.stream);
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
    const Family family = family_for(p, params.options);

    kernels::AttnArgs a = make_args(params);
    a.dO = arg(params.dO);
    a.dq = arg(params.dq);
    a.dk = arg(params.dk);
    a.dv = arg(params.dv);

    // Workspace: L' and D, (B * H, S_q_pad) floats each, then for a fused dQ its accumulator
    // and counters; stream-ordered from our own pool so repeated calls reuse its memory
    // instead of paying cudaMalloc's synchronization.
    auto stream = static_cast<cudaStream_t>(params.options.stream);
    const std::size_t rows =
        static_cast<std::size_t>(p.B * p.H) * static_cast<std::size_t>(a.S_q_pad);
    const FusedDqWorkspace fused =
        fused_dq_workspace(a, dq_strategy(family, params.options.deterministic, p.S_k, p.d));
    const std::size_t bytes =
        (2 * rows + static_cast<std::size_t>(fused.accum_floats)) * sizeof(float) +
        static_cast<std::size_t>(fused.semaphores + fused.tile_counters) * sizeof(int);
    void* ws = nullptr;
    const bool pools = device_info().memory_pools;
    check_cuda(pools ? cudaMallocFromPoolAsync(&ws, bytes, workspace_pool(), stream)
                     : cudaMalloc(&ws, bytes),
               "allocating the backward workspace (" + std::to_string(bytes) + " bytes)");
    a.lse2 = static_cast<float*>(ws);
    a.dsum = a.lse2 + rows;
    if (fused.accum_floats > 0) a.dq_accum = a.dsum + rows;
    if (fused.semaphores > 0)
      a.dq_semaphore = reinterpret_cast<int*>(a.dq_accum + fused.accum_floats);
    if (fused.tile_counters > 0)
      a.tile_counter = reinterpret_cast<int*>(a.dq_accum + fused.accum_floats) + fused.semaphores;
    try {
      launch_backward(a, family, p.dtype, params.options.stream);
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
