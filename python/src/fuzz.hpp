// flashref.fuzz and flashref.check_function: the fuzz driver of `flashref fuzz`
// (verify/fuzz_driver.hpp: the case generator, RapidCheck's shrinking) judging a Python
// function. The function runs from inside the C++ property, with the GIL taken for the call
// and released while the gold and the judge run.
#pragma once

#include <nanobind/nanobind.h>

namespace flashref::python {

void bind_fuzz(nanobind::module_& m);

}  // namespace flashref::python
