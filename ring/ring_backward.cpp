// One rank's backward: D comes from this rank's own O and dO (the inner backward computes it
// from the O it is given), P from the merged L, and each key/value block travels the ring with
// its dK, dV accumulators, which every rank adds to and which arrive home after R hops.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "block.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "shard.hpp"

namespace flashref::ring {

using detail::BlockLayout;
using detail::LocalRows;

void ring_backward_rank(const Backend& inner, Transport& transport, const BackwardParams& global) {
  const Problem& p = global.problem;
  const int r = transport.rank(), R = transport.size();
  const Zigzag queries(p.S_q, R), keys(p.S_k, R);
  const ExecutionOptions options = detail::inner_options(global.options, R);

  struct QueryChunk {
    std::int64_t begin = 0, rows = 0;
    LocalRows Q, O, dO, dQ_acc;
    std::vector<float> L;
  };
  std::vector<QueryChunk> mine;
  for (int c : queries.chunks_of(r)) {
    QueryChunk q;
    q.begin = queries.chunk_begin(c);
    q.rows = queries.chunk_length(c);
    if (q.rows == 0) continue;
    q.Q = detail::gather_rows(global.q, q.begin, q.rows, p.dtype);
    q.O = detail::gather_rows(global.o, q.begin, q.rows, p.dtype);
    q.dO = detail::gather_rows(global.dO, q.begin, q.rows, p.dtype);
    q.dQ_acc = detail::zero_rows(p.B, q.rows, p.H, p.d, DType::f32);
    q.L = detail::gather_lse(global.lse, p.B, p.H, p.S_q, q.begin, q.rows);
    mine.push_back(std::move(q));
  }

  // The block in hand: K and V (input dtype), and its dK, dV accumulators (float32).
  BlockLayout kv(p, keys, r, p.dtype), grads(p, keys, r, DType::f32);
  std::vector<std::byte> block(kv.bytes()), block_grads(grads.bytes(), std::byte{0});
  std::vector<std::byte> next, next_grads;
  for (int slot = 0; slot < 2; ++slot) {
    const std::int64_t rows = kv.chunk_length(slot);
    if (rows == 0) continue;
    detail::scatter_rows(detail::gather_rows(global.k, kv.chunk_begin(slot), rows, p.dtype).view,
                         kv.view(block.data(), slot, 0), 0);
    detail::scatter_rows(detail::gather_rows(global.v, kv.chunk_begin(slot), rows, p.dtype).view,
                         kv.view(block.data(), slot, 1), 0);
  }

  // Partial gradients come back in float32 and are summed in float32; each gradient is rounded
  // to grad_dtype once, at home.
  Problem partial = p;
  partial.grad_dtype = DType::f32;
  const int to = (r + 1) % R, from = (r - 1 + R) % R;
  int owner = r;  // whose block is in hand

  for (int step = 0; step < R; ++step) {
    const int next_owner = ((r - step - 1) % R + R) % R;
    BlockLayout next_kv(p, keys, next_owner, p.dtype), next_gr(p, keys, next_owner, DType::f32);
    // K and V move on while this rank computes (they are not needed after the last step).
    const bool more = step + 1 < R;
    if (more) {
      next.resize(next_kv.bytes());
      transport.start_exchange(block.data(), block.size(), to, next.data(), next.size(), from);
    }
    for (QueryChunk& q : mine) {
      for (int slot = 0; slot < 2; ++slot) {
        const Problem bp = detail::block_problem(partial, q.begin, q.rows, kv.chunk_begin(slot),
                                                 kv.chunk_length(slot));
        if (!detail::block_sees_a_key(bp)) continue;
        LocalRows dQ = detail::zero_rows(p.B, q.rows, p.H, p.d, DType::f32);
        LocalRows dK = detail::zero_rows(p.B, bp.S_k, p.H_kv, p.d, DType::f32);
        LocalRows dV = detail::zero_rows(p.B, bp.S_k, p.H_kv, p.d, DType::f32);
        BackwardParams bw;
        bw.problem = bp;
        bw.q = q.Q.view;
        bw.k = kv.view(block.data(), slot, 0);
        bw.v = kv.view(block.data(), slot, 1);
        bw.o = q.O.view;
        bw.dO = q.dO.view;
        bw.lse = q.L.data();
        bw.dq = dQ.view;
        bw.dk = dK.view;
        bw.dv = dV.view;
        bw.options = options;
        inner.backward(bw);
        detail::add_rows(q.dQ_acc.view, dQ.view);
        detail::add_rows(grads.view(block_grads.data(), slot, 0), dK.view);
        detail::add_rows(grads.view(block_grads.data(), slot, 1), dV.view);
      }
    }
    if (more) transport.wait();
    // dK and dV follow, now that this rank has added to them; after the last step this hop
    // brings every block's gradients home (rank r receives its own from r - 1).
    next_grads.resize(next_gr.bytes());
    transport.start_exchange(block_grads.data(), block_grads.size(), to, next_grads.data(),
                             next_grads.size(), from);
    transport.wait();
    std::swap(block, next);
    std::swap(block_grads, next_grads);
    kv = next_kv;
    grads = next_gr;
    owner = next_owner;
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
    detail::scatter_rows(grads.view(block_grads.data(), slot, 0), global.dk,
                         grads.chunk_begin(slot));
    detail::scatter_rows(grads.view(block_grads.data(), slot, 1), global.dv,
                         grads.chunk_begin(slot));
  }
  for (QueryChunk& q : mine) detail::scatter_rows(q.dQ_acc.view, global.dq, q.begin);
}

}  // namespace flashref::ring
