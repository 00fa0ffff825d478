// The feasibility check every subcommand makes before any work: an estimate, from above, of the
// host memory a problem needs (the gold's and the baseline's S_q x S_k score matrices per thread,
// the copies of the tensors), against the memory this process can still get. A problem that
// cannot fit is refused with exit 2 and a message giving the problem, the bytes needed and the
// bytes available, instead of a std::bad_alloc or the kernel's OOM killer minutes later.
// Also the bound on OpenMP threads (--threads, OMP_NUM_THREADS): limits.hpp's kMaxThreads.
//
// The estimates are coarse on purpose (a few copies of every tensor, plus the exact size of the
// per-thread scratch that dominates for long sequences): they refuse what cannot run, not what
// runs close to the limit. docs/verification.md, "Limits", lists them.
#pragma once

#include <cstdint>
#include <string>

#include "flashref/problem.hpp"

namespace flashref::cli {

struct MemoryAvailable {
  std::int64_t bytes = -1;  // -1: unknown (then nothing is refused)
  std::string source;       // "MemAvailable in /proc/meminfo", "the cgroup's memory.max", ...
};

// The least of: MemAvailable (/proc/meminfo), the cgroup v2 limit minus its usage, the address
// space limit (ulimit -v) minus what the process maps; sysconf's free pages without /proc.
MemoryAvailable available_memory();

// What the work needs, in bytes (a double: a problem of 10^8 x 10^8 must not overflow).
struct MemoryNeed {
  double bytes = 0.0;
  std::string largest;  // the largest part, for the message
};

// Threads the host code will use for `requested` (0: OpenMP's default), at most kMaxThreads.
int effective_threads(int requested);

// `flashref verify` and `check`: the gold and the baseline (and the candidates' outputs).
MemoryNeed judge_need(const Problem& p, bool backward, int threads);
// One run of backend `name` (`run`, `bench`): its outputs and, for the reference, its scores.
MemoryNeed backend_need(const Problem& p, const std::string& name, bool backward, int threads,
                        int tile_q, int tile_k);

// Throws InvalidArgument(field, ...) when `need` exceeds what is available: "the problem ...
// needs about X (N bytes: ...) but only Y (M bytes, source) are available".
void require_memory(const std::string& field, const Problem& p, const MemoryNeed& need);

// --threads: 0 (OpenMP's default) up to kMaxThreads; throws InvalidArgument naming `option`.
void check_threads(int threads, const std::string& option);
// OMP_NUM_THREADS, when set, above kMaxThreads: throws InvalidArgument naming it.
void check_omp_environment();

// "1.5 GiB".
std::string human_bytes(double bytes);

}  // namespace flashref::cli
