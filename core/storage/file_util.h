// Small POSIX file helpers shared by the storage code (log reader and writer,
// and anything else that must put bytes on disk durably), and the reader of the
// small secret files (PEM files, bearer tokens) that the server and the
// command-line clients are pointed at by flags.
//
// Every helper that fails on a system call reports it as
// absl::ErrnoToStatus(errno, "<operation> <path>"), so the status code follows
// the errno (NotFound, PermissionDenied, ...) and the message names the file.
// The helpers are stateless and thread-safe; concurrent use of one descriptor
// is the caller's business.

#ifndef GRAPHBANDIT_CORE_STORAGE_FILE_UTIL_H_
#define GRAPHBANDIT_CORE_STORAGE_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit::storage {

// absl::ErrnoToStatus(err, "<what> <path>"), e.g. OsError(ENOENT, "open", p)
// gives NotFound("open p: No such file or directory").
absl::Status OsError(int err, absl::string_view what, const std::string& path);

// close(fd), ignoring any error; does nothing for fd < 0. Never retries: Linux
// releases the descriptor even when close() fails with EINTR, so a retry could
// close an unrelated descriptor opened meanwhile by another thread.
void CloseQuietly(int fd);

// The directory part of `path`: "." when it has no '/', "/" for a file
// directly under the root, otherwise everything before the last '/'. Purely
// lexical: no file system access, no normalisation.
std::string ParentDir(const std::string& path);

// fsyncs the directory containing `path` (ParentDir(path)). A newly created or
// renamed file is only durable once the directory entry naming it is, so call
// this after creating/renaming the file and fsyncing its contents. Errors name
// the directory: "open directory <dir>" or "fsync directory <dir>".
absl::Status SyncParentDir(const std::string& path);

// Writes all of [data, data + n) to `fd` at its file offset (the end, with
// O_APPEND). Retries EINTR and short writes; a write() that returns 0 is
// treated as EIO rather than retried, so a stuck descriptor cannot spin.
// On failure returns OsError(err, "write", path); the file may then hold any
// prefix of the data.
// If `written` is non-null it receives the number of bytes written: n on
// success, the count written before the failure otherwise. If `error` is
// non-null it receives 0 on success and the (non-zero) errno of the failure
// otherwise, for callers that format their own messages.
absl::Status WriteFully(int fd, const char* data, size_t n, const std::string& path,
                        size_t* written = nullptr, int* error = nullptr);

// Reads up to n bytes at `offset` with pread (the file offset is unchanged),
// retrying EINTR and short reads. Returns the count read, which is less than
// n only if end of file was reached. On a read error returns
// OsError(err, "read", path) and, if `error` is non-null, stores the errno
// there (0 on success).
absl::StatusOr<size_t> PreadUpTo(int fd, char* dst, size_t n, uint64_t offset,
                                 const std::string& path, int* error = nullptr);

// The whole content of a small file (a PEM file or a token file) named by the
// command-line flag `flag` (without its dashes). A missing or unreadable file,
// or one larger than 1 MiB, is InvalidArgument("--<flag>: ... <path> ...");
// the content never appears in a message.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view flag);

// A bearer token file: its content without surrounding whitespace. An empty
// token, and one with characters an HTTP/2 header value cannot carry or a
// person would not paste (anything but visible ASCII, so also inner spaces and
// line breaks), are refused with InvalidArgument naming the flag and the path,
// never the token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view flag);

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_FILE_UTIL_H_
