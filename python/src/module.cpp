// flashref._core: the C++ library behind the Python package (python/flashref/). The Python
// layer turns its arguments (numpy arrays, torch tensors, the course's 3-D layout) into the
// canonical 4-D views these functions take; nothing here computes attention itself.
#include <nanobind/nanobind.h>

#include "attention.hpp"
#include "check.hpp"
#include "fuzz.hpp"
#include "states.hpp"

NB_MODULE(_core, m) {
  m.doc() = "flashref's C++ library: the judge, the states, the fuzz driver and the backends.";
  flashref::python::bind_check(m);
  flashref::python::bind_states(m);
  flashref::python::bind_fuzz(m);
  flashref::python::bind_attention(m);
}
