#include "core/learner/linear_posterior.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/storage/state_coding.h"

namespace graphbandit {
namespace {

// Automatic refresh period per row of a component (LinearOptions::refresh_interval == 0).
constexpr int64_t kAutoRefreshRows = 32;

// The scoring formulas of the header, shared by the live learner and its frozen copies.
// `block` is the symmetric d x d block (u,u) of A^-1 and `theta` the d values theta_u.
void ScoreFromBlock(const Eigen::Ref<const Eigen::MatrixXd>& block,
                    const Eigen::Ref<const Eigen::VectorXd>& theta,
                    const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
                    Eigen::VectorXd* stddev) {
  mean->noalias() = points.transpose() * theta;
  Eigen::MatrixXd projected;
  projected.noalias() = block * points;
  *stddev = projected.cwiseProduct(points).colwise().sum().transpose().cwiseMax(0.0).cwiseSqrt();
}

// A user with no data and no edges: mean 0, width^2 = |x|^2 * prior_variance.
void ScoreFromPrior(double prior_variance, const Eigen::Ref<const Eigen::MatrixXd>& points,
                    Eigen::VectorXd* mean, Eigen::VectorXd* stddev) {
  *mean = Eigen::VectorXd::Zero(points.cols());
  *stddev = (points.colwise().squaredNorm().transpose() * prior_variance).cwiseSqrt();
}

// Component lookup shared by the live learner and its frozen copies.
int32_t Locate(LinearOptions::Prior prior, const std::vector<int32_t>& component_of,
               const std::vector<int32_t>& member_of, size_t num_components, int32_t user,
               int32_t* member) {
  *member = 0;
  if (prior == LinearOptions::Prior::kPooled) return num_components > 0 ? 0 : -1;
  if (user < 0 || static_cast<size_t>(user) >= component_of.size()) return -1;
  *member = member_of[user];
  return component_of[user];
}

}  // namespace

absl::Status LinearOptions::Validate() const {
  if (!(std::isfinite(lambda) && lambda > 0.0)) {
    return absl::InvalidArgumentError(absl::StrFormat("lambda must be positive, got %g", lambda));
  }
  if (prior == Prior::kGraph && !(std::isfinite(rho) && rho > 0.0)) {
    return absl::InvalidArgumentError(absl::StrFormat("rho must be positive, got %g", rho));
  }
  return absl::OkStatus();
}

absl::string_view LinearPriorName(LinearOptions::Prior prior) {
  switch (prior) {
    case LinearOptions::Prior::kPerUser:
      return "per_user";
    case LinearOptions::Prior::kPooled:
      return "pooled";
    case LinearOptions::Prior::kGraph:
      return "graph";
  }
  return "unknown";
}

absl::StatusOr<LinearOptions::Prior> ParseLinearPrior(absl::string_view name) {
  for (LinearOptions::Prior prior : {LinearOptions::Prior::kPerUser, LinearOptions::Prior::kPooled,
                                     LinearOptions::Prior::kGraph}) {
    if (name == LinearPriorName(prior)) return prior;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown linear prior \"%s\" (per_user, pooled, graph)", name));
}

// One diagonal block of A over `members` users (m = members * d rows); member k owns rows
// [k d, (k+1) d).
struct LinearUcbPosterior::Component {
  Eigen::MatrixXd prior;    // members x members: lambda (L_C + rho I), or (lambda) / (lambda rho)
  Eigen::MatrixXd gram;     // d x m: member k's X_k^T X_k in columns [k d, (k+1) d)
  Eigen::VectorXd b;        // m: sum y phi
  Eigen::MatrixXd inverse;  // m x m: A^-1, only the lower triangle is kept up to date
  Eigen::VectorXd theta;    // m: A^-1 b
  int64_t updates_since_refresh = 0;
  mutable std::shared_ptr<const Snapshot> snapshot;  // null: changed since the last Freeze

  int members() const { return static_cast<int>(prior.rows()); }

