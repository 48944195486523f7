#include "core/fit/marginal_likelihood.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/graph/spectral_embedding.h"

namespace graphbandit {
namespace fit_internal {
namespace {

// A^-1 from the lower Cholesky factor L of A (the lower triangle of `factor`), as LAPACK's
// potri does, using that L^-1 is lower triangular. L^-1 is built one block of columns at a
// time, each solving only the trailing system below its diagonal (n^3 / 3 flops instead of
// n^3); A^-1 = L^-T L^-1 is then summed over blocks of rows of L^-1, each of which is zero right
// of its diagonal block (2 n^3 / 3 instead of 2 n^3). About n^3 flops in all, against 2 n^3
// for solving A X = I: 40 against 60 ms at n = 800 on the development machine.
// `linv` and `inverse` are workspaces whose storage is reused from one call to the next (a fit
// evaluates the likelihood dozens of times at one size).
void InverseFromCholesky(const Eigen::MatrixXd& factor, Eigen::MatrixXd* linv,
                         Eigen::MatrixXd* inverse) {
  const Eigen::Index n = factor.rows();
  constexpr Eigen::Index kBlock = 64;
  linv->setZero(n, n);
  for (Eigen::Index j = 0; j < n; j += kBlock) {
    const Eigen::Index b = std::min(kBlock, n - j);
    auto columns = linv->block(j, j, n - j, b);
    columns.topRows(b).setIdentity();
    factor.block(j, j, n - j, n - j).triangularView<Eigen::Lower>().solveInPlace(columns);
  }
  inverse->setZero(n, n);
  constexpr Eigen::Index kRows = 128;
  for (Eigen::Index r = 0; r < n; r += kRows) {
    const Eigen::Index b = std::min(kRows, n - r), end = r + b;
    const auto rows = linv->block(r, 0, b, end);
    inverse->topLeftCorner(end, end).noalias() += rows.transpose() * rows;
  }
}

}  // namespace

absl::Status UserFactors::Init(const FitData& data, const FitUsers& users, int community_dims) {
  absl::flat_hash_map<int32_t, int> slot;
  slot_of_.reserve(data.users.size());
  for (int32_t u : data.users) {
    auto [it, inserted] = slot.try_emplace(u, static_cast<int>(distinct_.size()));
    if (inserted) distinct_.push_back(u);
    slot_of_.push_back(it->second);
  }
  const int r = static_cast<int>(distinct_.size());
  if (users.graph == nullptr) {
    if (users.fixed == nullptr) return absl::InvalidArgumentError("fit needs a user kernel");
    fixed_.resize(r, r);
    for (int a = 0; a < r; ++a) {
      const UserKernel::Column column = users.fixed->ColumnOf(distinct_[a]);
      for (int b = 0; b < r; ++b) fixed_(b, a) = column.At(distinct_[b]);
    }
    fixed_ = 0.5 * (fixed_ + fixed_.transpose()).eval();
    return absl::OkStatus();
  }
  laplacian_ = true;
  // The connected components that hold the data's users, by breadth-first search.
  const UserGraph& graph = *users.graph;
  absl::flat_hash_map<int32_t, int32_t> compact;
  std::vector<int32_t> members;
  compact_of_slot_.assign(r, -1);
  for (int a = 0; a < r; ++a) {
    const int32_t u = distinct_[a];
    if (!graph.HasEdges(u)) continue;
    if (!compact.contains(u)) {
      std::vector<int32_t> frontier = {u};
      compact.emplace(u, static_cast<int32_t>(members.size()));
      members.push_back(u);
      while (!frontier.empty()) {
        const int32_t v = frontier.back();
        frontier.pop_back();
        for (const auto& [w, weight] : graph.SortedNeighbours(v)) {
          if (compact.try_emplace(w, static_cast<int32_t>(members.size())).second) {
            members.push_back(w);
            frontier.push_back(w);
          }
        }
      }
    }
    compact_of_slot_[a] = compact.at(u);
  }
  const int32_t nc = static_cast<int32_t>(members.size());
  std::vector<Eigen::Triplet<double>> triplets;
  for (int32_t c = 0; c < nc; ++c) {
    double degree = 0.0;
    for (const auto& [v, w] : graph.SortedNeighbours(members[c])) {
      degree += w;
      const int32_t cv = compact.at(v);
      if (cv > c) triplets.emplace_back(cv, c, -w);
    }
    triplets.emplace_back(c, c, degree);
  }
  laplacian_matrix_.resize(nc, nc);
  laplacian_matrix_.setFromTriplets(triplets.begin(), triplets.end());
  identity_.resize(nc, nc);
  identity_.setIdentity();
  if (community_dims > 0) {
    auto embedding = SpectralEmbedding::Build(graph, community_dims);
    if (!embedding.ok()) return embedding.status();
    community_.resize(r, r);
    for (int a = 0; a < r; ++a) {
      for (int b = 0; b < r; ++b)
        community_(b, a) = (*embedding)->Similarity(distinct_[b], distinct_[a]);
    }
  }
  return absl::OkStatus();
}

absl::Status UserFactors::Evaluate(double rho, Eigen::MatrixXd* g, Eigen::MatrixXd* square) {
  const int r = distinct();
  if (!laplacian_) {
    *g = fixed_;
    if (square != nullptr) square->setZero(r, r);
    return absl::OkStatus();
  }
  g->setZero(r, r);
  if (square != nullptr) square->setZero(r, r);
  std::vector<int> connected;
  for (int a = 0; a < r; ++a) {
    if (compact_of_slot_[a] < 0) {
      (*g)(a, a) = 1.0 / rho;
      if (square != nullptr) (*square)(a, a) = 1.0 / (rho * rho);
    } else {
      connected.push_back(a);
    }
  }
  if (connected.empty()) return absl::OkStatus();
  const Eigen::SparseMatrix<double> shifted = laplacian_matrix_ + rho * identity_;
  if (!analysed_) {
    solver_.analyzePattern(shifted);
    analysed_ = true;
  }
  solver_.factorize(shifted);
  if (solver_.info() != Eigen::Success) {
    return absl::InternalError("sparse factorisation of L + rho I failed");
  }
  const int nc = static_cast<int>(laplacian_matrix_.rows());
  // Columns in chunks, so that memory stays O(nc * chunk) on large graphs.
  const int chunk = std::max(1, std::min<int>(static_cast<int>(connected.size()),
                                              static_cast<int>(4'000'000 / std::max(nc, 1))));
  for (size_t begin = 0; begin < connected.size(); begin += chunk) {
    const int len = static_cast<int>(std::min<size_t>(chunk, connected.size() - begin));
    Eigen::MatrixXd rhs = Eigen::MatrixXd::Zero(nc, len);
    for (int j = 0; j < len; ++j) rhs(compact_of_slot_[connected[begin + j]], j) = 1.0;
    const Eigen::MatrixXd columns = solver_.solve(rhs);
    Eigen::MatrixXd squared;
    if (square != nullptr) squared = solver_.solve(columns);
    for (int j = 0; j < len; ++j) {
      const int b = connected[begin + j];
      for (int a : connected) {
        (*g)(a, b) = columns(compact_of_slot_[a], j);
        if (square != nullptr) (*square)(a, b) = squared(compact_of_slot_[a], j);
      }
    }
  }
  *g = 0.5 * (*g + g->transpose()).eval();
  if (square != nullptr) *square = 0.5 * (*square + square->transpose()).eval();
  return absl::OkStatus();
}

absl::Status Likelihood::Init(const FitData& data, const FitUsers& users, const FitSpec& spec) {
  const int n = static_cast<int>(data.y.size());
  const int dim = static_cast<int>(data.x.rows());
  if (data.x.cols() != n || static_cast<int>(data.users.size()) != n) {
    return absl::InvalidArgumentError("fit data: inputs, users and rewards differ in count");
  }
  if (static_cast<int>(spec.lengthscale_group.size()) != dim) {
    return absl::InvalidArgumentError("fit spec: one length-scale group per input dimension");
  }
  for (int g : spec.lengthscale_group) {
    if (g < 0 || g >= spec.groups()) {
      return absl::InvalidArgumentError("fit spec: length-scale group out of range");
    }
  }
  if (!data.x.allFinite() || !data.y.allFinite()) {
    return absl::InvalidArgumentError("fit data contains a non-finite value");
  }
  data_ = &data;
  spec_ = &spec;
  if (absl::Status s = users_.Init(data, users, spec.community_dims); !s.ok()) return s;
  same_user_.resize(n, n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      same_user_(i, j) = users_.slot_of()[i] == users_.slot_of()[j] ? 1.0 : 0.0;
    }
  }
  if (users_.community()) {
    const Eigen::MatrixXd& s = users_.community_matrix();
    community_pairs_.resize(n, n);
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i)
        community_pairs_(i, j) = s(users_.slot_of()[i], users_.slot_of()[j]);
    }
  }
  // Distances are translation invariant: they are computed from inputs centred per
  // dimension, which keeps |a|^2 + |b|^2 - 2 a.b accurate for inputs far from the origin.
  stationary_ = spec.kernel != KernelType::kLinear;
  linear_part_ = stationary_ && spec.fit_linear_variance;
  centred_ = data.x.colwise() - data.x.rowwise().mean();
  // Per dimension (one length-scale each, at most kMaxPerDimensionLengthscales) the
  // statistics come from matrix products at each evaluation, O(n^2 dim). When dimensions share
  // length-scales (any number of features, one or two groups) each group's squared distances
  // (or products, for the linear kernel) and products are summed once here instead: two n x n
  // matrices per group, and an evaluation costs O(n^2 groups) whatever the dimension.
  grouped_ = spec.groups() < dim;
  if (grouped_) {
    group_stats_.assign(spec.groups(), Eigen::MatrixXd::Zero(n, n));
    if (stationary_) group_products_.assign(spec.groups(), Eigen::MatrixXd::Zero(n, n));
    for (int g = 0; g < spec.groups(); ++g) {
      std::vector<int> rows;
      for (int d = 0; d < dim; ++d) {
        if (spec.lengthscale_group[d] == g) rows.push_back(d);
      }
      if (rows.empty()) continue;
      const Eigen::MatrixXd x = data.x(rows, Eigen::all);
      if (!stationary_) {
        group_stats_[g].noalias() = x.transpose() * x;
        continue;
      }
      const Eigen::MatrixXd c = centred_(rows, Eigen::all);
      const Eigen::VectorXd norms = c.colwise().squaredNorm().transpose();
      Eigen::MatrixXd& d2 = group_stats_[g];
      d2.noalias() = -2.0 * c.transpose() * c;
      d2.colwise() += norms;
      d2.rowwise() += norms.transpose();
      d2 = d2.cwiseMax(0.0);
      d2.diagonal().setZero();
      group_products_[g].noalias() = x.transpose() * x;
    }
  }
  return absl::OkStatus();
}

