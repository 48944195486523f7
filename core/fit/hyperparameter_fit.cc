#include "core/fit/hyperparameter_fit.h"

#include <nlopt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include <Eigen/SparseCholesky>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace graphbandit {
namespace {

// Parameter layout of the full (log-space) vector: s2, b2, c2, l_0..l_{G-1}, lambda, rho, eta.
constexpr int kSignal = 0, kOffset = 1, kLinear = 2, kFirstLengthscale = 3;
inline int NoiseIndex(int groups) { return kFirstLengthscale + groups; }
inline int RhoIndex(int groups) { return kFirstLengthscale + groups + 1; }
inline int EtaIndex(int groups) { return kFirstLengthscale + groups + 2; }
inline int FullSize(int groups) { return kFirstLengthscale + groups + 3; }

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

// G[U,U] (and G^2[U,U] = -dG/drho) for the distinct users U of the data.
class UserFactors {
 public:
  absl::Status Init(const FitData& data, const FitUsers& users) {
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
    return absl::OkStatus();
  }

  bool laplacian() const { return laplacian_; }
  const std::vector<int>& slot_of() const { return slot_of_; }
  int distinct() const { return static_cast<int>(distinct_.size()); }

  // G[U,U] at `rho` and, with `square`, G^2[U,U].
  absl::Status Evaluate(double rho, Eigen::MatrixXd* g, Eigen::MatrixXd* square) {
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

 private:
  std::vector<int32_t> distinct_;
  std::vector<int> slot_of_;
  bool laplacian_ = false;
  Eigen::MatrixXd fixed_;
  std::vector<int32_t> compact_of_slot_;
  Eigen::SparseMatrix<double> laplacian_matrix_, identity_;
  Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>, Eigen::Lower, Eigen::AMDOrdering<int>> solver_;
  bool analysed_ = false;
};

// Log marginal likelihood and its gradient for one data set.
class Likelihood {
 public:
  absl::Status Init(const FitData& data, const FitUsers& users, const FitSpec& spec) {
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
    if (absl::Status s = users_.Init(data, users); !s.ok()) return s;
    same_user_.resize(n, n);
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) {
        same_user_(i, j) = users_.slot_of()[i] == users_.slot_of()[j] ? 1.0 : 0.0;
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

  int n() const { return static_cast<int>(data_->y.size()); }
  UserFactors& users() { return users_; }

  // The mean over pairs of inputs of the squared distance in group g's dimensions (stationary
  // kernels), or the mean squared norm of one input in them (linear kernel).
  double TypicalSquare(int g) const {
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

  // Log marginal likelihood at h; gradient over the full log-space layout when asked. With
  // `at_own_mean`, at h.prior_mean even when the spec profiles the mean.
  absl::StatusOr<double> Evaluate(const Hyperparameters& h, Eigen::VectorXd* gradient,
                                  double* mean_out, bool at_own_mean = false) {
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
    const double value =
        -0.5 * residual.dot(alpha) - 0.5 * log_det - 0.5 * n * std::log(2.0 * M_PI);
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
    if (need_square) {
      double sum = 0.0;
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < n; ++i) sum += w_(i, j) * gu2_(slot[i], slot[j]) * arm_(i, j);
      }
      (*gradient)(RhoIndex(groups)) = -0.5 * h.rho * sum;
    }
    return value;
  }

