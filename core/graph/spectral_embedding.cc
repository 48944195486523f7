#include "core/graph/spectral_embedding.h"

#include <Spectra/SymEigsShiftSolver.h>

#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>
#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>

#include "absl/strings/str_format.h"

namespace graphbandit {
namespace {

// Components up to this size are decomposed densely (O(n^3), well under a second).
constexpr int32_t kDenseLimit = 400;
// The bandwidth is the median distance over the pairs of at most this many rows, evenly spaced.
constexpr int32_t kBandwidthRows = 2000;
// Restarts of Spectra's Lanczos iteration before it gives up (each costs about ncv solves).
constexpr int kMaxRestarts = 300;

// (L + shift I)^-1 for Spectra's shift-invert mode, through a sparse LDL^T. L is positive
// semi-definite, so any shift below 0 keeps L - sigma I positive definite.
class ShiftedSolve {
 public:
  using Scalar = double;
  explicit ShiftedSolve(const Eigen::SparseMatrix<double>& laplacian) : laplacian_(laplacian) {}
  Eigen::Index rows() const { return laplacian_.rows(); }
  Eigen::Index cols() const { return laplacian_.cols(); }
  void set_shift(const double& sigma) {
    Eigen::SparseMatrix<double> identity(laplacian_.rows(), laplacian_.cols());
    identity.setIdentity();
    solver_.compute(laplacian_ - sigma * identity);
    ok_ = solver_.info() == Eigen::Success;
  }
  void perform_op(const double* in, double* out) const {
    Eigen::Map<Eigen::VectorXd>(out, rows()) =
        solver_.solve(Eigen::Map<const Eigen::VectorXd>(in, rows()));
  }
  bool ok() const { return ok_; }