double Likelihood::TypicalSquare(int g) const {
  const int n = this->n();
  double sum = 0.0;
  for (size_t d = 0; d < spec_->lengthscale_group.size(); ++d) {
    if (spec_->lengthscale_group[d] != g) continue;
    // sum over i != j of (x_i - x_j)^2 = 2 n sum_i (x_i - mean)^2
    sum += stationary_ ? (n > 1 ? 2.0 * centred_.row(d).squaredNorm() / (n - 1) : 0.0)
                       : data_->x.row(d).squaredNorm() / n;
  }
  return sum;
}

absl::StatusOr<double> Likelihood::Evaluate(const Hyperparameters& h, Eigen::VectorXd* gradient,
                                            double* mean_out, bool at_own_mean) {
  const int n = this->n();
  const int groups = spec_->groups();
  const bool need_square = gradient != nullptr && users_.laplacian() && spec_->fit_rho;
  if (absl::Status s = users_.Evaluate(h.rho, &gu_, need_square ? &gu2_ : nullptr); !s.ok()) {
    return s;
  }
  const std::vector<int>& slot = users_.slot_of();
  // Every n x n matrix below is a member: assigning to it at the same size reuses its storage,
  // where fresh temporaries would cost a page fault per page at every evaluation.
  gp_.resize(n, n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) gp_(i, j) = gu_(slot[i], slot[j]);
  }
  // Group length-scales from the per-dimension vector (every member of a group shares one),
  // and the inputs divided by them: z centred (for distances), raw (for inner products).
  const int dim = static_cast<int>(spec_->lengthscale_group.size());
  std::vector<double> l(groups, 1.0);
  for (int d = 0; d < dim; ++d) l[spec_->lengthscale_group[d]] = h.lengthscales(d);
  Eigen::VectorXd inverse_l(dim);
  for (int d = 0; d < dim; ++d) inverse_l(d) = 1.0 / l[spec_->lengthscale_group[d]];
  // The linear part (stationary kernels) when it is fitted or in use; the linear kernel's
  // own inner products are `scaled_`.
  const bool linear_part = stationary_ && (linear_part_ || h.linear_variance != 0.0);
  if (grouped_) {
    scaled_.setZero(n, n);  // r^2, or <x/l, x'/l> for the linear kernel
    for (int g = 0; g < groups; ++g) scaled_ += group_stats_[g] / (l[g] * l[g]);
    if (linear_part) {
      inner_.setZero(n, n);
      for (int g = 0; g < groups; ++g) inner_ += group_products_[g] / (l[g] * l[g]);
    }
  } else {
    raw_scaled_ = inverse_l.asDiagonal() * data_->x;
    if (stationary_) {  // r^2 = |z_i|^2 + |z_j|^2 - 2 z_i.z_j
      z_ = inverse_l.asDiagonal() * centred_;
      const Eigen::VectorXd norms = z_.colwise().squaredNorm().transpose();
      scaled_.noalias() = -2.0 * z_.transpose() * z_;
      scaled_.colwise() += norms;
      scaled_.rowwise() += norms.transpose();
      scaled_ = scaled_.cwiseMax(0.0);
      scaled_.diagonal().setZero();
      if (linear_part) inner_.noalias() = raw_scaled_.transpose() * raw_scaled_;
    } else {
      scaled_.noalias() = raw_scaled_.transpose() * raw_scaled_;
    }
  }
  switch (spec_->kernel) {
    case KernelType::kRbf:
      profile_ = (-0.5 * scaled_.array()).exp();
      break;
    case KernelType::kMatern32:
      root_ = (3.0 * scaled_.array().max(0.0)).sqrt();
      profile_ = (1.0 + root_.array()) * (-root_.array()).exp();
      break;
    case KernelType::kMatern52:
      root_ = (5.0 * scaled_.array().max(0.0)).sqrt();
      profile_ = (1.0 + root_.array() + root_.array().square() / 3.0) * (-root_.array()).exp();
      break;
    case KernelType::kLinear:
      profile_ = scaled_;
      break;
  }
  arm_ = (h.signal_variance * profile_.array() + h.offset_variance).matrix();
  if (linear_part && h.linear_variance != 0.0) arm_ += h.linear_variance * inner_;
  gp_ += h.user_variance * same_user_;  // G + eta [u = u']
  // + w S (without a community part w is ignored: the optimiser's log-space vector holds a
  // tiny positive value for a variance that is 0).
  if (users_.community()) gp_ += h.community_variance * community_pairs_;
  a_ = gp_.cwiseProduct(arm_);
  a_.diagonal().array() += h.noise_variance;
  llt_.compute(a_);
  if (llt_.info() != Eigen::Success) {
    a_.diagonal().array() += 1e-8 * a_.diagonal().mean();
    llt_.compute(a_);
    if (llt_.info() != Eigen::Success) return absl::InternalError("kernel matrix not positive");
  }
  double mean = h.prior_mean;
  if (spec_->fit_prior_mean && !at_own_mean) {
    const Eigen::VectorXd ones_solved = llt_.solve(Eigen::VectorXd::Ones(n));
    const double denominator = ones_solved.sum();
    if (denominator > 0.0) mean = ones_solved.dot(data_->y) / denominator;
  }
  if (mean_out != nullptr) *mean_out = mean;
  const Eigen::VectorXd residual = data_->y.array() - mean;
  const Eigen::VectorXd alpha = llt_.solve(residual);
  const Eigen::MatrixXd& factor = llt_.matrixLLT();
  const double log_det = 2.0 * factor.diagonal().array().log().sum();
  const double value = -0.5 * residual.dot(alpha) - 0.5 * log_det - 0.5 * n * std::log(2.0 * M_PI);
  if (gradient == nullptr) return value;

  // d log p / d theta = 1/2 tr(W dK/dtheta), W = alpha alpha^T - A^-1.
  InverseFromCholesky(factor, &linv_, &w_);
  w_ = -w_;
  w_.noalias() += alpha * alpha.transpose();
  wg_ = w_.cwiseProduct(gp_);
  gradient->setZero(FullSize(groups));
  (*gradient)(kSignal) = 0.5 * h.signal_variance * wg_.cwiseProduct(profile_).sum();
  (*gradient)(kOffset) = 0.5 * h.offset_variance * wg_.sum();
  if (linear_part) {
    (*gradient)(kLinear) = 0.5 * h.linear_variance * wg_.cwiseProduct(inner_).sum();
  }
  // d profile / d log l_g = slope * (group g's part of r^2, or of <x/l, x'/l>), with one
  // slope matrix for every group.
  switch (spec_->kernel) {
    case KernelType::kRbf:
      slope_ = wg_.cwiseProduct(profile_);
      break;
    case KernelType::kMatern32:
      slope_ = 3.0 * wg_.array() * (-root_.array()).exp();
      break;
    case KernelType::kMatern52:
      slope_ = (5.0 / 3.0) * wg_.array() * (1.0 + root_.array()) * (-root_.array()).exp();
      break;
    case KernelType::kLinear:
      slope_ = -2.0 * wg_;
      break;
  }
  if (grouped_) {
    for (int g = 0; g < groups; ++g) {
      const double l2 = l[g] * l[g];
      double value = 0.5 * h.signal_variance * slope_.cwiseProduct(group_stats_[g]).sum() / l2;
      if (linear_part) {
        // d <x/l, x'/l> / d log l_g = -2 (group g's part of it).
        value -= h.linear_variance * wg_.cwiseProduct(group_products_[g]).sum() / l2;
      }
      (*gradient)(kFirstLengthscale + g) = value;
    }
  } else {
    // Per dimension, as matrix products (S symmetric): sum_ij S_ij (z_id - z_jd)^2 =
    // 2 sum_i z_id^2 (S 1)_i - 2 z_d' S z_d, and sum_ij S_ij z_id z_jd = z_d' S z_d.
    if (stationary_) {
      projected_.noalias() = slope_ * z_.transpose();
      const Eigen::VectorXd row_sums = slope_.rowwise().sum();
      for (int d = 0; d < dim; ++d) {
        const double part = 2.0 * z_.row(d).array().square().matrix().dot(row_sums) -
                            2.0 * z_.row(d).dot(projected_.col(d));
        (*gradient)(kFirstLengthscale + spec_->lengthscale_group[d]) +=
            0.5 * h.signal_variance * part;
      }
    } else {
      projected_.noalias() = slope_ * raw_scaled_.transpose();
      for (int d = 0; d < dim; ++d) {
        (*gradient)(kFirstLengthscale + spec_->lengthscale_group[d]) +=
            0.5 * h.signal_variance * raw_scaled_.row(d).dot(projected_.col(d));
      }
    }
    if (linear_part) {
      // d <x/l, x'/l> / d log l_g = -2 (group g's part of it).
      projected_.noalias() = wg_ * raw_scaled_.transpose();
      for (int d = 0; d < dim; ++d) {
        (*gradient)(kFirstLengthscale + spec_->lengthscale_group[d]) -=
            h.linear_variance * raw_scaled_.row(d).dot(projected_.col(d));
      }
    }
  }
  (*gradient)(NoiseIndex(groups)) = 0.5 * h.noise_variance * w_.trace();
  (*gradient)(EtaIndex(groups)) =
      0.5 * h.user_variance * (w_.array() * same_user_.array() * arm_.array()).sum();
  if (users_.community()) {
    (*gradient)(CommunityIndex(groups)) =
        0.5 * h.community_variance * (w_.array() * community_pairs_.array() * arm_.array()).sum();
  }
  if (need_square) {
    double sum = 0.0;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) sum += w_(i, j) * gu2_(slot[i], slot[j]) * arm_(i, j);
    }
    (*gradient)(RhoIndex(groups)) = -0.5 * h.rho * sum;
  }
  return value;
}

