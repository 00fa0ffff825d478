// One rank's backward: D comes from this rank's own O and dO (the inner backward computes it
// from the O it is given), P from the merged L, and each key/value block travels the ring with
// its dK, dV accumulators, which every rank adds to and which arrive home after R hops. The
// rank's buffers live where the inner backend's pointers do (rank_memory.hpp).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "block.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "rank_memory.hpp"
#include "shard.hpp"

namespace flashref::ring {

using detail::BlockLayout;
using detail::RankBuffer;

void ring_backward_rank(const Backend& inner, Transport& transport, const BackwardParams& global) {
  const Problem& p = global.problem;
  const int r = transport.rank(), R = transport.size();
  const Zigzag queries(p.S_q, R), keys(p.S_k, R);
  const ExecutionOptions options = detail::inner_options(global.options, R);
  const auto memory = detail::memory_for(inner, global.options.stream);
  const auto rows_bytes = [&](std::int64_t rows, std::int64_t heads, DType t) {
    return static_cast<std::size_t>(p.B * rows * heads * p.d) * dtype_size(t);
  };

  struct QueryChunk {
    std::int64_t begin = 0, rows = 0;
    RankBuffer Q, O, dO, dQ_acc, L;
    TensorView Q_view, O_view, dO_view, dQ_view;
  };
  const auto local = [&](RankBuffer& buffer, std::int64_t rows, DType t) {
    buffer = memory->allocate(rows_bytes(rows, p.H, t));
    return bshd_view(buffer.data(), t, p.B, rows, p.H, p.d);
  };
  std::vector<QueryChunk> mine;
  std::int64_t most_rows = 0;
  for (int c : queries.chunks_of(r)) {
    QueryChunk q;
    q.begin = queries.chunk_begin(c);
    q.rows = queries.chunk_length(c);
    if (q.rows == 0) continue;
    q.Q_view = local(q.Q, q.rows, p.dtype);
    q.O_view = local(q.O, q.rows, p.dtype);
    q.dO_view = local(q.dO, q.rows, p.dtype);
    q.dQ_view = local(q.dQ_acc, q.rows, DType::f32);
    memory->gather_rows(global.q, q.begin, q.Q_view);
    memory->gather_rows(global.o, q.begin, q.O_view);
    memory->gather_rows(global.dO, q.begin, q.dO_view);
    q.L = memory->allocate(static_cast<std::size_t>(p.B * p.H * q.rows) * sizeof(float));
    memory->gather_lse(global.lse, p.B, p.H, p.S_q, q.begin, q.rows, q.L.floats());
    most_rows = std::max(most_rows, q.rows);
    mine.push_back(std::move(q));
  }

  // The block in hand: K and V (input dtype), and its dK, dV accumulators (float32); `next`
  // and `next_grads` receive the next ones. Buffers fit the largest block.
  BlockLayout kv(p, keys, r, p.dtype), grads(p, keys, r, DType::f32);
  const std::size_t most_kv = detail::largest_block_bytes(p, keys, p.dtype);
  const std::size_t most_grads = detail::largest_block_bytes(p, keys, DType::f32);
  RankBuffer block = memory->allocate(most_kv), next = memory->allocate(most_kv);
  RankBuffer block_grads = memory->allocate(most_grads), next_grads = memory->allocate(most_grads);
  for (int slot = 0; slot < 2; ++slot) {
    if (kv.chunk_length(slot) == 0) continue;
    memory->gather_rows(global.k, kv.chunk_begin(slot), kv.view(block.data(), slot, 0));
    memory->gather_rows(global.v, kv.chunk_begin(slot), kv.view(block.data(), slot, 1));
  }
  // One partial gradient at a time, in buffers sized for the longest chunks.
  std::int64_t most_keys = 0;
  for (int c = 0; c < keys.chunk_count(); ++c)
    most_keys = std::max(most_keys, keys.chunk_length(c));
  RankBuffer dQ = memory->allocate(rows_bytes(most_rows, p.H, DType::f32));
  RankBuffer dK = memory->allocate(rows_bytes(most_keys, p.H_kv, DType::f32));
  RankBuffer dV = memory->allocate(rows_bytes(most_keys, p.H_kv, DType::f32));

  // Partial gradients come back in float32 and are summed in float32; each gradient is rounded
  // to grad_dtype once, at home.
  Problem partial = p;
  partial.grad_dtype = DType::f32;
  const int to = (r + 1) % R, from = (r - 1 + R) % R;
  int owner = r;  // whose block is in hand

  for (int step = 0; step < R; ++step) {
    const int next_owner = ((r - step - 1) % R + R) % R;
    const BlockLayout next_kv(p, keys, next_owner, p.dtype),
        next_gr(p, keys, next_owner, DType::f32);
    // K and V move on while this rank computes (they are not needed after the last step).
    const bool more = step + 1 < R;
    if (more) {
      memory->settle();  // the block is written, `next` no longer read
      transport.start_exchange(block.data(), kv.bytes(), to, next.data(), next_kv.bytes(), from);
    }
    for (QueryChunk& q : mine) {
      for (int slot = 0; slot < 2; ++slot) {
        const Problem bp = detail::block_problem(partial, q.begin, q.rows, kv.chunk_begin(slot),
                                                 kv.chunk_length(slot));
        if (!detail::block_sees_a_key(bp)) continue;
        BackwardParams bw;
        bw.problem = bp;
        bw.q = q.Q_view;
        bw.k = kv.view(block.data(), slot, 0);
        bw.v = kv.view(block.data(), slot, 1);
        bw.o = q.O_view;
        bw.dO = q.dO_view;
        bw.lse = q.L.floats();
        bw.dq = bshd_view(dQ.data(), DType::f32, p.B, q.rows, p.H, p.d);
        bw.dk = bshd_view(dK.data(), DType::f32, p.B, bp.S_k, p.H_kv, p.d);
        bw.dv = bshd_view(dV.data(), DType::f32, p.B, bp.S_k, p.H_kv, p.d);
        bw.options = options;
        memory->zero(dQ.data(), rows_bytes(q.rows, p.H, DType::f32));
        memory->zero(dK.data(), rows_bytes(bp.S_k, p.H_kv, DType::f32));
        memory->zero(dV.data(), rows_bytes(bp.S_k, p.H_kv, DType::f32));
        inner.backward(bw);
        memory->add_rows(q.dQ_view, bw.dq);
        memory->add_rows(grads.view(block_grads.data(), slot, 0), bw.dk);
        memory->add_rows(grads.view(block_grads.data(), slot, 1), bw.dv);
      }
    }
    if (more) transport.wait();
    // dK and dV follow, now that this rank has added to them; after the last step this hop
    // brings every block's gradients home (rank r receives its own from r - 1).
    memory->settle();
    transport.start_exchange(block_grads.data(), grads.bytes(), to, next_grads.data(),
                             next_gr.bytes(), from);
    transport.wait();
    std::swap(block, next);
    std::swap(block_grads, next_grads);
    kv = next_kv;
    grads = next_gr;
    owner = next_owner;
    // The accumulators received carry the earlier ranks' sums; the buffer just sent is reused
    // for the next receive, which overwrites every byte the next block's layout reads.
  }
  // Each rank writes only its own dK, dV rows, as a rank of a distributed run holds only its
  // own shard: the block in hand must be back home.
  if (owner != r) {
    throw std::logic_error("ring backward: rank " + std::to_string(r) +
                           " ended with the dK, dV of rank " + std::to_string(owner) +
                           " instead of its own");
  }

  // After R hops the block in hand is this rank's own, with every rank's contribution.
  for (int slot = 0; slot < 2; ++slot) {
    if (grads.chunk_length(slot) == 0) continue;
    memory->scatter_rows(grads.view(block_grads.data(), slot, 0), global.dk,
                         grads.chunk_begin(slot));
    memory->scatter_rows(grads.view(block_grads.data(), slot, 1), global.dv,
                         grads.chunk_begin(slot));
  }
  for (QueryChunk& q : mine) memory->scatter_rows(q.dQ_view, global.dq, q.begin);
  memory->settle();
}

}  // namespace flashref::ring
