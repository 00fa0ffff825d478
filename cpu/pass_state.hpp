// What the two passes of Algorithm 2 (backward_dq.cpp, backward_dkdv.cpp) hold and how they
// run their tasks: the call's inputs, one workspace per thread, and the task list.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "algorithms.hpp"
#include "backward_passes.hpp"
#include "kernels.hpp"

namespace flashref::cpu::detail {

template <class Workspace, class Task>
struct PassState {
  PassState(const BackwardParams& params_, const Plan& plan_, const RowStats& stats_,
            TraceObserver* trace_)
      : params(params_), plan(plan_), stats(stats_), trace(trace_) {}

  const BackwardParams& params;
  const Plan& plan;
  const RowStats& stats;
  TraceObserver* trace;
  const Kernels& k = kernels();
  std::vector<Workspace> workspaces;
  std::vector<Task> tasks;

  // With the tasks listed in the natural order: the trace keeps that order, on one thread;
  // otherwise the tasks for which goes_first says so run first, so that the dynamic schedule
  // ends with short ones. Makes every thread's workspace before any task runs (an allocation
  // failure throws before an output is written).
  template <class GoesFirst>
  void schedule(GoesFirst goes_first) {
    if (trace == nullptr) std::stable_sort(tasks.begin(), tasks.end(), goes_first);
    const auto n_tasks = static_cast<std::int64_t>(tasks.size());
    const int threads = trace ? 1 : thread_count(params.options, n_tasks);
    const Plan& p = plan;
    const bool tracing = trace != nullptr;
    workspaces =
        make_workspaces<Workspace>(threads, [&p, tracing] { return Workspace(p, tracing); });
  }

  // body(workspace, task, std::bool_constant<kTrace>) for every task: with the trace in order
  // on one thread, otherwise on every workspace's thread.
  template <class Body>
  void run(Body body) {
    if (trace != nullptr) {
      for (const Task& t : tasks) body(workspaces.front(), t, std::true_type{});
      return;
    }
    for_each_task(static_cast<std::int64_t>(tasks.size()), workspaces,
                  [this, &body](Workspace& ws, std::int64_t t) {
                    body(ws, tasks[static_cast<std::size_t>(t)], std::false_type{});
                  });
  }
};

}  // namespace flashref::cpu::detail
