// Partial attention and the merge, as properties over random awkward problems: attention over
// the keys split into any number of blocks (awkward sizes, any mask, GQA, every dtype), each
// block a placed partial attention, merged by logsumexp in any order, passes the library's rule
// against the gold of the whole problem (forward and backward), on the reference and cpu
// backends.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "flashref/verify/report.hpp"
#include "flashref/verify/verification.hpp"
#include "property_support.hpp"
#include "split_keys_backend.hpp"

namespace flashref::ring::testing {
namespace {

using verify::VerifyCase;

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
