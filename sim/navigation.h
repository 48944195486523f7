// Energy-efficient navigation, the experiment of the combinatorial GP semi-bandit (CGP) paper
// (docs/algorithms.md §2.6 and §2.10): a vehicle drives from one road segment to another every
// round; the route is a super arm of road segments, each segment's energy is observed on its own
// (semi-bandit feedback), and the policy minimises expected energy.
//
// The paper uses the Luxembourg and Monaco SUMO networks with elevation from a terrain model;
// they are not available here, so the network is synthetic and says so:
//  * junctions on a jittered rows x cols grid (spacing 200 m), streets between grid neighbours
//    (10% removed at random while the network stays connected), each street two directed
//    segments; turns may not go back the way they came except at a dead end;
//  * elevation from a few random Gaussian hills and valleys (relief +- 10 m by default, slopes
//    of a few per cent, on which about 4% of the segments recuperate more than they spend
//    downhill; see `relief`); speed limits
//    70 km/h on every third row and column (arterials), 30 or 50 km/h elsewhere;
//  * contexts per segment: length, speed limit and incline, standardised (d = 3);
//  * prior mean: the deterministic physics model E_det of §2.6 with the SUMO EV parameters
//    (traction energy divided by eta+ = 0.98, recuperated energy multiplied by eta- = 0.96);
//  * kernel k = s^2 (1/2 k_G(e, e') k_f(x, x') + 1/2 k'_f(x, x')): a graph Matern kernel on the
//    line graph (nu = 2, kappa = 1, normalised to mean diagonal 1) times a Matern-5/2 kernel of
//    the contexts, plus a second Matern-5/2 kernel; s^2 = 0.25^2 var(E_det), noise variance
//    0.1^2 var(E_det), length-scales 1;
//  * the network is one fixed "city" (its seed is fixed); each run draws the true expected
//    energies from the GP prior (the paper's Bayesian regret), redrawing in the rare case a
//    draw has a cycle of negative energy (no cheapest route would exist);
//  * the trip: from a segment leaving the north-west corner to one entering the south-east.
#ifndef GRAPHBANDIT_SIM_NAVIGATION_H_
#define GRAPHBANDIT_SIM_NAVIGATION_H_

#include <Eigen/Dense>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/policy/combinatorial.h"
#include "sim/environment.h"

namespace graphbandit::sim {

struct NavigationOptions {
  int rows = 10;
  int cols = 10;
  double spacing = 200.0;  // metres between grid junctions
  // Metres, amplitude of the hills. CGP Algorithm 2 rectifies each segment's index to
  // E[max(0, Z)], so a segment whose expected energy is negative (recuperation downhill) looks
  // more expensive than it is: with relief 40 m a third of the segments are negative and the
  // route that is best under rectified true energies already costs about 44 Wh more than the
  // cheapest, every round (linear regret for every policy); with 10 m it is 0.2 Wh.
  double relief = 10.0;
  double drop_probability = 0.1;
  // The length-scale of the policies' prior kernel (the truth always uses 1): the paper's
  // lengthscale study varies it.
  double prior_lengthscale = 1.0;
  uint64_t network_seed = 2017;
};

// Physical constants of §2.6 (SUMO's default electric vehicle).
struct VehicleModel {
  double mass = 1830.0;            // kg
  double rolling = 0.01;           // C_r
  double front_area = 2.6;         // m^2
  double drag = 0.35;              // C_d
  double eta_traction = 0.98;      // eta+
  double eta_recuperation = 0.96;  // eta-
  double gravity = 9.82;           // m/s^2
  double air_density = 1.2;        // kg/m^3
};

// E_det in Wh for a segment of `length` metres at `speed` m/s with incline `alpha` radians.
double DeterministicEnergy(const VehicleModel& vehicle, double length, double speed, double alpha);

// The graph Matern kernel on a directed graph's line graph (§2.6 steps 2-5): successors[e]
// lists the turns out of segment e, `lengths` the segments' lengths. Normalised to mean
// diagonal 1.
Eigen::MatrixXd LineGraphMaternKernel(const std::vector<std::vector<int>>& successors,
                                      const Eigen::VectorXd& lengths, double nu, double kappa);

class NavigationEnvironment final : public SimEnvironment {
 public:
  // The network from options.network_seed; the truth from `seed`.
  static absl::StatusOr<std::unique_ptr<NavigationEnvironment>> Create(
      const NavigationOptions& options, uint64_t seed);

  // SimEnvironment: a navigation task has no users or candidate sets; it is run by RunRoutes,
  // and MakeRound returns an empty round.
  std::string name() const override { return "navigation"; }
  int users() const override { return 1; }
  const std::vector<Edge>& edges() const override { return no_edges_; }
  int context_dim() const override { return 0; }
  int arm_dim() const override { return 3; }
  Round MakeRound(uint64_t) const override { return Round{}; }

  int segments() const { return static_cast<int>(successors_.size()); }
  const std::vector<std::vector<int>>& successors() const { return successors_; }
  int source() const { return source_; }
  int goal() const { return goal_; }
  // Per segment: length (m), speed limit (m/s), incline (rad).
  const Eigen::MatrixXd& contexts() const { return contexts_; }
  const Eigen::VectorXd& prior_mean() const { return prior_mean_; }              // E_det, Wh
  const Eigen::MatrixXd& prior_covariance() const { return prior_covariance_; }  // the policies'
  double noise_variance() const { return noise_variance_; }
  const Eigen::VectorXd& true_energy() const { return truth_; }
  double best_route_energy() const { return best_energy_; }
  // The observed energy of segment `e` in round `round` (true energy plus noise; the same for
  // every policy).
  double Observe(uint64_t round, int e) const;

 private:
  NavigationEnvironment() = default;

  std::vector<Edge> no_edges_;
  std::vector<std::vector<int>> successors_;
  int source_ = 0, goal_ = 0;
  Eigen::MatrixXd contexts_;
  Eigen::VectorXd prior_mean_;
  Eigen::MatrixXd prior_covariance_;
  double noise_variance_ = 0.0;
  Eigen::VectorXd truth_;
  double best_energy_ = 0.0;
  uint64_t seed_ = 0;
};

// A routing policy: a posterior over every segment's expected energy and an index rule.
struct RoutePolicy {
  // Exact GP over the segments (the prior covariance above), or the per-segment Bayesian
  // inference baseline of §2.8 (independent segments with the same prior variances).
  bool independent = false;
  IndexRule rule = IndexRule::kUcb;
  IndexSchedule schedule;    // arm_count is set to the number of segments
  double exploration = 1.0;  // multiplies the width (UCB, BayesUCB)
  // The rectification's spread: the noise standard deviation (Algorithm 2's box, the default)
  // or the posterior standard deviation (the paper's prose); docs/algorithms.md §2.11 item 1.
  bool rectify_with_posterior = false;
};

// Plays `rounds` trips on `env` and records cumulative regret (route energy minus the best
// route's) at `sample_points` rounds; draws (Thompson sampling) from `rng_seed`.
struct RouteRun {
  std::vector<int64_t> steps;
  std::vector<double> cumulative_regret;
  std::vector<double> distinct_routes;  // distinct routes driven so far, at each sample
  double seconds_per_step = 0.0;
  std::string error;
};
RouteRun RunRoutes(const NavigationEnvironment& env, const RoutePolicy& policy, int64_t rounds,
                   int sample_points, uint64_t rng_seed, std::atomic<int64_t>* steps_done);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_NAVIGATION_H_