  // Recomputes inverse and theta exactly from the prior, the Gram blocks and b.
  bool Refresh(int d) {
    const int m = members() * d;
    Eigen::MatrixXd precision = Eigen::MatrixXd::Zero(m, m);
    for (int k = 0; k < members(); ++k) {
      for (int l = 0; l <= k; ++l) {
        if (prior(k, l) == 0.0) continue;
        precision.block(k * d, l * d, d, d).diagonal().setConstant(prior(k, l));
      }
      precision.block(k * d, k * d, d, d) += gram.middleCols(k * d, d);
    }
    const Eigen::LLT<Eigen::MatrixXd> llt(precision);  // reads the lower triangle
    if (llt.info() != Eigen::Success) return false;
    inverse = llt.solve(Eigen::MatrixXd::Identity(m, m));
    theta.noalias() = inverse.selfadjointView<Eigen::Lower>() * b;
    updates_since_refresh = 0;
    snapshot.reset();
    return true;
  }
};

// What scoring needs from one component: the d x d blocks (k,k) of A^-1 and theta.
struct LinearUcbPosterior::Snapshot {
  Eigen::MatrixXd blocks;  // d x m
  Eigen::MatrixXd theta;   // d x members
};

class LinearUcbPosterior::FrozenScorer final : public Scorer {
 public:
  FrozenScorer(LinearOptions::Prior prior, double prior_variance, std::vector<int32_t> component_of,
               std::vector<int32_t> member_of,
               std::vector<std::shared_ptr<const Snapshot>> snapshots)
      : prior_(prior),
        prior_variance_(prior_variance),
        component_of_(std::move(component_of)),
        member_of_(std::move(member_of)),
        snapshots_(std::move(snapshots)) {}

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override {
    int32_t member = 0;
    const int32_t c = Locate(prior_, component_of_, member_of_, snapshots_.size(), user, &member);
    if (c < 0) {
      ScoreFromPrior(prior_variance_, points, mean, stddev);
      return;
    }
    const Snapshot& s = *snapshots_[c];
    const int d = static_cast<int>(s.blocks.rows());
    ScoreFromBlock(s.blocks.middleCols(member * d, d), s.theta.col(member), points, mean, stddev);
  }

 private:
  LinearOptions::Prior prior_;
  double prior_variance_;
  std::vector<int32_t> component_of_;
  std::vector<int32_t> member_of_;
  std::vector<std::shared_ptr<const Snapshot>> snapshots_;
};

LinearUcbPosterior::LinearUcbPosterior(int dim, const LinearOptions& options)
    : dim_(dim), options_(options), history_x_(dim) {}

LinearUcbPosterior::~LinearUcbPosterior() = default;

int LinearUcbPosterior::num_components() const { return static_cast<int>(components_.size()); }

double LinearUcbPosterior::PriorVariance() const {
  return options_.prior == LinearOptions::Prior::kGraph ? 1.0 / (options_.lambda * options_.rho)
                                                        : 1.0 / options_.lambda;
}

int32_t LinearUcbPosterior::ComponentOf(int32_t user, int32_t* member) const {
  return Locate(options_.prior, component_of_, member_of_, components_.size(), user, member);
}

int32_t LinearUcbPosterior::AddSingleton(int32_t user) {
  const double precision = 1.0 / PriorVariance();
  Component c;
  c.prior = Eigen::MatrixXd::Constant(1, 1, precision);
  c.gram = Eigen::MatrixXd::Zero(dim_, dim_);
  c.b = Eigen::VectorXd::Zero(dim_);
  c.inverse = Eigen::MatrixXd::Identity(dim_, dim_) / precision;
  c.theta = Eigen::VectorXd::Zero(dim_);
  const int32_t index = static_cast<int32_t>(components_.size());
  components_.push_back(std::move(c));
  if (options_.prior != LinearOptions::Prior::kPooled) {
    if (static_cast<size_t>(user) >= component_of_.size()) {
      component_of_.resize(static_cast<size_t>(user) + 1, -1);
      member_of_.resize(static_cast<size_t>(user) + 1, 0);
    }
    component_of_[user] = index;
    member_of_[user] = 0;
  }
  return index;
}