// Full log-space vector <-> Hyperparameters (length-scales by group).
Eigen::VectorXd ToFull(const Hyperparameters& h, const FitSpec& spec) {
  Eigen::VectorXd full(FullSize(spec.groups()));
  const double tiny = std::numeric_limits<double>::min();
  full(kSignal) = std::log(h.signal_variance);
  full(kOffset) = std::log(std::max(h.offset_variance, tiny));
  full(kLinear) = std::log(std::max(h.linear_variance, tiny));
  full(EtaIndex(spec.groups())) = std::log(std::max(h.user_variance, tiny));
  full(CommunityIndex(spec.groups())) = std::log(std::max(h.community_variance, tiny));
  for (size_t d = 0; d < spec.lengthscale_group.size(); ++d) {
    full(kFirstLengthscale + spec.lengthscale_group[d]) = std::log(h.lengthscales(d));
  }
  full(NoiseIndex(spec.groups())) = std::log(h.noise_variance);
  full(RhoIndex(spec.groups())) = std::log(h.rho);
  return full;
}

void FromFull(const Eigen::VectorXd& full, const FitSpec& spec, Hyperparameters* h) {
  h->signal_variance = std::exp(full(kSignal));
  h->offset_variance = std::exp(full(kOffset));
  h->linear_variance = spec.kernel == KernelType::kLinear ? 0.0 : std::exp(full(kLinear));
  h->user_variance = std::exp(full(EtaIndex(spec.groups())));
  h->community_variance = std::exp(full(CommunityIndex(spec.groups())));
  h->lengthscales.resize(static_cast<int>(spec.lengthscale_group.size()));
  for (size_t d = 0; d < spec.lengthscale_group.size(); ++d) {
    h->lengthscales(d) = std::exp(full(kFirstLengthscale + spec.lengthscale_group[d]));
  }
  h->noise_variance = std::exp(full(NoiseIndex(spec.groups())));
  h->rho = std::exp(full(RhoIndex(spec.groups())));
}

