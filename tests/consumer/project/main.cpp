// Uses an installed flashref: the backends through the registry, and the verifier.
#include <cmath>
#include <iostream>
#include <vector>

#include <flashref/backend.hpp>
#include <flashref/verify/report.hpp>
#include <flashref/verify/verification.hpp>

int main() {
  using namespace flashref;
  // The raw interface: bottom-right causal with S_q > S_k has fully masked rows, L = -inf.
  const Problem p = make_problem(1, 1, 1, 4, 2, 8, Mask::causal_bottom_right, DType::f32);
  std::vector<float> q(4 * 8, 0.5f), k(2 * 8, 0.25f), v(2 * 8, 1.0f), o(4 * 8), lse(4);
  ForwardParams fwd;
  fwd.problem = p;
  fwd.q = bshd_view(q.data(), DType::f32, 1, 4, 1, 8);
  fwd.k = bshd_view(k.data(), DType::f32, 1, 2, 1, 8);
  fwd.v = bshd_view(v.data(), DType::f32, 1, 2, 1, 8);
  fwd.o = bshd_view(o.data(), DType::f32, 1, 4, 1, 8);
  fwd.lse = lse.data();
  make_backend("cpu")->forward(fwd);
  if (!(std::isinf(lse[0]) && lse[0] < 0) || o[0] != 0.0f || o[3 * 8] != 1.0f) {
    std::cerr << "consumer: unexpected cpu output\n";
    return 1;
  }
  // The verifier, judging every backend of the installed build.
  verify::VerifyCase c;
  c.problem = make_problem(1, 2, 1, 48, 40, 16, Mask::causal_top_left, DType::f32);
  const verify::VerifyReport report = verify::run_verification(c, backend_names());
  std::cout << verify::format_table(report);
  if (!report.passed()) return 1;
  std::cout << "consumer: ok\n";
  return 0;
}