 private:
  const FitData* data_ = nullptr;
  const FitSpec* spec_ = nullptr;
  UserFactors users_;
  bool stationary_ = false;   // else the linear kernel
  bool linear_part_ = false;  // a stationary kernel's linear part is fitted
  bool grouped_ = false;      // dimensions share length-scales: per-group statistics below
  Eigen::MatrixXd centred_;   // inputs minus their mean, per dimension
  // Grouped: per group, squared distances (stationary) or products (linear kernel), and the
  // products for a stationary kernel's linear part.
  std::vector<Eigen::MatrixXd> group_stats_, group_products_;
  Eigen::MatrixXd same_user_;  // [u_i = u_j]: fixed by the data
  // Workspaces of Evaluate (see there). Memory: about 14 n x n matrices, plus two per group when
  // grouped, plus O(n dim).
  Eigen::MatrixXd z_, raw_scaled_, projected_;
  Eigen::MatrixXd gu_, gu2_, gp_, scaled_, root_, profile_, inner_, arm_, a_, linv_, w_, wg_, slope_;
  Eigen::LLT<Eigen::MatrixXd> llt_;
};

// The free parameters, in the full layout's order, as one log-space vector.
struct Layout {
  std::vector<int> free;  // indices into the full layout
  int groups = 0;

