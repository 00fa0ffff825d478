// Limits that hold across the library and the CLI, in one place (docs/verification.md, "Limits").
#pragma once

namespace flashref {

// The most OpenMP threads a host backend or the reference uses. Beyond it libgomp fails to
// create threads (a crash at 100000, an out-of-memory exit at 2^31 - 1), and no host has use
// for more: the work is split into at most B * H tasks. Host code clamps to it (and to the task
// count); the CLI refuses --threads and OMP_NUM_THREADS above it.
inline constexpr int kMaxThreads = 1024;

}  // namespace flashref