void LinearUcbPosterior::Update(Component& c, int member,
                                const Eigen::Ref<const Eigen::VectorXd>& x, double y) {
  const int d = dim_;
  const int m = static_cast<int>(c.b.size());
  const int k = member * d;
  const int tail = m - k - d;
  // v = A^-1 phi = A^-1[:, block k] x, read from the lower triangle.
  Eigen::VectorXd v(m);
  v.head(k).noalias() = c.inverse.block(k, 0, d, k).transpose() * x;
  v.segment(k, d).noalias() = c.inverse.block(k, k, d, d).selfadjointView<Eigen::Lower>() * x;
  v.tail(tail).noalias() = c.inverse.block(k + d, k, tail, d) * x;
  const double denominator = 1.0 + x.dot(v.segment(k, d));   // 1 + phi^T A^-1 phi
  const double residual = y - x.dot(c.theta.segment(k, d));  // y - phi^T theta
  // Sherman-Morrison: A^-1 <- A^-1 - v v^T / (1 + phi^T A^-1 phi); RLS: theta <- theta + v r / den.
  c.inverse.selfadjointView<Eigen::Lower>().rankUpdate(v, -1.0 / denominator);
  c.theta.noalias() += (residual / denominator) * v;
  c.b.segment(k, d) += y * x;
  c.gram.middleCols(k, d).noalias() += x * x.transpose();
  c.snapshot.reset();
  ++c.updates_since_refresh;
  const int64_t period =
      options_.refresh_interval == 0 ? kAutoRefreshRows * m : options_.refresh_interval;
  if (options_.refresh_interval >= 0 && c.updates_since_refresh >= period) {
    // A failed factorisation (impossible for a positive prior in exact arithmetic) keeps the
    // Sherman-Morrison state, which is still a valid inverse up to round-off.
    if (c.Refresh(d)) ++refreshes_;
  }
}

void LinearUcbPosterior::Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                               Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const {
  int32_t member = 0;
  const int32_t c = ComponentOf(user, &member);
  if (c < 0) {
    ScoreFromPrior(PriorVariance(), points, mean, stddev);
    return;
  }
  const Component& component = components_[c];
  const int k = member * dim_;
  const Eigen::MatrixXd block =
      component.inverse.block(k, k, dim_, dim_).selfadjointView<Eigen::Lower>();
  ScoreFromBlock(block, component.theta.segment(k, dim_), points, mean, stddev);
}

absl::Status LinearUcbPosterior::Observe(int32_t user,
                                         const Eigen::Ref<const Eigen::VectorXd>& point,
                                         double reward) {
  if (absl::Status s = CheckObservation(user, point, reward, dim_); !s.ok()) return s;
  int32_t member = 0;
  int32_t c = ComponentOf(user, &member);
  if (c < 0) c = AddSingleton(user);
  Update(components_[c], member, point, reward);
  history_x_.Append(point);
  history_users_.push_back(user);
  history_rewards_.push_back(reward);
  return absl::OkStatus();
}

absl::Status LinearUcbPosterior::SetGraph(const UserGraph& graph,
                                          std::shared_ptr<const UserKernel> /*kernel*/) {
  if (options_.prior != LinearOptions::Prior::kGraph) return absl::OkStatus();
  const int d = dim_;
  const int32_t n = graph.num_users();
  int32_t users = n;
  for (int32_t u : history_users_) users = std::max(users, u + 1);

  // Connected components of the users with edges, members in ascending user order.
  UserGraph::Components graph_components = graph.ConnectedComponents();
  std::vector<Component> components;
  std::vector<int32_t> component_of = std::move(graph_components.of_user);
  component_of.resize(users, -1);
  std::vector<int32_t> member_of(users, 0);
  for (const std::vector<int32_t>& members : graph_components.members) {
    const int size = static_cast<int>(members.size());
    if (static_cast<int64_t>(size) * d > options_.max_block_rows) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the graph-regularised linear model keeps one dense inverse per connected component; "
          "a component of %d users x %d features exceeds its limit of %d rows",
          size, d, options_.max_block_rows));
    }
    for (int k = 0; k < size; ++k) member_of[members[k]] = k;
    Component c;
    c.prior = Eigen::MatrixXd::Zero(size, size);
    for (int k = 0; k < size; ++k) {
      c.prior(k, k) = options_.lambda * options_.rho;
      for (const auto& [v, w] : graph.SortedNeighbours(members[k])) {
        c.prior(k, k) += options_.lambda * w;
        c.prior(k, member_of[v]) -= options_.lambda * w;
      }
    }
    components.push_back(std::move(c));
  }
  // Isolated users with data (without edges, or beyond the graph) get singletons.
  for (int32_t u : history_users_) {
    if (component_of[u] >= 0) continue;
    component_of[u] = static_cast<int32_t>(components.size());
    Component c;
    c.prior = Eigen::MatrixXd::Constant(1, 1, options_.lambda * options_.rho);
    components.push_back(std::move(c));
  }
  for (Component& c : components) {
    c.gram = Eigen::MatrixXd::Zero(d, c.members() * d);
    c.b = Eigen::VectorXd::Zero(c.members() * d);
  }
  // Sufficient statistics from the history.
  for (size_t i = 0; i < history_users_.size(); ++i) {
    const int32_t u = history_users_[i];
    Component& c = components[component_of[u]];
    const int k = member_of[u] * d;
    const auto x = history_x_.col(static_cast<int>(i));
    c.gram.middleCols(k, d).noalias() += x * x.transpose();
    c.b.segment(k, d) += history_rewards_[i] * x;
  }
  for (Component& c : components) {
    if (!c.Refresh(d)) {
      return absl::InternalError(
          "linear posterior: the regularised precision is not positive "
          "definite");
    }
  }
  components_ = std::move(components);
  component_of_ = std::move(component_of);
  member_of_ = std::move(member_of);
  return absl::OkStatus();
}

