// StateDirectory: numbered files, setting damaged files aside, errors with their errno's code.
#include "core/model/state_directory.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace graphbandit {
namespace {

std::string NewTempDir() {
  std::string pattern = ::testing::TempDir() + "/state_directory_test.XXXXXX";
  return mkdtemp(pattern.data());
}

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(StateDirectoryTest, ListsNumberedFilesInOrderAndSetsDamagedOnesAside) {
  const std::string root = NewTempDir();
  auto dir = StateDirectory::Create(root + "/a/b");
  ASSERT_TRUE(dir.ok()) << dir.status();
  Touch(dir->SegmentPath(7));
  Touch(dir->SegmentPath(1));
  Touch(dir->SnapshotPath(6));
  Touch(dir->path() + "/log-1.log");  // not 20 digits: ignored
  ASSERT_EQ(dir->Segments().size(), 2u);
  EXPECT_EQ(dir->Segments()[0].first, 1u);
  EXPECT_EQ(dir->Segments()[1].first, 7u);
  ASSERT_EQ(dir->Snapshots().size(), 1u);

  auto moved = StateDirectory::SetAside(dir->SnapshotPath(6), "corrupt");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, dir->SnapshotPath(6) + ".corrupt");
  EXPECT_TRUE(dir->Snapshots().empty());
  Touch(dir->SnapshotPath(6));
  moved = StateDirectory::SetAside(dir->SnapshotPath(6), "corrupt");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(*moved, dir->SnapshotPath(6) + ".corrupt.1");
  std::filesystem::remove_all(root);
}

TEST(StateDirectoryTest, FailuresCarryTheErrnosCode) {
  const std::string root = NewTempDir();
  auto missing = StateDirectory::SetAside(root + "/no-such-file", "corrupt");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(StateDirectory::SetAsideReport(root + "/no-such-file", "corrupt").find("not moved"),
            std::string::npos);
  Touch(root + "/file");
  // A path through a regular file: ENOTDIR, not a permission problem.
  const absl::Status status = MakeDirectories(root + "/file/sub");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), absl::StatusCode::kPermissionDenied);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace graphbandit
