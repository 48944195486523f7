#include "sim/lastfm_environment.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace graphbandit::sim {
namespace {

enum Stream : uint64_t { kPca = 31, kRounds = 32 };

// The integer columns of a tab-separated file after its header line (at least `columns` each).
absl::StatusOr<std::vector<std::vector<int64_t>>> ReadTable(const std::string& path, int columns) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat(
        "cannot open %s (the HetRec 2011 Last.fm files; give their directory with --lastfm_dir "
        "or run from the project root)",
        path));
  }
  std::vector<std::vector<int64_t>> rows;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    absl::string_view text = absl::StripSuffix(line, "\r");
    if (number == 1 || text.empty()) continue;  // header
    std::vector<absl::string_view> fields = absl::StrSplit(text, '\t');
    if (static_cast<int>(fields.size()) < columns) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: expected %d tab-separated fields", path, number, columns));
    }
    std::vector<int64_t> row(columns);
    for (int c = 0; c < columns; ++c) {
      if (!absl::SimpleAtoi(fields[c], &row[c])) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s:%d: field %d is not an integer", path, number, c + 1));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// Index of the first running sum above u * total (u uniform in [0, 1)).
int DrawFrom(const std::vector<double>& cumulative, Rng& rng) {
  const double target = rng.Uniform() * cumulative.back();
  return static_cast<int>(std::upper_bound(cumulative.begin(), cumulative.end(), target) -
                          cumulative.begin());
}

}  // namespace

Eigen::MatrixXd PrincipalScores(const Eigen::SparseMatrix<double, Eigen::RowMajor>& a, int k,
                                uint64_t seed) {
  const Eigen::Index n = a.rows(), m = a.cols();
  const Eigen::Index width = std::min<Eigen::Index>(std::min(n, m), k + 10);
  const Eigen::RowVectorXd means =
      Eigen::RowVectorXd(Eigen::VectorXd::Ones(n).transpose() * a) / static_cast<double>(n);
  // Products with the centred matrix A - 1 m^T without forming it.
  auto times = [&](const Eigen::MatrixXd& x) -> Eigen::MatrixXd {  // (A - 1 m^T) x
    Eigen::MatrixXd y = a * x;
    y.rowwise() -= means * x;
    return y;
  };
  auto transpose_times = [&](const Eigen::MatrixXd& y) -> Eigen::MatrixXd {  // (..)^T y
    Eigen::MatrixXd x = a.transpose() * y;
    x -= means.transpose() * y.colwise().sum();
    return x;
  };
  Rng rng = StreamRng(seed, kPca);
  Eigen::MatrixXd omega(m, width);
  for (Eigen::Index j = 0; j < width; ++j) {
    for (Eigen::Index i = 0; i < m; ++i) omega(i, j) = rng.Normal();
  }
  auto orthonormal = [](const Eigen::MatrixXd& y) -> Eigen::MatrixXd {
    Eigen::HouseholderQR<Eigen::MatrixXd> qr(y);
    return qr.householderQ() * Eigen::MatrixXd::Identity(y.rows(), y.cols());
  };
  Eigen::MatrixXd q = orthonormal(times(omega));
  for (int power = 0; power < 4; ++power) {
    q = orthonormal(times(orthonormal(transpose_times(q))));
  }
  const Eigen::MatrixXd b = transpose_times(q).transpose();  // width x m
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(b, Eigen::ComputeThinU);
  const int keep = static_cast<int>(std::min<Eigen::Index>(k, width));
  Eigen::MatrixXd scores = Eigen::MatrixXd::Zero(n, k);
  scores.leftCols(keep) =
      q * svd.matrixU().leftCols(keep) * svd.singularValues().head(keep).asDiagonal();
  // A sign convention, so that the scores do not depend on the SVD's: each component's largest
  // score is positive.
  for (int c = 0; c < keep; ++c) {
    Eigen::Index at = 0;
    scores.col(c).cwiseAbs().maxCoeff(&at);
    if (scores(at, c) < 0) scores.col(c) = -scores.col(c);
  }
  return scores;
}

