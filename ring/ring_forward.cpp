// One rank's forward: its query chunks meet every key/value block once as the blocks travel
// the ring, and the partial results merge by their logsumexp. The rank's buffers live where
// the inner backend's pointers do (rank_memory.hpp): host memory for a host backend, device
// memory for a device one, with no copy between the two.
#include <algorithm>
#include <utility>
#include <vector>

#include "block.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "rank_memory.hpp"
#include "shard.hpp"

namespace flashref::ring {

using detail::BlockLayout;
using detail::RankBuffer;

void ring_forward_rank(const Backend& inner, Transport& transport, const ForwardParams& global) {
  const Problem& p = global.problem;
  const int r = transport.rank(), R = transport.size();
  const Zigzag queries(p.S_q, R), keys(p.S_k, R);
  const ExecutionOptions options = detail::inner_options(global.options, R);
  const auto memory = detail::memory_for(inner, global.options.stream);
  const auto rows_bytes = [&](std::int64_t rows, DType t) {
    return static_cast<std::size_t>(p.B * rows * p.H * p.d) * dtype_size(t);
  };
  const auto lse_bytes = [&](std::int64_t rows) {
    return static_cast<std::size_t>(p.B * p.H * rows) * sizeof(float);
  };

  // This rank's query chunks, and the running merge of each (O in float32, L).
  struct QueryChunk {
    std::int64_t begin = 0, rows = 0;
    RankBuffer Q, O_acc, L_acc;
    TensorView Q_view, O_view;
  };
  std::vector<QueryChunk> mine;
  std::int64_t most_rows = 0;
  for (int c : queries.chunks_of(r)) {
    QueryChunk q;
    q.begin = queries.chunk_begin(c);
    q.rows = queries.chunk_length(c);
    if (q.rows == 0) continue;
    q.Q = memory->allocate(rows_bytes(q.rows, p.dtype));
    q.Q_view = bshd_view(q.Q.data(), p.dtype, p.B, q.rows, p.H, p.d);
    memory->gather_rows(global.q, q.begin, q.Q_view);
    q.O_acc = memory->allocate(rows_bytes(q.rows, DType::f32));
    q.O_view = bshd_view(q.O_acc.data(), DType::f32, p.B, q.rows, p.H, p.d);
    q.L_acc = memory->allocate(lse_bytes(q.rows));
    memory->clear_merge(MergeTarget{q.O_view, q.L_acc.floats()});
    most_rows = std::max(most_rows, q.rows);
    mine.push_back(std::move(q));
  }
  // One partial result at a time, in buffers sized for the longer chunk.
  RankBuffer O_part = memory->allocate(rows_bytes(most_rows, p.dtype));
  RankBuffer L_part = memory->allocate(lse_bytes(most_rows));

  // The block in hand starts as this rank's own key/value chunks; `next` receives the next.
  const std::size_t most_block = detail::largest_block_bytes(p, keys, p.dtype);
  BlockLayout layout(p, keys, r, p.dtype);
  RankBuffer block = memory->allocate(most_block), next = memory->allocate(most_block);
  for (int slot = 0; slot < 2; ++slot) {
    if (layout.chunk_length(slot) == 0) continue;
    memory->gather_rows(global.k, layout.chunk_begin(slot), layout.view(block.data(), slot, 0));
    memory->gather_rows(global.v, layout.chunk_begin(slot), layout.view(block.data(), slot, 1));
  }

  for (int step = 0; step < R; ++step) {
    // Step s holds the block of rank r - s; pass it on to r + 1 while computing on it.
    const bool more = step + 1 < R;
    const int next_owner = ((r - step - 1) % R + R) % R;
    const BlockLayout next_layout(p, keys, next_owner, p.dtype);
    if (more) {
      // The block is written and `next` no longer read by the last step's calls.
      memory->settle();
      transport.start_exchange(block.data(), layout.bytes(), (r + 1) % R, next.data(),
                               next_layout.bytes(), (r - 1 + R) % R);
    }
    for (QueryChunk& q : mine) {
      for (int slot = 0; slot < 2; ++slot) {
        const Problem bp = detail::block_problem(p, q.begin, q.rows, layout.chunk_begin(slot),
                                                 layout.chunk_length(slot));
        if (!detail::block_sees_a_key(bp)) continue;
        ForwardParams fp;
        fp.problem = bp;
        fp.q = q.Q_view;
        fp.k = layout.view(block.data(), slot, 0);
        fp.v = layout.view(block.data(), slot, 1);
        fp.o = bshd_view(O_part.data(), p.dtype, p.B, q.rows, p.H, p.d);
        fp.lse = L_part.floats();
        fp.options = options;
        memory->zero(O_part.data(), rows_bytes(q.rows, p.dtype));
        memory->zero(L_part.data(), lse_bytes(q.rows));
        inner.forward(fp);
        memory->merge_into(MergeTarget{q.O_view, q.L_acc.floats()}, fp.o, fp.lse);
      }
    }
    if (more) {
      transport.wait();
      std::swap(block, next);
      layout = next_layout;
    }
  }

  for (QueryChunk& q : mine) {
    // O rounded once, from the float32 merge, to its dtype.
    memory->scatter_rows(q.O_view, global.o, q.begin);
    memory->scatter_lse(q.L_acc.floats(), q.rows, global.lse, p.B, p.H, p.S_q, q.begin);
  }
  memory->settle();
}

}  // namespace flashref::ring
