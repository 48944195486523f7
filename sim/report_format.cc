#include "sim/report_format.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/storage/file_util.h"

namespace graphbandit::sim::report_internal {

std::string ShortestDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

std::string Px(double v) {
  std::string s = absl::StrFormat("%.2f", v);
  if (s == "-0.00") s = "0.00";
  return s;
}

std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string CsvField(absl::string_view field) {
  if (field.find_first_of(",\"\r\n") == absl::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (const char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string MarkdownEscape(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

double TextWidth(absl::string_view text, double size) {
  int chars = 0;
  for (const char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++chars;
  }
  return 0.58 * size * chars;
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return storage::OsError(errno, "open", tmp);
  absl::Status status = storage::WriteFully(fd, contents.data(), contents.size(), tmp);
  if (::close(fd) != 0 && status.ok()) status = storage::OsError(errno, "close", tmp);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = storage::OsError(errno, absl::StrCat("rename ", tmp, " to"), path);
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

}  // namespace graphbandit::sim::report_internal
