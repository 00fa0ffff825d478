// Ring attention over NCCL, one process per GPU (scripts/device-run's ring2 step): a bf16
// causal problem run as R ranks of the device-resident ring (ring_forward_rank,
// ring_backward_rank with the cuda backend's partial attention and every buffer on the GPU),
// timed with CUDA events (medians; the ring's time is its slowest rank's), then run whole on
// rank 0's GPU by the cuda backend alone (the one-GPU time), and the two compared on sampled
// rows (O, L, dQ, dK, dV; sampled_rows.hpp, bounds derived in docs/ring.md). Exit 0 when every
// comparison holds, 1 when one fails or a run throws, 2 on bad usage.
//
//   nccl_ring_attention --rank r --ranks R --id-file PATH --shape B,H,S,d [--heads-kv H_kv]
//                       [--iters N] [--warmup W] [--samples K] [--seed N]
//
// Rank r uses GPU r modulo the device count (NCCL needs a GPU per rank). Every rank builds the
// whole problem's inputs from the seed on its GPU and writes its own rows of the outputs.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "flashref/backend.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "nccl_transport.hpp"
#include "sampled_rows.hpp"

namespace {

using flashref::DType;
using flashref::Problem;
using flashref::TensorView;
namespace ring = flashref::ring;
namespace sampled = flashref::ring::sampled;

struct Args {
  int rank = -1, ranks = 0, iters = 5, warmup = 1, samples = 64;
  std::int64_t B = 0, H = 0, H_kv = 0, S = 0, d = 0;
  std::uint64_t seed = 0;
  std::string id_file;
};

std::int64_t parse_int(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw std::invalid_argument(option + ": not an integer: '" + text + "'");
  }
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(k + ": needs a value");
    const std::string v = argv[++i];
    if (k == "--rank") {
      a.rank = static_cast<int>(parse_int(k, v));
    } else if (k == "--ranks") {
      a.ranks = static_cast<int>(parse_int(k, v));
    } else if (k == "--id-file") {
      a.id_file = v;
    } else if (k == "--shape") {
      std::stringstream in(v);
      std::string part;
      std::vector<std::int64_t> dims;
      while (std::getline(in, part, ',')) dims.push_back(parse_int(k, part));
      if (dims.size() != 4)
        throw std::invalid_argument("--shape: expected B,H,S,d, got '" + v + "'");
      a.B = dims[0], a.H = dims[1], a.S = dims[2], a.d = dims[3];
    } else if (k == "--heads-kv") {
      a.H_kv = parse_int(k, v);
    } else if (k == "--iters") {
      a.iters = static_cast<int>(parse_int(k, v));
    } else if (k == "--warmup") {
      a.warmup = static_cast<int>(parse_int(k, v));
    } else if (k == "--samples") {
      a.samples = static_cast<int>(parse_int(k, v));
    } else if (k == "--seed") {
      a.seed = static_cast<std::uint64_t>(parse_int(k, v));
    } else {
      throw std::invalid_argument("unknown option " + k);
    }
  }
  if (a.ranks < 1) throw std::invalid_argument("--ranks: must be >= 1");
  if (a.rank < 0 || a.rank >= a.ranks) throw std::invalid_argument("--rank: must be in 0..ranks-1");
  if (a.id_file.empty()) throw std::invalid_argument("--id-file: required");
  if (a.B < 1 || a.H < 1 || a.S < 1 || a.d < 1) {
    throw std::invalid_argument("--shape: B,H,S,d required, each >= 1");
  }
  if (a.H_kv == 0) a.H_kv = a.H;
  if (a.H_kv < 1 || a.H % a.H_kv != 0) throw std::invalid_argument("--heads-kv: must divide H");
  if (a.iters < 1 || a.warmup < 0 || a.samples < 0) {
    throw std::invalid_argument("--iters >= 1, --warmup >= 0, --samples >= 0");
  }
  return a;
}

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device tensor of the whole problem, freed when it goes.
class DeviceTensor {
 public:
  DeviceTensor(std::int64_t B, std::int64_t S, std::int64_t heads, std::int64_t d, DType t)
      : view_{}, bytes_(static_cast<std::size_t>(B * S * heads * d) * flashref::dtype_size(t)) {
    cuda(cudaMalloc(&data_, bytes_), "cudaMalloc of a tensor");
    view_ = flashref::bshd_view(data_, t, B, S, heads, d);
  }
  ~DeviceTensor() { cudaFree(data_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  const TensorView& view() const { return view_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  TensorView view_;
  std::size_t bytes_;
};

// Inputs uniform in [-1, 1) from a counter-based hash of (seed, tensor, index): every rank
// builds the same whole problem without communicating.
void fill_uniform(const DeviceTensor& t, std::uint64_t seed, std::uint64_t which) {
  const std::size_t n = t.bytes() / flashref::dtype_size(t.view().dtype);
  std::vector<std::uint16_t> host(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + (which << 40) + i;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f;
    flashref::store_from_float(host.data(), t.view().dtype, static_cast<std::int64_t>(i), u);
  }
  cuda(cudaMemcpy(t.view().data, host.data(), t.bytes(), cudaMemcpyHostToDevice), "inputs");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Sends a buffer around the ring R - 1 times, each rank keeping the entries it owns (`own`)
// and taking the others from its left neighbour: after hop h rank r holds the parts of ranks
// r - h .. r, so after the last every rank holds every rank's part.
template <class T>
void assemble(ring::Transport& t, std::vector<T>& values, const std::vector<char>& own) {
  const int R = t.size(), r = t.rank();
  if (R == 1 || values.empty()) return;
  const std::size_t bytes = values.size() * sizeof(T);
  void *send = nullptr, *recv = nullptr;
  cuda(cudaMalloc(&send, bytes), "cudaMalloc");
  cuda(cudaMalloc(&recv, bytes), "cudaMalloc");
  std::vector<T> got(values.size());
  for (int hop = 0; hop + 1 < R; ++hop) {
    cuda(cudaMemcpy(send, values.data(), bytes, cudaMemcpyHostToDevice), "to device");
    t.start_exchange(send, bytes, (r + 1) % R, recv, bytes, (r - 1 + R) % R);
    t.wait();
    cuda(cudaMemcpy(got.data(), recv, bytes, cudaMemcpyDeviceToHost), "to host");
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!own[i]) values[i] = got[i];
  }
  cudaFree(send);
  cudaFree(recv);
}

// Every rank's value, in rank order (the ring's time is its slowest rank's).
std::vector<double> gather(ring::Transport& t, double mine) {
  std::vector<double> all(static_cast<std::size_t>(t.size()), 0.0);
  std::vector<char> own(all.size(), 0);
  all[static_cast<std::size_t>(t.rank())] = mine;
  own[static_cast<std::size_t>(t.rank())] = 1;
  assemble(t, all, own);
  return all;
}

void barrier(ring::Transport& t) {
  std::vector<double> x = gather(t, 0.0);
  (void)x;
}

// The sampled rows of the outputs, as float: O and dQ (B, H, d) and L (B, H) per query sample,
// then dK and dV (B, H_kv, d) per key sample. `only` selects the samples read (the others stay
// 0): a rank reads the rows it owns.
struct Outputs {
  const TensorView *o, *dq, *dk, *dv;
  const float* lse;
};
struct Layout {
  std::int64_t B, H, H_kv, S, d;
  std::size_t per_query() const { return static_cast<std::size_t>(B * H * (2 * d + 1)); }
  std::size_t per_key() const { return static_cast<std::size_t>(2 * B * H_kv * d); }
};

void read_rows(const TensorView& t, std::int64_t s, float* out) {
  const std::size_t per_batch = static_cast<std::size_t>(t.heads * t.dim);
  std::vector<std::uint16_t> bits(per_batch);
  for (std::int64_t b = 0; b < t.batch; ++b) {
    const std::size_t elem = flashref::dtype_size(t.dtype);
    const auto* src =
        static_cast<const char*>(t.data) + t.offset(b, s, 0) * static_cast<std::int64_t>(elem);
    if (t.dtype == DType::f32) {
      cuda(cudaMemcpy(out + b * per_batch, src, per_batch * 4, cudaMemcpyDeviceToHost), "sample");
      continue;
    }
    cuda(cudaMemcpy(bits.data(), src, per_batch * 2, cudaMemcpyDeviceToHost), "sample");
    for (std::size_t i = 0; i < per_batch; ++i)
      out[b * per_batch + i] =
          flashref::load_as_float(bits.data(), t.dtype, static_cast<std::int64_t>(i));
  }
}

std::vector<float> read_samples(const Outputs& out, const Layout& l,
                                const std::vector<std::int64_t>& rows, const ring::Zigzag& z,
                                int only_rank, std::vector<char>* own) {
  std::vector<float> v(rows.size() * (l.per_query() + l.per_key()), 0.0f);
  if (own) own->assign(v.size(), 0);
  const std::size_t ho = static_cast<std::size_t>(l.B * l.H * l.d);
  const std::size_t hk = static_cast<std::size_t>(l.B * l.H_kv * l.d);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t s = rows[i];
    if (only_rank >= 0 && sampled::owner_of(z, s) != only_rank) continue;
    float* q = v.data() + i * l.per_query();
    read_rows(*out.o, s, q);
    read_rows(*out.dq, s, q + ho);
    for (std::int64_t bh = 0; bh < l.B * l.H; ++bh)
      cuda(cudaMemcpy(q + 2 * ho + bh, out.lse + bh * l.S + s, 4, cudaMemcpyDeviceToHost), "L");
    float* k = v.data() + rows.size() * l.per_query() + i * l.per_key();
    read_rows(*out.dk, s, k);
    read_rows(*out.dv, s, k + hk);
    if (own) {
      std::fill(own->begin() + static_cast<std::ptrdiff_t>(i * l.per_query()),
                own->begin() + static_cast<std::ptrdiff_t>((i + 1) * l.per_query()), 1);
      const std::size_t k0 = rows.size() * l.per_query() + i * l.per_key();
      std::fill(own->begin() + static_cast<std::ptrdiff_t>(k0),
                own->begin() + static_cast<std::ptrdiff_t>(k0 + l.per_key()), 1);
    }
  }
  return v;
}

// One tensor of the samples: O (0), dQ (1), L (2), dK (3), dV (4).
std::vector<float> part(const std::vector<float>& v, const Layout& l, std::size_t n, int which) {
  std::vector<float> r;
  const std::size_t ho = static_cast<std::size_t>(l.B * l.H * l.d);
  const std::size_t hl = static_cast<std::size_t>(l.B * l.H);
  const std::size_t hk = static_cast<std::size_t>(l.B * l.H_kv * l.d);
  for (std::size_t i = 0; i < n; ++i) {
    const float* q = v.data() + i * l.per_query();
    const float* k = v.data() + n * l.per_query() + i * l.per_key();
    if (which == 0) r.insert(r.end(), q, q + ho);
    if (which == 1) r.insert(r.end(), q + ho, q + 2 * ho);
    if (which == 2) r.insert(r.end(), q + 2 * ho, q + 2 * ho + hl);
    if (which == 3) r.insert(r.end(), k, k + hk);
    if (which == 4) r.insert(r.end(), k + hk, k + 2 * hk);
  }
  return r;
}

// The cuda backend with a device runtime whose allocations come from the device's stream-
// ordered pool (cudaMallocAsync, kept between runs): the ring's rank buffers are allocated on
// every call, and cudaMalloc's page mapping and cudaFree's device-wide wait inside the timed
// runs would charge the ring for what a long-lived training job allocates once.
class PooledRuntime final : public flashref::DeviceRuntime {
 public:
  explicit PooledRuntime(const flashref::DeviceRuntime& base) : base_(base) {
    int device = 0;
    cuda(cudaGetDevice(&device), "cudaGetDevice");
    cuda(cudaDeviceGetDefaultMemPool(&pool_, device), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;  // never hand freed memory back to the driver
    cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep),
         "cudaMemPoolSetAttribute");
  }
  void* allocate(std::size_t bytes) const override {
    void* p = nullptr;
    cuda(cudaMallocFromPoolAsync(&p, std::max<std::size_t>(bytes, 1), pool_, nullptr),
         "cudaMallocFromPoolAsync");
    return p;
  }
  void release(void* p) const override {
    if (p != nullptr) cuda(cudaFreeAsync(p, nullptr), "cudaFreeAsync");
  }
  void to_device(void* dst, const void* src, std::size_t bytes) const override {
    base_.to_device(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, std::size_t bytes) const override {
    base_.to_host(dst, src, bytes);
  }
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes) const override {
    base_.fill_bytes(dst, value, bytes);
  }
  void synchronize() const override { base_.synchronize(); }
  std::vector<double> time_ms(const std::function<void()>& launch, int warmup, int reps,
                              bool flush_l2) const override {
    return base_.time_ms(launch, warmup, reps, flush_l2);
  }
  std::size_t bytes_in_use() const override { return base_.bytes_in_use(); }
  std::string device_name() const override { return base_.device_name(); }

 private:
  const flashref::DeviceRuntime& base_;
  cudaMemPool_t pool_ = nullptr;
};

class PooledBackend final : public flashref::Backend {
 public:
  explicit PooledBackend(std::shared_ptr<const flashref::Backend> inner)
      : inner_(std::move(inner)), runtime_(*inner_->device_runtime()) {}
  std::string name() const override { return inner_->name(); }
  flashref::MemorySpace memory_space() const override { return inner_->memory_space(); }
  const flashref::DeviceRuntime* device_runtime() const override { return &runtime_; }
  flashref::Support supports(const Problem& p) const override { return inner_->supports(p); }
  void forward(const flashref::ForwardParams& p) const override { inner_->forward(p); }
  void backward(const flashref::BackwardParams& p) const override { inner_->backward(p); }