std::shared_ptr<const LinearUcbPosterior::Snapshot> LinearUcbPosterior::SnapshotOf(
    const Component& c) const {
  if (c.snapshot == nullptr) {
    const int d = dim_;
    auto s = std::make_shared<Snapshot>();
    s->blocks.resize(d, c.members() * d);
    for (int k = 0; k < c.members(); ++k) {
      s->blocks.middleCols(k * d, d) =
          c.inverse.block(k * d, k * d, d, d).selfadjointView<Eigen::Lower>();
    }
    s->theta = Eigen::Map<const Eigen::MatrixXd>(c.theta.data(), d, c.members());
    c.snapshot = std::move(s);
  }
  return c.snapshot;
}

std::shared_ptr<const Scorer> LinearUcbPosterior::Freeze() const {
  std::vector<std::shared_ptr<const Snapshot>> snapshots;
  snapshots.reserve(components_.size());
  for (const Component& c : components_) snapshots.push_back(SnapshotOf(c));
  return std::make_shared<FrozenScorer>(options_.prior, PriorVariance(), component_of_, member_of_,
                                        std::move(snapshots));
}

// Payload, version 1: columns history_x, users history_users, doubles history_rewards,
// count refreshes, count n then n counts component_of + 1 (0 = no component), count n then n
// counts member_of, count components, then per component: matrix prior (members x members),
// matrix gram (d x members d), vector b, lower inverse (only its lower triangle is ever read or
// updated; on load the upper triangle is filled by symmetry), vector theta, count
// updates_since_refresh. Not stored: the Freeze() snapshot caches (rebuilt on demand).
namespace {
constexpr uint8_t kLinearStateVersion = 1;
}  // namespace

void LinearUcbPosterior::SaveState(storage::Encoder* out) const {
  storage::Encoder s;
  PutColumns(&s, history_x_);
  PutUsers(&s, history_users_);
  PutDoubleVector(&s, history_rewards_);
  PutCount(&s, refreshes_);
  PutCount(&s, static_cast<int64_t>(component_of_.size()));
  for (int32_t c : component_of_) PutCount(&s, static_cast<int64_t>(c) + 1);
  PutCount(&s, static_cast<int64_t>(member_of_.size()));
  for (int32_t k : member_of_) PutCount(&s, k);
  PutCount(&s, static_cast<int64_t>(components_.size()));
  for (const Component& c : components_) {
    PutMatrix(&s, c.prior);
    PutMatrix(&s, c.gram);
    PutVector(&s, c.b);
    PutLowerTriangle(&s, c.inverse);
    PutVector(&s, c.theta);
    PutCount(&s, c.updates_since_refresh);
  }
  PutStateFrame(out, LearnerStateTag::kLinearUcb, kLinearStateVersion, s.data());
}

