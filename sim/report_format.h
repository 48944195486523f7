// Text and file output shared by the simulator's reports (internal to sim/report_*.cc):
// number formatting that reads back exactly, SVG pixel coordinates, escaping for XML, CSV
// (RFC 4180) and Markdown table cells, a rough text-width estimate for layout, and the
// write-to-temporary-then-rename file output every report uses.
//
// Thread-compatible: pure functions, apart from WriteFile writing its file.
#ifndef GRAPHBANDIT_SIM_REPORT_FORMAT_H_
#define GRAPHBANDIT_SIM_REPORT_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace graphbandit::sim::report_internal {

// Shortest decimal form that reads back to the same double ("nan", "inf" for the others).
std::string ShortestDouble(double v);

// Pixel coordinate, 2 decimals, no "-0.00".
std::string Px(double v);

// Text content or attribute value for XML: escapes the five special characters and replaces
// the control characters XML 1.0 forbids.
std::string XmlEscape(absl::string_view text);

// A CSV field, quoted as in RFC 4180 when it contains commas, quotes or line breaks.
std::string CsvField(absl::string_view field);

// A Markdown table cell: '|' escaped, line breaks replaced by spaces.
std::string MarkdownEscape(absl::string_view text);

// Rough width of `text` in px for a sans-serif font of `size` px (UTF-8 continuation bytes
// do not count).
double TextWidth(absl::string_view text, double size);

// Writes `contents` to `<path>.tmp` and renames it to `path`; the temporary is removed on
// failure. Errors: the errno-derived status of the failing call.
absl::Status WriteFile(const std::string& path, const std::string& contents);

}  // namespace graphbandit::sim::report_internal

#endif  // GRAPHBANDIT_SIM_REPORT_FORMAT_H_
