// Writes the example of docs/walkthrough.md, "Debugging a broken kernel step by step": the
// inputs Q, K, V and the states of a kernel (states_kernel.hpp) with the classic bug of a
// Triton online softmax, the rescale factor computed after m was overwritten, so
// alpha = exp(m_new - m_new) = 1 and neither l nor acc is rescaled when the max grows
// (states/); and the states of the same kernel fixed (fixed/). For the backward: dO and the
// states of the kernel's two-pass backward with dS computed without subtracting D (backward/,
// D stored as the kernel's own (B, H, S_q) buffer).
//
//   build/tests/verify/states_example_writer docs/examples/broken-kernel
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "flashref/verify/npy.hpp"
#include "states_arrays.hpp"
#include "states_kernel.hpp"

namespace {

using namespace flashref;

using verify::testing::as_array;
using verify::testing::as_float;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: states_example_writer DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
    const Problem p = make_problem(1, 1, 1, 8, 12, 4, Mask::none, DType::f32);
  const verify::ProblemData data = verify::make_problem_data(p, {1, false, verify::Layout::bhsd});
  verify::write_npy((dir / "q.npy").string(), as_array(data.q));
  verify::write_npy((dir / "k.npy").string(), as_array(data.k));
  verify::write_npy((dir / "v.npy").string(), as_array(data.v));
  states_kernel::Kernel k;
  k.B_q = 4;
  k.B_k = 4;
  k.l_not_rescaled = true;
  k.acc_rescaled_new_max = true;
  const auto write = [&](const std::string& folder, const states_kernel::Kernel& kernel) {
    std::filesystem::create_directories(dir / folder);
    const verify::CandidateStates s = states_kernel::run(data, kernel);
    verify::write_npy((dir / folder / "m.npy").string(), as_float(*s.m));
    verify::write_npy((dir / folder / "l.npy").string(), as_float(*s.l));
    verify::write_npy((dir / folder / "acc.npy").string(), as_float(*s.acc));
  };
  write("states", k);
  // The same kernel with the factor computed before m is overwritten.
  k.l_not_rescaled = false;
  k.acc_rescaled_new_max = false;
  write("fixed", k);
  verify::write_npy((dir / "do.npy").string(), as_array(data.dO));
  states_kernel::BackwardKernel bk;
  bk.B_q = 4;
  bk.B_k = 4;
  bk.ds_without_D = true;
  const verify::CandidateBackwardStates b = states_kernel::run_backward(data, bk);
  std::filesystem::create_directories(dir / "backward");
  xt::xarray<float> D = xt::xarray<float>::from_shape({1, 1, static_cast<std::size_t>(p.S_q)});
  for (std::size_t q = 0; q < D.size(); ++q) D.flat(q) = static_cast<float>((*b.D)(0, 0, q / 4, q % 4));
  verify::write_npy((dir / "backward" / "D.npy").string(), D);
  const std::pair<const char*, const std::optional<xt::xtensor<double, 6>>*> arrays[] = {
      {"P", &b.P}, {"dP", &b.dP}, {"dS", &b.dS}, {"dQ", &b.dQ}, {"dV", &b.dV}, {"dK", &b.dK}};
  for (const auto& [name, values] : arrays)
    verify::write_npy((dir / "backward" / (std::string(name) + ".npy")).string(), as_float(**values));
  std::cout << "wrote " << dir.string()
            << "/{q,k,v,do}.npy, states/{m,l,acc}.npy (broken), fixed/{m,l,acc}.npy and "
               "backward/{D,P,dP,dS,dQ,dV,dK}.npy (a backward without D in dS)\n";
  return 0;
}
