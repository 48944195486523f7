#include "core/graph/user_kernel.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"
#include "core/graph/green_function.h"

namespace graphbandit {

absl::string_view UserKernelKindName(UserKernelKind kind) {
  switch (kind) {
    case UserKernelKind::kLaplacianInverse:
      return "laplacian_inv";
    case UserKernelKind::kHeat:
      return "heat";
    case UserKernelKind::kSpectralRbf:
      return "spectral_rbf";
    case UserKernelKind::kAllOnes:
      return "all_ones";
    case UserKernelKind::kIdentity:
      return "identity";
  }
  return "unknown";
}

absl::StatusOr<UserKernelKind> ParseUserKernelKind(absl::string_view name) {
  for (UserKernelKind kind :
       {UserKernelKind::kLaplacianInverse, UserKernelKind::kHeat, UserKernelKind::kSpectralRbf,
        UserKernelKind::kAllOnes, UserKernelKind::kIdentity}) {
    if (name == UserKernelKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown user kernel \"%s\" (laplacian_inv, heat, spectral_rbf, all_ones, identity)", name));
}

Eigen::MatrixXd DenseLaplacian(const UserGraph& graph) {
  const int n = graph.num_users();
  Eigen::MatrixXd l = Eigen::MatrixXd::Zero(n, n);
  for (int u = 0; u < n; ++u) {
    for (const auto& [v, w] : graph.SortedNeighbours(u)) {
      l(u, v) -= w;
      l(u, u) += w;
    }
  }
  return l;
}

DenseUserKernel::DenseUserKernel(const Eigen::MatrixXd& matrix, Outside outside)
    : outside_column_(std::make_shared<const Eigen::VectorXd>(outside.column)),
      outside_(std::move(outside)) {
  const int n = static_cast<int>(matrix.rows());
  slot_.resize(n);
  std::iota(slot_.begin(), slot_.end(), 0);
  columns_.reserve(n);
  for (int u = 0; u < n; ++u) {
    columns_.push_back(std::make_shared<const Eigen::VectorXd>(matrix.col(u)));
  }
}

UserKernel::Column DenseUserKernel::ColumnOf(int32_t u) const {
  if (u >= 0 && u < static_cast<int32_t>(columns_.size())) {
    // Inside user: an outside user v sees K_z(outside, u).
    return MakeColumn(u, (*columns_[u])(u), 0.0, (*outside_column_)(u), &slot_, columns_[u]);
  }
  return MakeColumn(u, outside_.self, outside_.self, outside_.cross, &slot_, outside_column_);
}

absl::StatusOr<std::shared_ptr<const UserKernel>> BuildUserKernel(
    const UserGraph& graph, const UserKernelOptions& options) {
  switch (options.kind) {
    case UserKernelKind::kLaplacianInverse: {
      if (options.community_dims <= 0 || options.community_variance == 0.0) {
        return GreenFunction::Build(graph, options.rho);
      }
      auto embedding = SpectralEmbedding::Build(graph, options.community_dims);
      if (!embedding.ok()) return embedding.status();
      return GreenFunction::Build(graph, options.rho, size_t{256} << 20, *std::move(embedding),
                                  options.community_variance);
    }
    case UserKernelKind::kAllOnes:
      return std::shared_ptr<const UserKernel>(std::make_shared<ConstantUserKernel>(1.0, 1.0));
    case UserKernelKind::kIdentity:
      return std::shared_ptr<const UserKernel>(std::make_shared<ConstantUserKernel>(1.0, 0.0));
    case UserKernelKind::kHeat:
    case UserKernelKind::kSpectralRbf:
      break;
  }
  const int n = graph.num_users();
  if (n > options.max_dense_users) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the %s user kernel is dense and supports at most %d users; the graph has %d",
        UserKernelKindName(options.kind), options.max_dense_users, n));
  }
  DenseUserKernel::Outside outside;
  if (n == 0) {  // no users yet: everyone is outside, isolated (Eigen cannot decompose 0 x 0)
    outside.column = Eigen::VectorXd();
    outside.self = 1.0;
    outside.cross = options.kind == UserKernelKind::kSpectralRbf ? 1.0 : 0.0;
    return std::shared_ptr<const UserKernel>(
        std::make_shared<DenseUserKernel>(Eigen::MatrixXd(), outside));
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(DenseLaplacian(graph));
  if (eig.info() != Eigen::Success)
    return absl::InternalError("Laplacian eigendecomposition failed");
  const Eigen::VectorXd& values = eig.eigenvalues();  // ascending
  const Eigen::MatrixXd& vectors = eig.eigenvectors();
  if (options.kind == UserKernelKind::kHeat) {
    // exp(-tau L): an isolated user (zero row of L) gets 1 on its diagonal and 0 elsewhere.
    const Eigen::VectorXd decay = (-options.heat_tau * values.array()).exp();
    const Eigen::MatrixXd heat = vectors * decay.asDiagonal() * vectors.transpose();
    outside.column = Eigen::VectorXd::Zero(n);
    outside.self = 1.0;
    outside.cross = 0.0;
    return std::shared_ptr<const UserKernel>(std::make_shared<DenseUserKernel>(heat, outside));
  }
  // Spectral RBF: coordinates from the k eigenvectors with the smallest non-zero eigenvalues
  // ("non-trivial": one zero eigenvalue per connected component is skipped).
  const double scale = n > 0 ? std::max(values.cwiseAbs().maxCoeff(), 1e-300) : 1.0;
  std::vector<int> chosen;
  for (int i = 0; i < n && static_cast<int>(chosen.size()) < options.spectral_dims; ++i) {
    if (values(i) > 1e-10 * scale) chosen.push_back(i);
  }
  Eigen::MatrixXd z(n, chosen.size());
  for (size_t j = 0; j < chosen.size(); ++j) z.col(j) = vectors.col(chosen[j]);
  Eigen::MatrixXd squared(n, n);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) squared(a, b) = (z.row(a) - z.row(b)).squaredNorm();
  }
  double bandwidth = options.spectral_bandwidth;
  if (!(bandwidth > 0.0)) {  // median heuristic over distinct pairs
    std::vector<double> distances;
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) distances.push_back(std::sqrt(squared(a, b)));
    }
    if (!distances.empty()) {
      std::nth_element(distances.begin(), distances.begin() + distances.size() / 2,
                       distances.end());
      bandwidth = distances[distances.size() / 2];
    }
    if (!(bandwidth > 0.0)) bandwidth = 1.0;
  }
  const double inv = 1.0 / (2.0 * bandwidth * bandwidth);
  const Eigen::MatrixXd rbf = (-inv * squared.array()).exp().matrix();
  // A user outside the graph has all-zero coordinates.
  outside.column = (-inv * z.rowwise().squaredNorm().array()).exp().matrix();
  outside.self = 1.0;
  outside.cross = 1.0;
  return std::shared_ptr<const UserKernel>(std::make_shared<DenseUserKernel>(rbf, outside));
}

}  // namespace graphbandit
