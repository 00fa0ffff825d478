// The "reference" backend: naive attention that materializes S and P, computed the way a
// real low-precision kernel computes it (the *baseline* of design.md): float32 arithmetic,
// P rounded to the input dtype before P V (and dS rounded before dS K, dS^T Q), outputs rounded
// to the output dtype; TF32 rounding of the matmul inputs when options.allow_tf32.
// The backward uses the standard equations (7)-(11), not the recomputation trick.
#pragma once

#include <memory>

#include "flashref/backend.hpp"

namespace flashref::reference {

std::unique_ptr<Backend> make_backend();

}  // namespace flashref::reference
