#include "core/storage/snapshot_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "core/storage/coding.h"
#include "core/storage/crc32c.h"
#include "core/storage/file_util.h"

namespace graphbandit::storage {
namespace {

constexpr absl::string_view kMagic("GBSNAP\x00\x01", 8);
constexpr size_t kHeaderSize = 8 + 8 + 8 + 4;

}  // namespace

absl::Status WriteSnapshotFile(const std::string& path, uint64_t seq,
                               std::initializer_list<absl::string_view> parts) {
  uint64_t length = 0;
  uint32_t crc = 0;
  for (absl::string_view part : parts) {
    length += part.size();
    crc = Crc32cExtend(crc, part.data(), part.size());
  }
  Encoder header;
  for (char c : kMagic) header.PutU8(static_cast<uint8_t>(c));
  header.PutFixed64(seq);
  header.PutFixed64(length);
  header.PutFixed32(Mask(crc));
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return OsError(errno, "create", tmp);
  absl::Status status = WriteFully(fd, header.data().data(), header.data().size(), tmp);
  for (absl::string_view part : parts) {
    if (status.ok()) status = WriteFully(fd, part.data(), part.size(), tmp);
  }
  if (status.ok() && ::fdatasync(fd) != 0) status = OsError(errno, "fdatasync", tmp);
  CloseQuietly(fd);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = OsError(errno, "rename to " + path, tmp);
  }
  if (status.ok()) status = SyncParentDir(path);
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

absl::StatusOr<SnapshotContents> ReadSnapshotFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open snapshot %s", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  if (bytes.size() < kHeaderSize || absl::string_view(bytes).substr(0, 8) != kMagic) {
    return absl::DataLossError(absl::StrFormat("snapshot %s: bad or truncated header", path));
  }
  Decoder header(absl::string_view(bytes).substr(8, kHeaderSize - 8));
  SnapshotContents contents;
  uint64_t length = 0;
  uint32_t masked = 0;
  header.GetFixed64(&contents.seq);
  header.GetFixed64(&length);
  header.GetFixed32(&masked);
  if (length != bytes.size() - kHeaderSize) {
    return absl::DataLossError(
        absl::StrFormat("snapshot %s: payload is %d bytes, the header says %d", path,
                        bytes.size() - kHeaderSize, length));
  }
  contents.payload = bytes.substr(kHeaderSize);
  if (Crc32c(contents.payload) != Unmask(masked)) {
    return absl::DataLossError(absl::StrFormat("snapshot %s: checksum mismatch", path));
  }
  return contents;
}

}  // namespace graphbandit::storage