  static Layout Of(const FitSpec& spec, bool laplacian) {
    Layout layout;
    layout.groups = spec.groups();
    if (spec.fit_signal_variance) layout.free.push_back(kSignal);
    if (spec.fit_offset_variance) layout.free.push_back(kOffset);
    if (spec.fit_linear_variance && spec.kernel != KernelType::kLinear) {
      layout.free.push_back(kLinear);
    }
    for (int g = 0; g < spec.groups(); ++g) {
      if (spec.fit_lengthscale[g]) layout.free.push_back(kFirstLengthscale + g);
    }
    if (spec.fit_noise_variance) layout.free.push_back(NoiseIndex(spec.groups()));
    if (spec.fit_rho && laplacian) layout.free.push_back(RhoIndex(spec.groups()));
    if (spec.fit_user_variance) layout.free.push_back(EtaIndex(spec.groups()));
    return layout;
  }
  int full_size() const { return FullSize(groups); }
};

// Full log-space vector <-> Hyperparameters (length-scales by group).
Eigen::VectorXd ToFull(const Hyperparameters& h, const FitSpec& spec) {
  Eigen::VectorXd full(FullSize(spec.groups()));
  const double tiny = std::numeric_limits<double>::min();
  full(kSignal) = std::log(h.signal_variance);
  full(kOffset) = std::log(std::max(h.offset_variance, tiny));
  full(kLinear) = std::log(std::max(h.linear_variance, tiny));
  full(EtaIndex(spec.groups())) = std::log(std::max(h.user_variance, tiny));
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
  h->lengthscales.resize(static_cast<int>(spec.lengthscale_group.size()));
  for (size_t d = 0; d < spec.lengthscale_group.size(); ++d) {
    h->lengthscales(d) = std::exp(full(kFirstLengthscale + spec.lengthscale_group[d]));
  }
  h->noise_variance = std::exp(full(NoiseIndex(spec.groups())));
  h->rho = std::exp(full(RhoIndex(spec.groups())));
}

struct Problem {
  Likelihood* likelihood;
  const FitSpec* spec;
  Layout layout;
  Eigen::VectorXd base;     // full log-space vector: fixed parameters come from here
  Eigen::VectorXd centre;   // prior centres (full layout)
  double prior_precision;   // 1 / sd^2 of the log-normal prior
  int evaluations = 0;
  // The best point evaluated so far (objective and free values), whatever the optimiser
  // reports in the end: L-BFGS can stop with a generic failure after a line search meets a
  // region where the kernel matrix is numerically singular.
  double best_objective = INFINITY;
  std::vector<double> best_x = {};
  nlopt_opt opt = nullptr;  // the running optimiser, for cancellation
  bool cancelled = false;
};

double Objective(unsigned n, const double* x, double* grad, void* data) {
  Problem& p = *static_cast<Problem*>(data);
  ++p.evaluations;
  if (p.spec->cancel != nullptr && p.spec->cancel->load(std::memory_order_relaxed)) {
    p.cancelled = true;
    if (p.opt != nullptr) nlopt_force_stop(p.opt);
    if (grad != nullptr) std::fill(grad, grad + n, 0.0);
    return 0.0;
  }
  Eigen::VectorXd full = p.base;
  for (unsigned k = 0; k < n; ++k) full(p.layout.free[k]) = x[k];
  Hyperparameters h;
  FromFull(full, *p.spec, &h);
  Eigen::VectorXd gradient;
  absl::StatusOr<double> value =
      p.likelihood->Evaluate(h, grad != nullptr ? &gradient : nullptr, nullptr);
  const double scale = 1.0 / p.likelihood->n();
  if (!value.ok() || !std::isfinite(*value)) {
    if (grad != nullptr) std::fill(grad, grad + n, 0.0);
    return std::numeric_limits<double>::max() / 4;
  }
  double objective = -*value;
  for (unsigned k = 0; k < n; ++k) {
    const int i = p.layout.free[k];
    const double offset = x[k] - p.centre(i);
    objective += 0.5 * p.prior_precision * offset * offset;
    if (grad != nullptr) grad[k] = scale * (-gradient(i) + p.prior_precision * offset);
  }
  objective *= scale;
  if (objective < p.best_objective) {
    p.best_objective = objective;
    p.best_x.assign(x, x + n);
  }
  return objective;
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

}  // namespace

bool Hyperparameters::InRange(int dim) const {
  auto positive = [](double v) { return v > 0.0 && std::isfinite(v); };
  auto non_negative = [](double v) { return v >= 0.0 && std::isfinite(v); };
  return (dim < 0 || lengthscales.size() == dim) && (lengthscales.array() > 0.0).all() &&
         lengthscales.allFinite() && positive(signal_variance) && non_negative(offset_variance) &&
         non_negative(linear_variance) && non_negative(user_variance) &&
         positive(noise_variance) && positive(rho) && std::isfinite(prior_mean);
}

std::string Hyperparameters::DebugString() const {
  std::vector<std::string> l;
  for (Eigen::Index i = 0; i < lengthscales.size(); ++i) {
    l.push_back(absl::StrFormat("%.4g", lengthscales(i)));
  }
  return absl::StrFormat(
      "variance=%.4g offset=%.4g linear=%.4g user=%.4g lengthscales=[%s] noise=%.4g rho=%.4g "
      "mean=%.4g",
      signal_variance, offset_variance, linear_variance, user_variance, absl::StrJoin(l, ","),
      noise_variance, rho, prior_mean);
}

absl::StatusOr<double> LogMarginalLikelihood(const FitData& data, const FitUsers& users,
                                             const Hyperparameters& values, const FitSpec& spec,
                                             Eigen::VectorXd* gradient, double* profiled_mean) {
  if (absl::Status s = CheckStart(values, static_cast<int>(data.x.rows())); !s.ok()) return s;
  Likelihood likelihood;
  if (absl::Status s = likelihood.Init(data, users, spec); !s.ok()) return s;
  Eigen::VectorXd full_gradient;
  absl::StatusOr<double> value = likelihood.Evaluate(
      values, gradient != nullptr ? &full_gradient : nullptr, profiled_mean);
  if (!value.ok() || gradient == nullptr) return value;
  const Layout layout = Layout::Of(spec, likelihood.users().laplacian());
  gradient->resize(static_cast<int>(layout.free.size()));
  for (size_t k = 0; k < layout.free.size(); ++k) (*gradient)(k) = full_gradient(layout.free[k]);
  return value;
}

absl::StatusOr<FitResult> FitHyperparameters(const FitData& data, const FitUsers& users,
                                             const Hyperparameters& start, const FitSpec& spec) {
  const auto started = std::chrono::steady_clock::now();
  const int dim = static_cast<int>(data.x.rows());
  if (absl::Status s = CheckStart(start, dim); !s.ok()) return s;
  const int n = static_cast<int>(data.y.size());
  if (n < 2) return absl::FailedPreconditionError("a fit needs at least 2 observations");
  Likelihood likelihood;
  if (absl::Status s = likelihood.Init(data, users, spec); !s.ok()) return s;
  const double y_mean = data.y.mean();
  const double y_variance = (data.y.array() - y_mean).square().mean();
  if (!(y_variance > 1e-300)) {
    return absl::FailedPreconditionError("the rewards have no variance: nothing to fit");
  }
  // Observations at a single input (a policy that has only ever shown one arm) say nothing
  // about how the reward varies with the input: the likelihood would shrink the signal
  // variance towards 0 and the model would stop exploring. Inputs that differ by round-off
  // only (the history is stored divided by the length-scales in use) count as one.
  bool distinct_inputs = false;
  const double same = 1e-9 * (1.0 + data.x.col(0).norm());
  for (int i = 1; i < n && !distinct_inputs; ++i) {
    distinct_inputs = (data.x.col(i) - data.x.col(0)).norm() > same;
  }
  if (!distinct_inputs) {
    return absl::FailedPreconditionError("every observation is at the same input: nothing to fit");
  }

  // Data-derived centres and bounds (log space, full layout).
  const int groups = spec.groups();
  Eigen::MatrixXd g_start;
  if (absl::Status s = likelihood.users().Evaluate(start.rho, &g_start, nullptr); !s.ok()) return s;
  double g_diagonal = 0.0;
  for (int slot : likelihood.users().slot_of()) g_diagonal += g_start(slot, slot);
  g_diagonal = std::max(g_diagonal / n, 1e-300);
  // A group's typical scale: the root-mean-square distance between two inputs (norm of one
  // input for the linear kernel). Not a median: a bandit repeats the arm it prefers, so most
  // pairs can differ by nothing in an arm dimension, and the median distance is then 0 (or
  // round-off), which would put every bound of that length-scale near 0.
  std::vector<double> typical(groups, 1.0);
  for (int g = 0; g < groups; ++g) {
    const double mean_square = likelihood.TypicalSquare(g);
    if (mean_square > 0.0 && std::isfinite(mean_square)) typical[g] = std::sqrt(mean_square);
  }
  const Layout layout = Layout::Of(spec, likelihood.users().laplacian());
  Eigen::VectorXd centre(layout.full_size()), lower(layout.full_size()), upper(layout.full_size());
  const double signal_scale = y_variance / g_diagonal;
  centre(kSignal) = std::log(0.5 * signal_scale);
  lower(kSignal) = std::log(1e-4 * signal_scale);
  upper(kSignal) = std::log(1e4 * signal_scale);
  centre(kOffset) = std::log(0.1 * signal_scale);
  lower(kOffset) = std::log(1e-8 * signal_scale);
  upper(kOffset) = std::log(1e3 * signal_scale);
  // The linear part's scale relative to <x/l, x'/l>, whose typical size is the number of inputs
  // over the typical scaled distance.
  centre(kLinear) = std::log(0.1 * signal_scale / std::max(1, dim));
  lower(kLinear) = std::log(1e-8 * signal_scale / std::max(1, dim));
  upper(kLinear) = std::log(1e3 * signal_scale);
  for (int g = 0; g < groups; ++g) {
    centre(kFirstLengthscale + g) = std::log(typical[g]);
    lower(kFirstLengthscale + g) = std::log(1e-2 * typical[g]);
    upper(kFirstLengthscale + g) = std::log(1e2 * typical[g]);
  }
  centre(NoiseIndex(groups)) = std::log(0.5 * y_variance);
  lower(NoiseIndex(groups)) = std::log(1e-6 * y_variance);
  upper(NoiseIndex(groups)) = std::log(1e2 * y_variance);
  centre(RhoIndex(groups)) = std::log(0.1);
  lower(RhoIndex(groups)) = std::log(1e-4);
  upper(RhoIndex(groups)) = std::log(1e4);
  // eta relative to the graph part's typical diagonal.
  centre(EtaIndex(groups)) = std::log(0.1 * g_diagonal);
  lower(EtaIndex(groups)) = std::log(1e-8 * g_diagonal);
  upper(EtaIndex(groups)) = std::log(1e3 * g_diagonal);

  Problem problem{&likelihood, &spec, layout, ToFull(start, spec), centre,
                  1.0 / (spec.prior_log_sd * spec.prior_log_sd)};
  FitResult result;
  result.points = n;
  result.free_parameters = static_cast<int>(layout.free.size()) + (spec.fit_prior_mean ? 1 : 0);
  {
    // The values in use as they are, prior mean included: a fit that mainly corrects a stale
    // prior mean explains the data better than they do.
    absl::StatusOr<double> at_start =
        likelihood.Evaluate(start, nullptr, nullptr, /*at_own_mean=*/true);
    result.log_likelihood_start = at_start.ok() ? *at_start / n : -INFINITY;
  }

  const unsigned free = static_cast<unsigned>(layout.free.size());
  Hyperparameters best = start;
  if (free > 0) {
    std::vector<double> lb(free), ub(free);
    for (unsigned k = 0; k < free; ++k) {
      lb[k] = lower(layout.free[k]);
      ub[k] = upper(layout.free[k]);
    }
    // Two starts: where the model is now, and the data-derived centres.
    std::vector<std::vector<double>> starts(2, std::vector<double>(free));
    for (unsigned k = 0; k < free; ++k) {
      starts[0][k] = std::clamp(problem.base(layout.free[k]), lb[k], ub[k]);
      starts[1][k] = centre(layout.free[k]);
    }
    for (std::vector<double>& x : starts) {
      nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, free);
      nlopt_set_lower_bounds(opt, lb.data());
      nlopt_set_upper_bounds(opt, ub.data());
      nlopt_set_min_objective(opt, &Objective, &problem);
      nlopt_set_ftol_rel(opt, 1e-5);
      nlopt_set_xtol_rel(opt, 1e-3);
      nlopt_set_maxeval(opt, std::max(1, spec.max_evaluations / 2));
      double value = INFINITY;  // nlopt's final value; the best point seen is kept by Objective
      problem.opt = opt;
      nlopt_optimize(opt, x.data(), &value);
      problem.opt = nullptr;
      nlopt_destroy(opt);
      if (problem.cancelled) return absl::CancelledError("the fit was cancelled");
    }
    // Objective records only evaluations that succeeded.
    if (!std::isfinite(problem.best_objective)) {
      return absl::InternalError("the likelihood could not be evaluated at any point tried");
    }
    Eigen::VectorXd full = problem.base;
    for (unsigned k = 0; k < free; ++k) full(layout.free[k]) = problem.best_x[k];
    FromFull(full, spec, &best);
  }
  // Fixed parameters keep their exact start values (the log/exp round trip is not exact).
  if (!spec.fit_signal_variance) best.signal_variance = start.signal_variance;
  if (!spec.fit_offset_variance) best.offset_variance = start.offset_variance;
  if (!spec.fit_linear_variance || spec.kernel == KernelType::kLinear) {
    best.linear_variance = start.linear_variance;
  }
  if (!spec.fit_user_variance) best.user_variance = start.user_variance;
  for (size_t d = 0; d < spec.lengthscale_group.size(); ++d) {
    if (!spec.fit_lengthscale[spec.lengthscale_group[d]]) best.lengthscales(d) = start.lengthscales(d);
  }
  if (!spec.fit_noise_variance) best.noise_variance = start.noise_variance;
  if (!(spec.fit_rho && likelihood.users().laplacian())) best.rho = start.rho;
  double mean = start.prior_mean;
  absl::StatusOr<double> fitted = likelihood.Evaluate(best, nullptr, &mean);
  if (!fitted.ok()) return fitted.status();
  best.prior_mean = spec.fit_prior_mean ? mean : start.prior_mean;
  result.values = best;
  result.log_likelihood = *fitted / n;
  result.evaluations = problem.evaluations;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace graphbandit