 private:
  std::shared_ptr<const flashref::Backend> inner_;
  PooledRuntime runtime_;
};

struct Timed {
  double forward_ms, backward_ms, total_ms;
};

// warmup + iters runs of `forward` then `backward`, timed with events on the default stream
// (what both runs launch on); `before` runs untimed ahead of each.
template <class Before, class Fwd, class Bwd>
Timed time_runs(const Args& a, const Before& before, const Fwd& forward, const Bwd& backward) {
  cudaEvent_t e0, e1, e2;
  cuda(cudaEventCreate(&e0), "cudaEventCreate");
  cuda(cudaEventCreate(&e1), "cudaEventCreate");
  cuda(cudaEventCreate(&e2), "cudaEventCreate");
  std::vector<double> fwd, bwd, total;
  for (int i = 0; i < a.warmup + a.iters; ++i) {
    before();
    cuda(cudaEventRecord(e0, nullptr), "cudaEventRecord");
    forward();
    cuda(cudaEventRecord(e1, nullptr), "cudaEventRecord");
    backward();
    cuda(cudaEventRecord(e2, nullptr), "cudaEventRecord");
    cuda(cudaEventSynchronize(e2), "a timed run");
    float f = 0, b = 0;
    cuda(cudaEventElapsedTime(&f, e0, e1), "cudaEventElapsedTime");
    cuda(cudaEventElapsedTime(&b, e1, e2), "cudaEventElapsedTime");
    if (i < a.warmup) continue;
    fwd.push_back(f);
    bwd.push_back(b);
    total.push_back(static_cast<double>(f) + b);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  return {median(fwd), median(bwd), median(total)};
}

int run(const Args& a) {
  int devices = 0;
  cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  cuda(cudaSetDevice(a.rank % devices), "cudaSetDevice");
  const auto id = ring::share_nccl_id_through_file(a.rank, a.id_file, std::chrono::seconds(120));
  ring::NcclTransport t(a.rank, a.ranks, id);

  const std::shared_ptr<const flashref::Backend> cuda_backend = flashref::make_backend("cuda");
  if (cuda_backend->device_runtime() == nullptr)
    throw std::runtime_error("cuda backend has no device runtime");
  const PooledBackend pooled(cuda_backend);
  const Problem p = flashref::make_problem(a.B, a.H, a.H_kv, a.S, a.S, a.d,
                                           flashref::Mask::causal_top_left, DType::bf16);
  const flashref::Support s = cuda_backend->supports(p);
  if (!s.ok)
    throw std::runtime_error("cuda backend cannot run " + flashref::describe(p) + ": " + s.reason);

  DeviceTensor q(a.B, a.S, a.H, a.d, p.dtype), k(a.B, a.S, a.H_kv, a.d, p.dtype),
      v(a.B, a.S, a.H_kv, a.d, p.dtype), dO(a.B, a.S, a.H, a.d, p.dtype),
      o(a.B, a.S, a.H, a.d, p.dtype), dq(a.B, a.S, a.H, a.d, p.grad_dtype),
      dk(a.B, a.S, a.H_kv, a.d, p.grad_dtype), dv(a.B, a.S, a.H_kv, a.d, p.grad_dtype);
  float* lse = nullptr;
  cuda(cudaMalloc(&lse, static_cast<std::size_t>(a.B * a.H * a.S) * 4), "cudaMalloc of L");
  fill_uniform(q, a.seed, 0);
  fill_uniform(k, a.seed, 1);
  fill_uniform(v, a.seed, 2);
  fill_uniform(dO, a.seed, 3);

  flashref::ForwardParams fwd;
  fwd.problem = p;
  fwd.q = q.view(), fwd.k = k.view(), fwd.v = v.view(), fwd.o = o.view(), fwd.lse = lse;
  flashref::BackwardParams bwd;
  bwd.problem = p;
  bwd.q = q.view(), bwd.k = k.view(), bwd.v = v.view(), bwd.o = o.view(), bwd.dO = dO.view();
  bwd.lse = lse, bwd.dq = dq.view(), bwd.dk = dk.view(), bwd.dv = dv.view();
  flashref::validate(fwd);
  flashref::validate(bwd);

  // The ring, every rank at once; each iteration starts together (a barrier, untimed).
  const Timed mine = time_runs(
      a, [&] { barrier(t); }, [&] { ring::ring_forward_rank(pooled, t, fwd); },
      [&] { ring::ring_backward_rank(pooled, t, bwd); });
  const auto slowest = [](const std::vector<double>& v) {
    return *std::max_element(v.begin(), v.end());
  };
  const double ring_fwd = slowest(gather(t, mine.forward_ms));
  const double ring_bwd = slowest(gather(t, mine.backward_ms));
  const double ring_total = slowest(gather(t, mine.total_ms));

  // The samples of the ring's outputs: each rank reads its own rows, the ring brings them all.
  const ring::Zigzag z(a.S, a.ranks);
  const std::vector<std::int64_t> rows = sampled::sample_rows(z, a.samples, a.seed + 1);
  const Layout l{a.B, a.H, a.H_kv, a.S, a.d};
  std::vector<char> own;
  std::vector<float> ring_samples =
      read_samples({&fwd.o, &bwd.dq, &bwd.dk, &bwd.dv, lse}, l, rows, z, a.rank, &own);
  assemble(t, ring_samples, own);
  if (a.rank != 0) {
    std::printf("{\"rank\": %d, \"ring_forward_ms\": %.3f, \"ring_backward_ms\": %.3f}\n", a.rank,
                mine.forward_ms, mine.backward_ms);
    cudaFree(lse);
    return 0;
  }

  // The whole problem on this GPU alone: the one-GPU time and the values to compare with.
  DeviceTensor o1(a.B, a.S, a.H, a.d, p.dtype), dq1(a.B, a.S, a.H, a.d, p.grad_dtype),
      dk1(a.B, a.S, a.H_kv, a.d, p.grad_dtype), dv1(a.B, a.S, a.H_kv, a.d, p.grad_dtype);
  float* lse1 = nullptr;
  cuda(cudaMalloc(&lse1, static_cast<std::size_t>(a.B * a.H * a.S) * 4), "cudaMalloc of L");
  flashref::ForwardParams f1 = fwd;
  f1.o = o1.view(), f1.lse = lse1;
  flashref::BackwardParams b1 = bwd;
  b1.o = o1.view(), b1.lse = lse1, b1.dq = dq1.view(), b1.dk = dk1.view(), b1.dv = dv1.view();
  const Timed one = time_runs(
      a, [] {}, [&] { cuda_backend->forward(f1); }, [&] { cuda_backend->backward(b1); });
  const std::vector<float> single_samples =
      read_samples({&f1.o, &b1.dq, &b1.dk, &b1.dv, lse1}, l, rows, z, -1, nullptr);

  // Bounds (docs/ring.md, "Checking the two-GPU run"): O within 4 bf16 unit roundoffs in
  // norm, the gradients within 8, L within 2^-10 absolute.
  const double u = 0x1.0p-8;
  const char* names[] = {"O", "dQ", "L", "dK", "dV"};
  const double bounds[] = {4 * u, 8 * u, 0x1.0p-10, 8 * u, 8 * u};
  bool passed = true;
  std::string checks;
  for (int w = 0; w < 5; ++w) {
    const sampled::Comparison c =
        sampled::compare(names[w], part(ring_samples, l, rows.size(), w),
                         part(single_samples, l, rows.size(), w), bounds[w], w == 2);
    passed = passed && c.passed();
    checks += (w ? ", " : "") + sampled::to_json(c);
  }
  std::printf(
      "{\"problem\": \"%s\", \"ranks\": %d, \"iters\": %d, \"ring_forward_ms\": %.3f, "
      "\"ring_backward_ms\": %.3f, \"ring_ms\": %.3f, \"one_gpu_forward_ms\": %.3f, "
      "\"one_gpu_backward_ms\": %.3f, \"one_gpu_ms\": %.3f, \"speedup\": %.3f, "
      "\"scaling_efficiency\": %.3f, \"sampled_rows\": %zu, \"checks\": [%s], \"passed\": %s}\n",
      flashref::describe(p).c_str(), a.ranks, a.iters, ring_fwd, ring_bwd, ring_total,
      one.forward_ms, one.backward_ms, one.total_ms, one.total_ms / ring_total,
      one.total_ms / ring_total / a.ranks, rows.size(), checks.c_str(), passed ? "true" : "false");
  cudaFree(lse);
  cudaFree(lse1);
  return passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_ring_attention: %s\n", e.what());
    return 2;
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_ring_attention: rank %d: %s\n", a.rank, e.what());
    return 1;
  }
}