 private:
  const Eigen::SparseMatrix<double>& laplacian_;
  Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>, Eigen::Lower, Eigen::AMDOrdering<int>> solver_;
  bool ok_ = false;
};

// Users of the largest connected component, ascending.
std::vector<int32_t> LargestComponent(const UserGraph& graph) {
  const int32_t n = graph.num_users();
  std::vector<int32_t> component(n, -1), best, current, stack;
  for (int32_t start = 0; start < n; ++start) {
    if (component[start] >= 0 || !graph.HasEdges(start)) continue;
    current.clear();
    stack.assign(1, start);
    component[start] = start;
    while (!stack.empty()) {
      const int32_t u = stack.back();
      stack.pop_back();
      current.push_back(u);
      for (const auto& [v, w] : graph.Neighbours(u)) {
        if (v < n && component[v] < 0) {
          component[v] = start;
          stack.push_back(v);
        }
      }
    }
    if (current.size() > best.size()) best = current;  // ties: the earlier start wins
  }
  std::sort(best.begin(), best.end());
  return best;
}

}  // namespace

std::shared_ptr<const SpectralEmbedding> SpectralEmbedding::Unembedded(
    std::shared_ptr<SpectralEmbedding> embedding, absl::string_view why) {
  std::fill(embedding->row_of_user_.begin(), embedding->row_of_user_.end(), -1);
  embedding->coordinates_.resize(0, embedding->dims_);
  embedding->eigenvalues_.resize(0);
  embedding->failure_ = std::string(why);
  return embedding;
}

absl::StatusOr<std::shared_ptr<const SpectralEmbedding>> SpectralEmbedding::Build(
    const UserGraph& graph, int dims) {
  if (dims < 1 || dims > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spectral embedding dimensions must be in 1..64, got %d", dims));
  }
  std::shared_ptr<SpectralEmbedding> embedding(new SpectralEmbedding());
  embedding->dims_ = dims;
  embedding->row_of_user_.assign(graph.num_users(), -1);
  const std::vector<int32_t> users = LargestComponent(graph);
  const int32_t n = static_cast<int32_t>(users.size());
  if (n < dims + 2) {
    embedding->coordinates_.resize(0, dims);
    return std::shared_ptr<const SpectralEmbedding>(std::move(embedding));
  }
  for (int32_t r = 0; r < n; ++r) embedding->row_of_user_[users[r]] = r;

  std::vector<Eigen::Triplet<double>> triplets;
  for (int32_t r = 0; r < n; ++r) {
    double degree = 0.0;
    for (const auto& [v, w] : graph.SortedNeighbours(users[r])) {
      degree += w;
      triplets.emplace_back(embedding->row_of_user_[v], r, -w);
    }
    triplets.emplace_back(r, r, degree);
  }
  Eigen::SparseMatrix<double> laplacian(n, n);
  laplacian.setFromTriplets(triplets.begin(), triplets.end());

  // The component is connected: one zero eigenvalue (the constant vector), skipped.
  Eigen::VectorXd values;
  Eigen::MatrixXd vectors;
  if (n <= kDenseLimit) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig{Eigen::MatrixXd(laplacian)};
    if (eig.info() != Eigen::Success) {
      return Unembedded(std::move(embedding), "the eigensolver did not converge");
    }
    values = eig.eigenvalues().segment(1, dims);
    vectors = eig.eigenvectors().middleCols(1, dims);
  } else {
    // The dims + 1 eigenvalues nearest a shift just below 0: the smallest ones. The shift is
    // tiny against the degrees, so that small eigenvalues stay apart after the inversion.
    const double max_degree = Eigen::VectorXd(laplacian.diagonal()).maxCoeff();
    const double shift = -1e-6 * std::max(max_degree, 1e-12);
    const Eigen::Index nev = dims + 1;
    const Eigen::Index ncv = std::min<Eigen::Index>(n, std::max<Eigen::Index>(2 * nev + 1, 20));
    ShiftedSolve op(laplacian);
    try {
      Spectra::SymEigsShiftSolver<ShiftedSolve> eigs(op, nev, ncv, shift);
      if (!op.ok()) return Unembedded(std::move(embedding), "sparse factorisation failed");
      eigs.init();
      eigs.compute(Spectra::SortRule::LargestMagn, kMaxRestarts, 1e-10);
      if (eigs.info() != Spectra::CompInfo::Successful) {
        return Unembedded(std::move(embedding), "the eigensolver did not converge");
      }
      const Eigen::VectorXd found = eigs.eigenvalues();
      const Eigen::MatrixXd found_vectors = eigs.eigenvectors();
      std::vector<int> order(found.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return found(a) < found(b); });
      values.resize(dims);
      vectors.resize(n, dims);
      for (int j = 0; j < dims; ++j) {
        values(j) = found(order[j + 1]);
        vectors.col(j) = found_vectors.col(order[j + 1]);
      }
    } catch (const std::exception& e) {
      return Unembedded(std::move(embedding), e.what());
    }
  }
  embedding->eigenvalues_ = values;
  embedding->coordinates_ = vectors;

  // Median distance between rows (over an evenly spaced subset of at most kBandwidthRows).
  const int32_t step = (n + kBandwidthRows - 1) / kBandwidthRows;
  std::vector<int32_t> rows;
  for (int32_t r = 0; r < n; r += step) rows.push_back(r);
  std::vector<double> distances;
  distances.reserve(rows.size() * (rows.size() - 1) / 2);
  for (size_t a = 0; a < rows.size(); ++a) {
    for (size_t b = a + 1; b < rows.size(); ++b) {
      distances.push_back((vectors.row(rows[a]) - vectors.row(rows[b])).norm());
    }
  }
  double bandwidth = 0.0;
  if (!distances.empty()) {
    std::nth_element(distances.begin(), distances.begin() + distances.size() / 2, distances.end());
    bandwidth = distances[distances.size() / 2];
  }
  if (!(bandwidth > 0.0) || !std::isfinite(bandwidth)) bandwidth = 1.0;
  embedding->bandwidth_ = bandwidth;
  embedding->inverse_two_bandwidth_squared_ = 1.0 / (2.0 * bandwidth * bandwidth);
  return std::shared_ptr<const SpectralEmbedding>(std::move(embedding));
}

double SpectralEmbedding::Similarity(int32_t u, int32_t v) const {
  const int32_t a = RowOf(u), b = RowOf(v);
  if (a < 0 || b < 0) return (u == v && u != kUnknownUser) ? 1.0 : 0.0;
  if (a == b) return 1.0;
  return std::exp(-inverse_two_bandwidth_squared_ *
                  (coordinates_.row(a) - coordinates_.row(b)).squaredNorm());
}

void SpectralEmbedding::SimilarityColumn(int32_t u, Eigen::VectorXd* out) const {
  const int32_t a = RowOf(u);
  out->resize(coordinates_.rows());
  if (a < 0) {
    out->setZero();
    return;
  }
  *out = (-inverse_two_bandwidth_squared_ *
          (coordinates_.rowwise() - coordinates_.row(a)).rowwise().squaredNorm().array())
             .exp()
             .matrix();
  (*out)(a) = 1.0;
}

}  // namespace graphbandit
