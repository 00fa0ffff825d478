// The entry points of the tiled algorithms, and the task loop they share.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "flashref/cpu/backend.hpp"
#include "flashref/detail/parallel_errors.hpp"
#include "flashref/params.hpp"

namespace flashref::cpu::detail {

// Algorithm 1. params and options are validated; options.trace, when set, sees every step.
void run_forward(const ForwardParams& params, const Options& options);
// Algorithm 2: D, then the dQ pass, then the dK/dV pass. Same contract as run_forward.
void run_backward(const BackwardParams& params, const Options& options);

// Threads for `tasks` independent tasks: options.num_threads (0: OpenMP's default), at most
// one per task.
int thread_count(const ExecutionOptions& options, std::int64_t tasks);

// One workspace per thread, all made before any task starts, so that an allocation failure
// throws before anything is written.
template <class Workspace, class MakeWorkspace>
std::vector<Workspace> make_workspaces(int threads, MakeWorkspace make_workspace) {
  std::vector<Workspace> workspaces;
  workspaces.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) workspaces.push_back(make_workspace());
  return workspaces;
}

// Runs body(workspace, task) for task = 0..n_tasks-1 on one thread per workspace. Tasks are
// handed out dynamically in index order: list the costly ones first. An exception of the body
// (a trace observer's, say) is rethrown after the region, and the tasks not yet started are
// skipped (parallel_errors.hpp). Each task writes outputs no other task writes, so the results
// do not depend on the thread count or the schedule.
template <class Workspace, class Body>
void for_each_task(std::int64_t n_tasks, std::vector<Workspace>& workspaces, Body body) {
  const int threads = static_cast<int>(workspaces.size());
  flashref::detail::ParallelErrors errors;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (std::int64_t task = 0; task < n_tasks; ++task) {
    errors.run([&] { body(workspaces[static_cast<std::size_t>(omp_get_thread_num())], task); });
  }
  errors.rethrow();
}

}  // namespace flashref::cpu::detail
