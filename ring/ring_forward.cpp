// One rank's forward: its query chunks meet every key/value block once as the blocks travel
// the ring, and the partial results merge by their logsumexp.
#include <utility>
#include <vector>

#include "block.hpp"
#include "flashref/merge.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "shard.hpp"

namespace flashref::ring {

using detail::BlockLayout;
using detail::LocalRows;

void ring_forward_rank(const Backend& inner, Transport& transport, const ForwardParams& global) {
  const Problem& p = global.problem;
  const int r = transport.rank(), R = transport.size();
  const Zigzag queries(p.S_q, R), keys(p.S_k, R);
  const ExecutionOptions options = detail::inner_options(global.options, R);

  // This rank's query chunks, and the running merge of each (O in float32, L).
  struct QueryChunk {
    std::int64_t begin = 0, rows = 0;
    LocalRows Q, O_acc;
    std::vector<float> L_acc;
  };
  std::vector<QueryChunk> mine;
  for (int c : queries.chunks_of(r)) {
    QueryChunk q;
    q.begin = queries.chunk_begin(c);
    q.rows = queries.chunk_length(c);
    if (q.rows == 0) continue;
    q.Q = detail::gather_rows(global.q, q.begin, q.rows, p.dtype);
    q.O_acc = detail::zero_rows(p.B, q.rows, p.H, p.d, DType::f32);
    q.L_acc.resize(static_cast<std::size_t>(p.B * p.H * q.rows));
    clear_merge(MergeTarget{q.O_acc.view, q.L_acc.data()});
    mine.push_back(std::move(q));
  }

  // The block in hand starts as this rank's own key/value chunks.
  BlockLayout layout(p, keys, r, p.dtype);
  std::vector<std::byte> block(layout.bytes()), next;
  for (int slot = 0; slot < 2; ++slot) {
    const std::int64_t rows = layout.chunk_length(slot);
    if (rows == 0) continue;
    detail::scatter_rows(
        detail::gather_rows(global.k, layout.chunk_begin(slot), rows, p.dtype).view,
        layout.view(block.data(), slot, 0), 0);
    detail::scatter_rows(
        detail::gather_rows(global.v, layout.chunk_begin(slot), rows, p.dtype).view,
        layout.view(block.data(), slot, 1), 0);
  }

  for (int step = 0; step < R; ++step) {
    // Step s holds the block of rank r - s; pass it on to r + 1 while computing on it.
    const bool more = step + 1 < R;
    const int next_owner = ((r - step - 1) % R + R) % R;
    BlockLayout next_layout(p, keys, next_owner, p.dtype);
    if (more) {
      next.resize(next_layout.bytes());
      transport.start_exchange(block.data(), block.size(), (r + 1) % R, next.data(), next.size(),
                               (r - 1 + R) % R);
    }
    for (QueryChunk& q : mine) {
      for (int slot = 0; slot < 2; ++slot) {
        const Problem bp = detail::block_problem(p, q.begin, q.rows, layout.chunk_begin(slot),
                                                 layout.chunk_length(slot));
        if (!detail::block_sees_a_key(bp)) continue;
        LocalRows O_part = detail::zero_rows(p.B, q.rows, p.H, p.d, p.dtype);
        std::vector<float> L_part(static_cast<std::size_t>(p.B * p.H * q.rows));
        ForwardParams fp;
        fp.problem = bp;
        fp.q = q.Q.view;
        fp.k = layout.view(block.data(), slot, 0);
        fp.v = layout.view(block.data(), slot, 1);
        fp.o = O_part.view;
        fp.lse = L_part.data();
        fp.options = options;
        inner.forward(fp);
        merge_into(MergeTarget{q.O_acc.view, q.L_acc.data()}, O_part.view, L_part.data());
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
    detail::scatter_rows(q.O_acc.view, global.o, q.begin);
    detail::scatter_lse(q.L_acc, global.lse, p.B, p.H, p.S_q, q.begin);
  }
}

}  // namespace flashref::ring
