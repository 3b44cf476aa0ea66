// SPDX-License-Identifier: Apache-2.0
// html_report(): the viewer page with its CSS, JS and the snapshot JSON inlined: no file or network access.
// "</" in the JSON is written "<\/" (the same string to a JSON parser) so no tensor name can end the script.
#include <string>

#include "profile/report_assets.hpp"
#include "tensorpool/profile/exporters.hpp"

namespace tp::profile {
namespace {

void replace_once(std::string& text, std::string_view marker, std::string_view value) {
  const std::size_t at = text.find(marker);
  if (at != std::string::npos) text.replace(at, marker.size(), value);
}

}  // namespace

std::string html_report(const MemorySnapshot& snapshot) {
  std::string json = snapshot_json(snapshot);
  std::string safe;
  safe.reserve(json.size());
  for (std::size_t index = 0; index < json.size(); ++index) {
    if (json[index] == '<' && index + 1 < json.size() && json[index + 1] == '/') {
      safe += "<\\";
      continue;
    }
    safe += json[index];
  }
  std::string page(assets::report_html());
  replace_once(page, "/*TP_REPORT_CSS*/", assets::report_css());
  replace_once(page, "TP_REPORT_SNAPSHOT", safe);
  replace_once(page, "/*TP_REPORT_JS*/", assets::report_js());
  return page;
}

}  // namespace tp::profile
