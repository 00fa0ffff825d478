// Partial attention and the merge, as properties over random awkward problems: attention over
// the keys split into any number of blocks (awkward sizes, any mask, GQA, every dtype), each
// block a placed partial attention, merged by logsumexp in any order, passes the library's rule
// against the gold of the whole problem (forward and backward), on the reference and cpu
// backends.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <numeric>

#include "flashref/verify/report.hpp"
#include "flashref/verify/verification.hpp"
#include "property_support.hpp"
#include "split_keys_backend.hpp"

namespace flashref::ring::testing {
namespace {

using verify::VerifyCase;

// 1..6 blocks of random sizes (cut points drawn in 1..S_k-1), and a random merge order.
KeySplit gen_split(std::int64_t S_k) {
  const int cuts = *rc::gen::inRange<int>(0, static_cast<int>(std::min<std::int64_t>(S_k, 6)));
  std::vector<std::int64_t> bounds{0, S_k};
  for (int c = 0; c < cuts; ++c) bounds.push_back(*rc::gen::inRange<std::int64_t>(1, S_k));
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  const std::size_t n = bounds.size() - 1;
  const auto keys = *rc::gen::container<std::vector<int>>(n, rc::gen::arbitrary<int>());
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  return KeySplit{bounds, order};
}

RC_GTEST_PROP(SplitKeys, MergedBlocksPassTheRuleAgainstTheWholeProblem, ()) {
  verify::CaseBounds bounds;
  bounds.max_work = std::int64_t{1} << 21;
  const VerifyCase c = *verify::gen_case(bounds);
  verify::testing::classify(c);
  const KeySplit split = gen_split(c.problem.S_k);
  RC_CLASSIFY(split.order.size() == 1, "one block");
  RC_CLASSIFY(split.order.size() >= 4, "4+ blocks");
  const bool on_cpu = *rc::gen::arbitrary<bool>();
  const std::unique_ptr<Backend> inner = make_backend(on_cpu ? "cpu" : "reference");
  const SplitKeysBackend backend(*inner, split);
  const verify::VerifyReport report = verify::verify_backends(c, {&backend});
  if (!report.passed()) RC_FAIL(describe(split) + "\n" + verify::format_table(report));
}

}  // namespace
}  // namespace flashref::ring::testing
