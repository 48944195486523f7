#include "core/graph/spectral_embedding.h"

#include <Spectra/SymEigsShiftSolver.h>

#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <numeric>

#include "absl/strings/str_format.h"
#include "core/base/sync.h"

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
  UserGraph::Components components = graph.ConnectedComponents();
  size_t best = 0;  // ties: the component with the smaller first user wins
  for (size_t c = 1; c < components.members.size(); ++c) {
    if (components.members[c].size() > components.members[best].size()) best = c;
  }
  if (components.members.empty()) return {};
  return std::move(components.members[best]);
}

// What the embedding depends on, in 64 bits: the number of users and edges and every edge with
// its weight, combined by a sum of mixed terms so that the hash maps' iteration order (which
// differs between copies of a graph) does not matter.
uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fingerprint(const UserGraph& graph, int dims) {
  uint64_t sum = Mix(static_cast<uint64_t>(graph.num_users()) * 0x9e3779b97f4a7c15ULL + dims);
  sum += Mix(static_cast<uint64_t>(graph.num_edges()) + 0x632be59bd9b4e019ULL);
  for (int32_t u = 0; u < graph.num_users(); ++u) {
    for (const auto& [v, w] : graph.Neighbours(u)) {
      if (v < u) continue;
      uint64_t bits;
      static_assert(sizeof(bits) == sizeof(w));
      std::memcpy(&bits, &w, sizeof(bits));
      sum += Mix(Mix((static_cast<uint64_t>(u) << 32) | static_cast<uint32_t>(v)) ^ bits);
    }
  }
  return sum;
}

// The last embedding built, by fingerprint: a refit that changes only rho or the community
// variance, and a fit's evaluation of the graph the model serves, reuse it instead of solving
// the eigenproblem again (seconds at 10,000 users).
struct LastEmbedding {
  Mutex mu;
  uint64_t fingerprint ABSL_GUARDED_BY(mu) = 0;
  int32_t users ABSL_GUARDED_BY(mu) = -1;
  int64_t edges ABSL_GUARDED_BY(mu) = -1;
  std::shared_ptr<const SpectralEmbedding> embedding ABSL_GUARDED_BY(mu);
};

LastEmbedding& Last() {
  static LastEmbedding* last = new LastEmbedding;
  return *last;
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
  if (dims < 1 || dims > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spectral embedding dimensions must be in 1..%d, got %d", kMaxDims, dims));
  }
  const uint64_t fingerprint = Fingerprint(graph, dims);
  LastEmbedding& last = Last();
  {
    MutexLock lock(&last.mu);
    if (last.embedding != nullptr && last.fingerprint == fingerprint &&
        last.users == graph.num_users() && last.edges == graph.num_edges() &&
        last.embedding->dims() == dims) {
      return last.embedding;
    }
  }
  std::shared_ptr<const SpectralEmbedding> built = Compute(graph, dims);
  std::shared_ptr<const SpectralEmbedding> replaced = built;
  {
    MutexLock lock(&last.mu);
    last.fingerprint = fingerprint;
    last.users = graph.num_users();
    last.edges = graph.num_edges();
    last.embedding.swap(replaced);
  }
  return built;  // `replaced` (the previous embedding) is freed here, outside the lock
}

std::shared_ptr<const SpectralEmbedding> SpectralEmbedding::Compute(const UserGraph& graph,
                                                                    int dims) {
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