absl::Status LinearUcbPosterior::LoadState(storage::Decoder* in) {
  std::string payload;
  if (absl::Status status =
          GetStateFrame(in, LearnerStateTag::kLinearUcb, kLinearStateVersion, &payload);
      !status.ok()) {
    return status;
  }
  storage::Decoder d(payload);
  const auto malformed = [](absl::string_view what) { return MalformedState("linear", what); };
  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

  // Decoded into locals and committed at the end: on failure the learner is unchanged.
  GrowableColumns history_x(dim_);
  std::vector<int32_t> history_users;
  std::vector<double> history_rewards;
  if (const char* bad = GetPointHistory(&d, &history_x, &history_users, &history_rewards)) {
    return malformed(bad);
  }
  int64_t refreshes = 0;
  if (!GetCount(&d, &refreshes)) return malformed("refresh count");

  // User maps: every entry takes at least one byte, which bounds the allocations.
  int64_t n = 0;
  if (!GetCount(&d, &n, kMaxInt32) || static_cast<uint64_t>(n) > d.remaining()) {
    return malformed("component map");
  }
  std::vector<int32_t> component_of(static_cast<size_t>(n));
  for (int32_t& c : component_of) {
    int64_t v = 0;
    if (!GetCount(&d, &v, kMaxInt32)) return malformed("component map");
    c = static_cast<int32_t>(v - 1);
  }
  int64_t n_members = 0;
  if (!GetCount(&d, &n_members, kMaxInt32) || n_members != n) return malformed("member map");
  std::vector<int32_t> member_of(static_cast<size_t>(n));
  for (int32_t& k : member_of) {
    int64_t v = 0;
    if (!GetCount(&d, &v, kMaxInt32)) return malformed("member map");
    k = static_cast<int32_t>(v);
  }
  const bool pooled = options_.prior == LinearOptions::Prior::kPooled;
  if (pooled && n != 0) return malformed("a pooled model has no user map");

  // Components: each takes at least a few bytes, which bounds the count.
  int64_t num_components = 0;
  if (!GetCount(&d, &num_components, kMaxInt32) ||
      static_cast<uint64_t>(num_components) > d.remaining() || (pooled && num_components > 1)) {
    return malformed("component count");
  }
  const int dim = dim_;
  std::vector<Component> components;
  for (int64_t index = 0; index < num_components; ++index) {
    Component c;
    if (!GetMatrix(&d, &c.prior) || c.prior.rows() != c.prior.cols() || c.prior.rows() < 1 ||
        (c.prior.rows() > 1 && options_.prior != LinearOptions::Prior::kGraph) ||
        c.prior.rows() > std::numeric_limits<int>::max() / std::max(dim, 1)) {
      return malformed("component prior");
    }
    const Eigen::Index m = c.prior.rows() * dim;
    if (!GetMatrix(&d, &c.gram) || c.gram.rows() != dim || c.gram.cols() != m) {
      return malformed("component Gram blocks");
    }
    if (!GetVector(&d, &c.b) || c.b.size() != m) return malformed("component b");
    if (!GetLowerTriangle(&d, &c.inverse) || c.inverse.rows() != m) {
      return malformed("component inverse");
    }
    for (Eigen::Index j = 1; j < m; ++j) {
      for (Eigen::Index i = 0; i < j; ++i) c.inverse(i, j) = c.inverse(j, i);
    }
    if (!GetVector(&d, &c.theta) || c.theta.size() != m) return malformed("component theta");
    if (!GetCount(&d, &c.updates_since_refresh)) return malformed("component update count");
    components.push_back(std::move(c));
  }
  if (!d.done()) return malformed("trailing bytes");
  for (int64_t u = 0; u < n; ++u) {
    const int32_t c = component_of[u];
    if (c < -1 || c >= num_components) return malformed("user in an unknown component");
    if (member_of[u] < 0 || (c >= 0 && member_of[u] >= components[c].members())) {
      return malformed("user in an unknown member slot");
    }
  }

  history_x_ = std::move(history_x);
  history_users_ = std::move(history_users);
  history_rewards_ = std::move(history_rewards);
  refreshes_ = refreshes;
  components_ = std::move(components);
  component_of_ = std::move(component_of);
  member_of_ = std::move(member_of);
  return absl::OkStatus();
}

}  // namespace graphbandit
