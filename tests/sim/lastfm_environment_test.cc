// The Last.fm replay's loader and rounds on small files written in the HetRec format (the real
// files never enter the repository).
#include "sim/lastfm_environment.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace graphbandit::sim {
namespace {

class TinyLastFm {
 public:
  TinyLastFm() {
    // One directory per process: ctest runs these tests in parallel, and one test's destructor
    // must not remove the files another is reading.
    dir_ = ::testing::TempDir() + "/lastfm_test." + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
    // CRLF line ends and a header, as the distributed files.
    Write("user_artists.dat",
          "userID\tartistID\tweight\r\n"
          "2\t51\t100\r\n2\t52\t30\r\n2\t53\t5\r\n"
          "3\t51\t7\r\n3\t54\t9\r\n"
          "5\t55\t1\r\n5\t52\t2\r\n5\t56\t3\r\n"
          "9\t51\t4\r\n");
    // Both directions of each friendship, plus one naming an unknown user.
    Write("user_friends.dat",
          "userID\tfriendID\r\n2\t3\r\n3\t2\r\n3\t5\r\n5\t3\r\n9\t2\r\n2\t9\r\n9\t77\r\n");
    // (user, artist, tag, day, month, year); artist 99 is listened by nobody (a genuine quirk
    // of the real files: tags of artists that are not in artists.dat).
    Write("user_taggedartists.dat",
          "userID\tartistID\ttagID\tday\tmonth\tyear\r\n"
          "2\t51\t1\t1\t4\t2009\r\n3\t51\t1\t1\t4\t2009\r\n2\t51\t2\t1\t4\t2009\r\n"
          "2\t52\t2\t1\t4\t2009\r\n5\t53\t3\t1\t4\t2009\r\n5\t54\t1\t1\t4\t2009\r\n"
          "5\t54\t3\t1\t4\t2009\r\n2\t99\t4\t1\t1\t1956\r\n3\t55\t4\t1\t4\t2009\r\n");
  }
  ~TinyLastFm() { std::filesystem::remove_all(dir_); }
  const std::string& dir() const { return dir_; }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << text;
  }

 private:
  std::string dir_;
};

TEST(LastFmTest, LoadsUsersGraphAndListening) {
  TinyLastFm files;
  auto data = LoadLastFm(files.dir(), 3);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->users, 4);          // 2, 3, 5, 9 -> 0..3
  ASSERT_EQ((*data)->edges.size(), 3u);  // 2-3, 3-5, 2-9 once each; 77 is unknown
  std::set<std::pair<int, int>> edges;
  for (const Edge& e : (*data)->edges) edges.insert({e.a, e.b});
  EXPECT_EQ(edges, (std::set<std::pair<int, int>>{{0, 1}, {1, 2}, {0, 3}}));
  EXPECT_EQ((*data)->listened[0], (std::vector<int>{0, 1, 2}));  // artists 51, 52, 53
  EXPECT_EQ((*data)->listened[2], (std::vector<int>{1, 4, 5}));  // 52, 55, 56
  EXPECT_EQ((*data)->features.rows(), 3);
  EXPECT_EQ((*data)->features.cols(), 6);
  // Users drawn by listened artists (3, 2, 3, 1), artists by listeners (3, 2, 1, 1, 1, 1).
  EXPECT_EQ((*data)->user_cumulative, (std::vector<double>{3, 5, 8, 9}));
  EXPECT_EQ((*data)->artist_cumulative, (std::vector<double>{3, 5, 6, 7, 8, 9}));
  EXPECT_EQ((*data)->tagged_artists, 6);  // 51, 52, 53, 54, 55, 99
}

TEST(LastFmTest, FeaturesAreTheCentredPrincipalScoresOfTfIdf) {
  TinyLastFm files;
  auto data = LoadLastFm(files.dir(), 3);
  ASSERT_TRUE(data.ok()) << data.status();
  // TF-IDF by hand: N_a = 6 tagged artists; tag t is on n_t of them, idf = log(6 / (1 + n_t)).
  // Tag 1: 51, 54 (n=2); tag 2: 51, 52 (2); tag 3: 53, 54 (2); tag 4: 99, 55 (2).
  const double w = std::log(6.0 / 3.0);
  Eigen::MatrixXd tfidf = Eigen::MatrixXd::Zero(6, 4);  // artists 51..56 x tags 1..4
  tfidf(0, 0) = 2 * w;                                  // 51: tag 1 twice
  tfidf(0, 1) = w;
  tfidf(1, 1) = w;
  tfidf(2, 2) = w;
  tfidf(3, 0) = w;
  tfidf(3, 2) = w;
  tfidf(4, 3) = w;
  const Eigen::MatrixXd centred = tfidf.rowwise() - tfidf.colwise().mean();
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(centred, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::MatrixXd exact = centred * svd.matrixV().leftCols(3);
  const Eigen::MatrixXd& got = (*data)->features;  // dim x artists
  for (int c = 0; c < 3; ++c) {
    // Up to the sign of each component (and the column order of the tags).
    const double sign = exact.col(c).dot(got.row(c).transpose()) >= 0 ? 1.0 : -1.0;
    EXPECT_LT((sign * exact.col(c) - got.row(c).transpose()).norm(), 1e-9) << c;
  }
}

TEST(LastFmTest, RoundsShowOneListenedArtistAndDistinctPopularOthers) {
  TinyLastFm files;
  auto data = LoadLastFm(files.dir(), 2);
  ASSERT_TRUE(data.ok()) << data.status();
  LastFmEnvironment env(*data, 4, /*seed=*/3);
  EXPECT_EQ(env.users(), 4);
  EXPECT_EQ(env.arm_dim(), 2);
  std::map<int, int> users;
  for (uint64_t t = 0; t < 400; ++t) {
    const Round round = env.MakeRound(t);
    ASSERT_EQ(round.arms.cols(), 4);
    ++users[round.user];
    std::set<int> items(round.items.begin(), round.items.end());
    EXPECT_EQ(items.size(), 4u);             // distinct
    EXPECT_EQ(round.means.maxCoeff(), 1.0);  // the user's own artist
    for (int k = 0; k < 4; ++k) {
      const auto& own = (*data)->listened[round.user];
      const bool listened = std::binary_search(own.begin(), own.end(), round.items[k]);
      EXPECT_EQ(round.means(k), listened ? 1.0 : 0.0);
      EXPECT_EQ(round.arms.col(k), (*data)->features.col(round.items[k]));
    }
    EXPECT_EQ(env.Regret(round, 0) + env.Reward(round, 0), 1.0);
  }
  // Users in proportion 3 : 2 : 3 : 1 over 400 rounds (about 133, 89, 133, 44).
  EXPECT_GT(users[0], 100);
  EXPECT_LT(users[3], 70);
  // Deterministic in (seed, index).
  EXPECT_EQ(env.MakeRound(17).items, env.MakeRound(17).items);
}

TEST(LastFmTest, MalformedOrMissingFilesAreNamed) {
  TinyLastFm files;
  files.Write("user_friends.dat", "userID\tfriendID\r\n2\tthree\r\n");
  auto bad = LoadLastFm(files.dir(), 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("user_friends.dat:2"), std::string::npos) << bad.status();
  auto missing = LoadLastFm(files.dir() + "/nowhere", 2);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace graphbandit::sim
