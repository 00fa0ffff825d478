// flashref.attention's kernels: a backend's forward and backward run on the caller's memory
// (host arrays: the cpu backend; CUDA tensors: the cuda backend, on the given stream), no copies.
#pragma once

#include <nanobind/nanobind.h>

namespace flashref::python {

void bind_attention(nanobind::module_& m);

}  // namespace flashref::python
