// The list of backends this build has (backend_names() and make_backend(name), declared in
// include/flashref/backend.hpp). The one place that knows every backend layer.
#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/reference/backend.hpp"
#ifdef FLASHREF_HAVE_CUDA
#include "flashref/cuda/backend.hpp"
#endif

namespace flashref {

std::vector<std::string> backend_names() {
  std::vector<std::string> names{"reference", "cpu"};
#ifdef FLASHREF_HAVE_CUDA
  names.push_back("cuda");
#endif
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "reference") return reference::make_backend();
  if (name == "cpu") return cpu::make_backend();
#ifdef FLASHREF_HAVE_CUDA
  if (name == "cuda") return cuda::make_backend();
#endif
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  std::string extra;
#ifndef FLASHREF_HAVE_CUDA
  if (name == "cuda") extra = " (this build has no CUDA support: configure with -DFLASHREF_CUDA=ON)";
#endif
  throw InvalidArgument("backend", "unknown backend '" + name + "'" + extra + "; this build has: " + known);
}

}  // namespace flashref
