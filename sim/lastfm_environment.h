// The Last.fm replay of the SemiGraphTS paper (docs/algorithms.md §5.8) on the HetRec 2011 files
// (hetrec2011-lastfm-2k), read from a directory given at run time: the data's licence keeps it
// out of the repository.
//
//  * users: every user of user_artists.dat; graph: user_friends.dat, undirected, weight 1;
//  * artists: every artist someone listened to; features: TF-IDF of the artist's tag
//    assignments (user_taggedartists.dat; tf = assignments of the tag to the artist, idf =
//    log(N_a / (1 + artists carrying the tag)), N_a = tagged artists), reduced by a centred PCA
//    to the first `dim` component scores (not re-normalised), as the authors' code does. The PCA
//    is a randomized SVD of the sparse matrix (Halko, Martinsson & Tropp 2011: Gaussian
//    range finder, four power iterations), exact to rounding for the leading components;
//    artists without tags get the scores of an all-zero row;
//  * a round (the authors' code, after Cesa-Bianchi et al. 2013): a user drawn with probability
//    proportional to their number of listened artists, one artist they listened to (uniformly),
//    and `arms - 1` other distinct artists drawn with probability proportional to their number
//    of listeners; reward 1 if the user listened to the artist, else 0, without noise. The
//    first candidate pays 1, so the best arm of every round pays 1 and cumulative reward is
//    rounds minus regret.
// Candidates are shuffled so that the position of the listened artist carries no signal.
#ifndef GRAPHBANDIT_SIM_LASTFM_ENVIRONMENT_H_
#define GRAPHBANDIT_SIM_LASTFM_ENVIRONMENT_H_

#include <Eigen/Dense>
#include <Eigen/Sparse>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/environment.h"

namespace graphbandit::sim {

struct LastFmData {
  int users = 0;
  std::vector<Edge> edges;
  Eigen::MatrixXd features;                // dim x artists
  std::vector<std::vector<int>> listened;  // per user: artist indices, sorted
  std::vector<double> artist_cumulative;   // running sums of listeners per artist
  std::vector<double> user_cumulative;     // running sums of listened artists per user
  int64_t tagged_artists = 0;              // N_a
  int64_t tags = 0;                        // distinct tags used on listened artists
};

// Reads user_artists.dat, user_friends.dat and user_taggedartists.dat from `dir` (tab-separated,
// one header line, LF or CRLF line ends). `seed` drives the randomized PCA.
absl::StatusOr<std::shared_ptr<const LastFmData>> LoadLastFm(const std::string& dir, int dim,
                                                             uint64_t seed = 7);

// The first `k` principal-component scores of the rows of `a` (rows: samples), centred:
// (A - 1 m^T) V_k with V_k the leading right singular vectors. Exposed for tests.
Eigen::MatrixXd PrincipalScores(const Eigen::SparseMatrix<double, Eigen::RowMajor>& a, int k,
                                uint64_t seed);

class LastFmEnvironment final : public SimEnvironment {
 public:
  LastFmEnvironment(std::shared_ptr<const LastFmData> data, int arms, uint64_t seed);
  std::string name() const override { return "Last.fm"; }
  int users() const override { return data_->users; }
  const std::vector<Edge>& edges() const override { return data_->edges; }
  int context_dim() const override { return 0; }
  int arm_dim() const override { return static_cast<int>(data_->features.rows()); }
  Round MakeRound(uint64_t index) const override;

 private:
  std::shared_ptr<const LastFmData> data_;
  int arms_;
  uint64_t seed_;
};

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_LASTFM_ENVIRONMENT_H_
