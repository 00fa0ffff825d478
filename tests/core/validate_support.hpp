// Valid forward and backward params over owned buffers, for tests that break one field at a
// time, and the check that an InvalidArgument names the right field and values.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "flashref/error.hpp"
#include "flashref/params.hpp"

namespace flashref::test {

// Float32 (B, S, H, d) buffers for every tensor of one problem (the default one below has
// GQA and S_q != S_k, so a view of the wrong tensor always has the wrong shape).
struct ParamsBuffers {
  explicit ParamsBuffers(const Problem& p = make_problem(2, 4, 2, 5, 6, 8)) : problem(p) {
    auto sized = [](std::int64_t S, std::int64_t H, const Problem& pr) {
      return std::vector<float>(static_cast<std::size_t>(pr.B * S * H * pr.d), 0.5f);
    };
    q = o = dO = dq = sized(p.S_q, p.H, p);
    k = v = dk = dv = sized(p.S_k, p.H_kv, p);
    lse.assign(static_cast<std::size_t>(p.B * p.H * p.S_q), 0.0f);
  }
  TensorView q_view(std::vector<float>& x) {
    return bshd_view(x.data(), DType::f32, problem.B, problem.S_q, problem.H, problem.d);
  }
  TensorView k_view(std::vector<float>& x) {
    return bshd_view(x.data(), DType::f32, problem.B, problem.S_k, problem.H_kv, problem.d);
  }

  ForwardParams forward() {
    ForwardParams f;
    f.problem = problem;
    f.q = q_view(q);
    f.k = k_view(k);
    f.v = k_view(v);
    f.o = q_view(o);
    f.lse = lse.data();
    return f;
  }
  BackwardParams backward() {
    BackwardParams b;
    b.problem = problem;
    b.q = q_view(q);
    b.k = k_view(k);
    b.v = k_view(v);
    b.o = q_view(o);
    b.dO = q_view(dO);
    b.lse = lse.data();
    b.dq = q_view(dq);
    b.dk = k_view(dk);
    b.dv = k_view(dv);
    return b;
  }

  Problem problem;
  std::vector<float> q, k, v, o, dO, dq, dk, dv, lse;
};

// "(batch, seq, heads, dim)" of a view, as validation messages print shapes.
inline std::string shape_string(const TensorView& v) {
  std::ostringstream o;
  o << "(" << v.batch << ", " << v.seq << ", " << v.heads << ", " << v.dim << ")";
  return o.str();
}

// Expects `f` to throw InvalidArgument for `field`, with every string of `parts` in its message.
template <class F>
void expect_invalid(F&& f, const std::string& field, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one for " << field;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(field + ": ", 0), 0u) << "message does not start with the field: " << what;
    for (const std::string& part : parts) {
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' missing from: " << what;
    }
  }
}

}  // namespace flashref::test