absl::StatusOr<std::shared_ptr<const LastFmData>> LoadLastFm(const std::string& dir, int dim,
                                                             uint64_t seed) {
  if (dim < 1) return absl::InvalidArgumentError("Last.fm: dim must be at least 1");
  auto listens = ReadTable(dir + "/user_artists.dat", 2);
  if (!listens.ok()) return listens.status();
  auto friends = ReadTable(dir + "/user_friends.dat", 2);
  if (!friends.ok()) return friends.status();
  auto tagged = ReadTable(dir + "/user_taggedartists.dat", 3);
  if (!tagged.ok()) return tagged.status();
  if (listens->empty()) return absl::InvalidArgumentError("Last.fm: no listening pairs");

  auto data = std::make_shared<LastFmData>();
  std::map<int64_t, int> user_index, artist_index;
  for (const auto& row : *listens) {
    user_index.emplace(row[0], 0);
    artist_index.emplace(row[1], 0);
  }
  int next = 0;
  for (auto& [id, index] : user_index) index = next++;
  next = 0;
  for (auto& [id, index] : artist_index) index = next++;
  data->users = static_cast<int>(user_index.size());
  const int artists = static_cast<int>(artist_index.size());
  data->listened.resize(data->users);
  std::vector<double> listeners(artists, 0.0);
  for (const auto& row : *listens) {
    const int u = user_index[row[0]], a = artist_index[row[1]];
    data->listened[u].push_back(a);
  }
  for (auto& items : data->listened) {
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end()), items.end());
    for (int a : items) listeners[a] += 1.0;
  }
  double total = 0.0;
  for (const auto& items : data->listened) {
    total += static_cast<double>(items.size());
    data->user_cumulative.push_back(total);
  }
  total = 0.0;
  for (double l : listeners) {
    total += l;
    data->artist_cumulative.push_back(total);
  }
  std::set<std::pair<int, int>> edges;
  for (const auto& row : *friends) {
    auto a = user_index.find(row[0]), b = user_index.find(row[1]);
    if (a == user_index.end() || b == user_index.end() || a->second == b->second) continue;
    edges.insert({std::min(a->second, b->second), std::max(a->second, b->second)});
  }
  for (const auto& [a, b] : edges) data->edges.push_back({a, b, 1.0});

  // TF-IDF over (artist, tag) assignments.
  std::map<std::pair<int64_t, int64_t>, double> tf;  // (artist id, tag id) -> assignments
  for (const auto& row : *tagged) tf[{row[1], row[2]}] += 1.0;
  std::map<int64_t, double> artists_with_tag;
  std::set<int64_t> tagged_artists;
  for (const auto& [key, count] : tf) {
    artists_with_tag[key.second] += 1.0;
    tagged_artists.insert(key.first);
  }
  data->tagged_artists = static_cast<int64_t>(tagged_artists.size());
  std::map<int64_t, int> tag_column;
  std::vector<Eigen::Triplet<double>> entries;
  for (const auto& [key, count] : tf) {
    auto a = artist_index.find(key.first);
    if (a == artist_index.end()) continue;
    const int column =
        tag_column.emplace(key.second, static_cast<int>(tag_column.size())).first->second;
    const double idf =
        static_cast<double>(data->tagged_artists) / (1.0 + artists_with_tag[key.second]);
    entries.emplace_back(a->second, column, count * std::log(idf));
  }
  data->tags = static_cast<int64_t>(tag_column.size());
  Eigen::SparseMatrix<double, Eigen::RowMajor> matrix(artists, std::max<int64_t>(1, data->tags));
  matrix.setFromTriplets(entries.begin(), entries.end());
  data->features = PrincipalScores(matrix, dim, seed).transpose();
  return std::shared_ptr<const LastFmData>(std::move(data));
}

LastFmEnvironment::LastFmEnvironment(std::shared_ptr<const LastFmData> data, int arms,
                                     uint64_t seed)
    : data_(std::move(data)),
      arms_(std::max(1, std::min(arms, static_cast<int>(data_->features.cols())))),
      seed_(seed) {}

Round LastFmEnvironment::MakeRound(uint64_t index) const {
  Rng rng = StreamRng(seed_, kRounds, index);
  Round round;
  round.user = DrawFrom(data_->user_cumulative, rng);
  const std::vector<int>& own = data_->listened[round.user];
  std::vector<int> shown = {own[rng.UniformInt(own.size())]};
  // Others by popularity, without replacement (rejection: a handful of tries per pick).
  const int artists = static_cast<int>(data_->features.cols());
  while (static_cast<int>(shown.size()) < arms_) {
    int a = DrawFrom(data_->artist_cumulative, rng);
    if (a >= artists) a = artists - 1;
    if (std::find(shown.begin(), shown.end(), a) == shown.end()) shown.push_back(a);
  }
  for (int k = static_cast<int>(shown.size()) - 1; k > 0; --k) {  // Fisher-Yates
    std::swap(shown[k], shown[rng.UniformInt(k + 1)]);
  }
  const int n = static_cast<int>(shown.size());
  round.arms.resize(data_->features.rows(), n);
  round.means.resize(n);
  round.noise = Eigen::VectorXd::Zero(n);
  for (int k = 0; k < n; ++k) {
    round.arms.col(k) = data_->features.col(shown[k]);
    round.items.push_back(shown[k]);
    round.means(k) = std::binary_search(own.begin(), own.end(), shown[k]) ? 1.0 : 0.0;
  }
  return round;
}

}  // namespace graphbandit::sim
