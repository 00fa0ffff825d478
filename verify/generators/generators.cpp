#include "flashref/verify/generators.hpp"

#include <algorithm>
#include <tuple>

#include "flashref/cpu/backend.hpp"

namespace flashref::verify {
namespace {

using rc::Gen;
namespace gen = rc::gen;

Gen<int> gen_tile(int max_tile) {
  return gen::weightedOneOf<int>({{8, gen::inRange(1, max_tile + 1)}, {1, gen::just(0)}});
}

// `g`'s values, shrinking as plain integers towards `target` instead of through the way `g`
// drew them. A length drawn as 2 tiles - 1 then still shrinks to one tile + 1 (the smallest
// length with a partial tile after a full one), which the draw's own parts cannot reach by
// changing one at a time.
Gen<std::int64_t> with_integer_shrinks(Gen<std::int64_t> g, std::int64_t target) {
  return Gen<std::int64_t>([g, target](const rc::Random& random, int size) {
    return rc::shrinkable::shrinkRecur(g(random, size).value(), [target](std::int64_t x) {
      return rc::shrink::towards(x, target);
    });
  });
}

// A sequence length for tiles of T rows: biased to 1, shorter than a tile, and a multiple
// of the tile plus -1, 0 or +1 (the last tile partial by one row, full, or one row long).
// It shrinks as an integer towards 1.
Gen<std::int64_t> gen_seq(std::int64_t T, std::int64_t max_seq) {
  const std::int64_t below_tile = std::max<std::int64_t>(1, std::min(T, max_seq));
  const std::int64_t max_tiles = std::max<std::int64_t>(1, max_seq / T);
  auto near_multiple = gen::map(
      gen::tuple(gen::inRange<std::int64_t>(1, max_tiles + 1), gen::inRange<std::int64_t>(-1, 2)),
      [T, max_seq](const std::tuple<std::int64_t, std::int64_t>& t) {
        return std::clamp(std::get<0>(t) * T + std::get<1>(t), std::int64_t{1}, max_seq);
      });
  return with_integer_shrinks(
      gen::weightedOneOf<std::int64_t>({{1, gen::just<std::int64_t>(1)},
                                        {2, gen::inRange<std::int64_t>(1, below_tile + 1)},
                                        {3, near_multiple},
                                        {4, gen::inRange<std::int64_t>(1, max_seq + 1)}}),
      1);
}

Gen<std::int64_t> gen_head_dim(const CaseBounds& b) {
  if (!b.head_dims.empty()) return gen::elementOf(b.head_dims);
  if (b.d_multiple > 1) {
    const std::int64_t n = std::max<std::int64_t>(1, b.max_d / b.d_multiple);
    return gen::map(gen::inRange<std::int64_t>(1, n + 1),
                    [m = b.d_multiple](std::int64_t k) { return k * m; });
  }
  std::vector<std::int64_t> powers;
  for (std::int64_t p = 8; p <= b.max_d; p *= 2) powers.push_back(p);
  if (powers.empty()) powers.push_back(1);
  const std::int64_t odd_count = (b.max_d + 1) / 2;
  return gen::weightedOneOf<std::int64_t>({{1, gen::just<std::int64_t>(1)},
                                           {2, gen::map(gen::inRange<std::int64_t>(0, odd_count),
                                                        [](std::int64_t k) { return 2 * k + 1; })},
                                           {2, gen::elementOf(powers)},
                                           {3, gen::inRange<std::int64_t>(1, b.max_d + 1)}});
}

// Non-default scales are exact binary fractions, so the printed command reproduces them.
constexpr double kScales[] = {0.0, 1.0, 0.5, 0.03125};  // 0: 1/sqrt(d)

}  // namespace

rc::Gen<VerifyCase> gen_case(const CaseBounds& bounds) {
  const CaseBounds b = bounds;
  return gen::mapcat(
      gen::pair(b.tile_q > 0 ? gen::just(b.tile_q) : gen_tile(b.max_tile),
                b.tile_k > 0 ? gen::just(b.tile_k) : gen_tile(b.max_tile)),
      [b](std::pair<int, int> tiles) {
        const std::int64_t T_q = tiles.first > 0 ? tiles.first : cpu::kDefaultTileQ;
        const std::int64_t T_k = tiles.second > 0 ? tiles.second : cpu::kDefaultTileK;
        return gen::mapcat(gen_seq(T_q, b.max_seq), [b, tiles, T_k](std::int64_t S_q) {
          auto S_k =
              gen::weightedOneOf<std::int64_t>({{3, gen::just(S_q)}, {4, gen_seq(T_k, b.max_seq)}});
          auto shape = gen::tuple(S_k, gen_head_dim(b), gen::inRange(1, 3) /* B */,
                                  gen::inRange(1, 3) /* H_kv */,
                                  b.gqa ? gen::weightedElement<int>({{3, 1}, {3, 2}, {1, 3}})
                                        : gen::just(1) /* group */);
          auto flavor = gen::tuple(gen::elementOf(b.masks), gen::elementOf(b.dtypes),
                                   gen::element(Layout::bshd, Layout::bhsd),
                                   gen::weightedElement<bool>({{4, false}, {1, true}}) /* large */,
                                   gen::weightedElement<int>({{12, 0}, {1, 1}, {1, 2}, {1, 3}}),
                                   gen::inRange<std::uint64_t>(0, 1000000) /* seed */);
          return gen::map(gen::pair(shape, flavor), [b, tiles, S_q](const auto& drawn) {
            const auto& [S_k, d, batch, heads_kv, group] = drawn.first;
            const auto& [mask, dtype, layout, large, scale_choice, seed] = drawn.second;
            std::int64_t B = batch, H_kv = heads_kv, G = group;
            // Shrink the batch, then the key/value heads, then the group until the case fits
            // the work budget; a single head of the longest sequences always fits.
            const std::int64_t per_head = S_q * S_k * d;
            while (B * H_kv * G * per_head > b.max_work && B > 1) --B;
            while (B * H_kv * G * per_head > b.max_work && H_kv > 1) --H_kv;
            while (B * H_kv * G * per_head > b.max_work && G > 1) --G;
            VerifyCase c;
            c.problem = make_problem(B, H_kv * G, H_kv, S_q, S_k, d, mask, dtype);
            if (scale_choice > 0 && b.other_scales) c.problem.scale = kScales[scale_choice];
            c.tile_q = tiles.first;
            c.tile_k = tiles.second;
            c.seed = seed;
            c.layout = layout;
            c.large = large;
            c.backward = b.backward;
            return c;
          });
        });
      });
}

std::vector<std::string> case_features(const VerifyCase& c) {
  const Problem& p = c.problem;
  const std::int64_t T_q = report_tile_q(c), T_k = report_tile_k(c);
  std::vector<std::string> f;
  if (p.S_q == 1) f.push_back("S_q=1");
  if (p.S_k == 1) f.push_back("S_k=1");
  if (p.S_q < T_q) f.push_back("S_q<B_q");
  if (p.S_q % T_q != 0) f.push_back("S_q%B_q!=0");
  if (p.S_k % T_k != 0) f.push_back("S_k%B_k!=0");
  if (p.S_q > T_q && p.S_q % T_q == 0) f.push_back("S_q=n*B_q");
  if (p.S_q > p.S_k) f.push_back("S_q>S_k");
  if (p.S_q < p.S_k) f.push_back("S_q<S_k");
  if (T_q != T_k) f.push_back("B_q!=B_k");
  if (c.tile_q == 0 || c.tile_k == 0) f.push_back("default tile");
  if (p.d == 1) f.push_back("d=1");
  if (p.d % 2 == 1) f.push_back("d odd");
  if ((p.d & (p.d - 1)) != 0) f.push_back("d not 2^n");
  if (p.H_kv == 1 && p.H > 1)
    f.push_back("MQA");
  else if (p.H_kv < p.H)
    f.push_back("GQA");
  if (p.B > 1) f.push_back("B>1");
  if (c.large) f.push_back("large");
  if (p.scale != default_scale(p.d)) f.push_back("scale!=1/sqrt(d)");
  if (p.mask == Mask::causal_bottom_right && p.S_q > p.S_k) f.push_back("fully masked rows");
  f.push_back(std::string("mask=") + std::string(mask_name(p.mask)));
  f.push_back(std::string("dtype=") + std::string(dtype_name(p.dtype)));
  f.push_back(std::string("layout=") + std::string(layout_name(c.layout)));
  return f;
}

void showValue(const VerifyCase& c, std::ostream& os) {
  os << describe(c) << "\n  reproduce: " << reproduce_command(c, {});
}

}  // namespace flashref::verify
