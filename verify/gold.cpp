#include "flashref/verify/gold.hpp"

#include "flashref/reference/gold.hpp"

namespace flashref::verify {

TensorSet compute_gold(const ProblemData& data, bool backward) {
  TensorSet gold;
  ForwardParams fwd;
  fwd.problem = data.problem;
  fwd.q = data.q.view();
  fwd.k = data.k.view();
  fwd.v = data.v.view();
  reference::GoldForward f = reference::gold_forward(fwd);
  gold[TensorId::O] = std::move(f.O);
  gold[TensorId::L] = std::move(f.L);
  if (backward) {
    BackwardParams bwd;
    bwd.problem = data.problem;
    bwd.q = fwd.q;
    bwd.k = fwd.k;
    bwd.v = fwd.v;
    bwd.dO = data.dO.view();
    reference::GoldBackward b = reference::gold_backward(bwd);
    gold[TensorId::dQ] = std::move(b.dQ);
    gold[TensorId::dK] = std::move(b.dK);
    gold[TensorId::dV] = std::move(b.dV);
  }
  return gold;
}

}  // namespace flashref::verify