absl::Status CheckStart(const Hyperparameters& h, int dim) {
  if (h.lengthscales.size() != dim) {
    return absl::InvalidArgumentError("start values need one length-scale per dimension");
  }
  if (!h.InRange(dim)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("start values out of range: %s", h.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace fit_internal

using fit_internal::CheckStart;
using fit_internal::Layout;
using fit_internal::Likelihood;

absl::StatusOr<double> LogMarginalLikelihood(const FitData& data, const FitUsers& users,
                                             const Hyperparameters& values, const FitSpec& spec,
                                             Eigen::VectorXd* gradient, double* profiled_mean) {
  if (absl::Status s = CheckStart(values, static_cast<int>(data.x.rows())); !s.ok()) return s;
  Likelihood likelihood;
  if (absl::Status s = likelihood.Init(data, users, spec); !s.ok()) return s;
  Eigen::VectorXd full_gradient;
  absl::StatusOr<double> value =
      likelihood.Evaluate(values, gradient != nullptr ? &full_gradient : nullptr, profiled_mean);
  if (!value.ok() || gradient == nullptr) return value;
  const Layout layout =
      Layout::Of(spec, likelihood.users().laplacian(), likelihood.users().community());
  gradient->resize(static_cast<int>(layout.free.size()));
  for (size_t k = 0; k < layout.free.size(); ++k) (*gradient)(k) = full_gradient(layout.free[k]);
  return value;
}

}  // namespace graphbandit
