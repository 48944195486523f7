#include "core/linalg/rank_update.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace graphbandit {
namespace {

// The rank update of the columns `cols` of u (all of them when empty) on the rows `rows`, which
// hold every non-zero entry of those columns: gathered into a block, updated, added back.
template <unsigned int UpLo>
void UpdateOnRows(const Eigen::Ref<const Eigen::MatrixXd>& u, const std::vector<Eigen::Index>& cols,
                  const std::vector<Eigen::Index>& rows, double sign, Eigen::MatrixXd* m) {
  const auto s = static_cast<Eigen::Index>(rows.size());
  const Eigen::Index r = cols.empty() ? u.cols() : static_cast<Eigen::Index>(cols.size());
  Eigen::MatrixXd gathered(s, r);
  for (Eigen::Index c = 0; c < r; ++c) {
    const Eigen::Index col = cols.empty() ? c : cols[c];
    for (Eigen::Index i = 0; i < s; ++i) gathered(i, c) = u(rows[i], col);
  }
  Eigen::MatrixXd block = Eigen::MatrixXd::Zero(s, s);
  block.selfadjointView<UpLo>().rankUpdate(gathered, sign);
  for (Eigen::Index c = 0; c < s; ++c) {
    const Eigen::Index first = UpLo == Eigen::Lower ? c : 0;
    const Eigen::Index last = UpLo == Eigen::Lower ? s - 1 : c;
    for (Eigen::Index i = first; i <= last; ++i) (*m)(rows[i], rows[c]) += block(i, c);
  }
}

// Columns with the same non-zero rows.
struct Group {
  std::vector<Eigen::Index> rows;
  std::vector<Eigen::Index> cols;
};

uint64_t HashRows(const std::vector<Eigen::Index>& rows) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the indices
  for (Eigen::Index i : rows) {
    h ^= static_cast<uint64_t>(i);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

template <unsigned int UpLo>
RankUpdateWay AddRankUpdateOnRows(const Eigen::Ref<const Eigen::MatrixXd>& u, double sign,
                                  Eigen::MatrixXd* m) {
  static_assert(UpLo == Eigen::Lower || UpLo == Eigen::Upper);
  const Eigen::Index n = u.rows(), r = u.cols();
  if (n == 0 || r == 0) return RankUpdateWay::kNone;
  std::vector<Group> groups;
  std::unordered_map<uint64_t, std::vector<size_t>> by_hash;
  std::vector<char> touched(static_cast<size_t>(n), 0);
  std::vector<Eigen::Index> pattern, full;  // full: the columns non-zero on most rows
  for (Eigen::Index c = 0; c < r; ++c) {
    const Eigen::Index nonzero = (u.col(c).array() != 0.0).count();
    if (nonzero == 0) continue;  // adds nothing
    if (2 * nonzero > n) {       // mostly dense (the common case): taken on every row, with the
      full.push_back(c);         // few zeros, instead of building and comparing a long pattern
      continue;
    }
    pattern.clear();
    for (Eigen::Index i = 0; i < n; ++i) {
      if (u(i, c) != 0.0) pattern.push_back(i);
    }
    for (Eigen::Index i : pattern) touched[static_cast<size_t>(i)] = 1;
    std::vector<size_t>& candidates = by_hash[HashRows(pattern)];
    const auto same = std::find_if(candidates.begin(), candidates.end(),
                                   [&](size_t g) { return groups[g].rows == pattern; });
    if (same != candidates.end()) {
      groups[*same].cols.push_back(c);
    } else {
      candidates.push_back(groups.size());
      groups.push_back(Group{pattern, {c}});
    }
  }
  std::vector<Eigen::Index> rows;  // the union of the groups' rows
  for (Eigen::Index i = 0; i < n; ++i) {
    if (!full.empty() || touched[static_cast<size_t>(i)] != 0) rows.push_back(i);
  }
  if (!full.empty()) groups.push_back(Group{rows, std::move(full)});
  if (groups.empty()) return RankUpdateWay::kNone;
  // Multiply-adds (and the gathers' and scatters' copies, and a block's fixed cost: its
  // allocations and the product's set-up, about as much as a few hundred) of each way.
  const auto block_cost = [](double s, double cols) {
    return s * s * cols / 2 + s * s + s * cols + 256.0;
  };
  const bool whole = 2 * static_cast<Eigen::Index>(rows.size()) > n;
  const double next = whole ? static_cast<double>(n) * static_cast<double>(n) * r / 2
                            : block_cost(static_cast<double>(rows.size()), r);
  double grouped = 0.0;
  for (const Group& g : groups) {
    grouped += block_cost(static_cast<double>(g.rows.size()), static_cast<double>(g.cols.size()));
  }
  if (groups.size() > 1 && 2 * grouped < next) {
    for (const Group& g : groups) UpdateOnRows<UpLo>(u, g.cols, g.rows, sign, m);
    return RankUpdateWay::kGroups;
  }
  if (whole) {
    m->selfadjointView<UpLo>().rankUpdate(u, sign);
    return RankUpdateWay::kWhole;
  }
  UpdateOnRows<UpLo>(u, {}, rows, sign, m);
  return RankUpdateWay::kRows;
}

template RankUpdateWay AddRankUpdateOnRows<Eigen::Lower>(const Eigen::Ref<const Eigen::MatrixXd>&,
                                                         double, Eigen::MatrixXd*);
template RankUpdateWay AddRankUpdateOnRows<Eigen::Upper>(const Eigen::Ref<const Eigen::MatrixXd>&,
                                                         double, Eigen::MatrixXd*);

}  // namespace graphbandit
