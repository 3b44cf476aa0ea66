// SPDX-License-Identifier: Apache-2.0
// The HTML memory report in a real browser: `tensorpool profile --out DIR` writes report.html, headless
// Chromium (Debian `chromium`, installed by scripts/install-deps) loads it from the file with no network, and
// the rendered DOM is checked against snapshot.json: one section per device, the summary figures, the peak
// marker, the peak breakdown (sorted through the page's #sort= link), the timeline's kinds, the segment map at
// the peak and the per-op high-water marks. A screenshot is saved (TP_REPORT_SCREENSHOT=FILE keeps a copy).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tensorpool/core/units.hpp"
#include "tools/support/cli_runner.hpp"

namespace {

namespace fs = std::filesystem;
using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;
using tp::cli::testing::run_cli;

fs::path chromium() {
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (fs::exists(candidate)) return candidate;
  }
  return {};
}

// Chromium's standard output (stderr, its D-Bus chatter in containers, is dropped).
std::string run_browser(const std::string& arguments) {
  // No sandbox (tests may run as root in a container), no GPU; the page needs no network.
  const std::string command = "timeout 60 '" + chromium().string() +
                              "' --headless --no-sandbox --disable-gpu --hide-scrollbars " + arguments + " 2>/dev/null";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  std::array<char, 4096> buffer{};
  std::size_t read = 0;
  while ((read = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), read);
  ::pclose(pipe);
  return output;
}

std::size_t count(const std::string& text, const std::regex& pattern) {
  return static_cast<std::size_t>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), pattern), std::sregex_iterator()));
}

class ReportBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
    if (chromium().empty())
      GTEST_SKIP() << "chromium is not installed: apt-get install chromium (scripts/install-deps)";
    directory_ = fs::temp_directory_path() / ("tp_report_browser_" + std::to_string(::getpid()));
    fs::remove_all(directory_);
    const CliRun run = run_cli("profile --devices sim:0,sim:1 --batch-size 64 --steps 4 --synthetic --out '" +
                               directory_.string() + "'");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    std::ifstream in(directory_ / "snapshot.json");
    snapshot_ = nlohmann::json::parse(in);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string dom(const std::string& fragment = "") {
    const std::string url = "file://" + (directory_ / "report.html").string() + fragment;
    return run_browser("--dump-dom '" + url + "'");
  }

  fs::path directory_;
  nlohmann::json snapshot_;
};

TEST_F(ReportBrowser, RendersEveryPanelWithTheSnapshotsNumbers) {
  const std::string page = dom("#sort=breakdown-0,5");
  ASSERT_NE(page.find("data-rendered=\"true\""), std::string::npos) << page.substr(0, 4000);
  EXPECT_EQ(page.find("data-render-error=\""), std::string::npos);
  const nlohmann::json& devices = snapshot_.at("devices");
  ASSERT_EQ(devices.size(), 3u);
  // Split the page into the devices' sections, in order.
  std::vector<std::string> sections;
  for (std::size_t at = page.find("<section"); at != std::string::npos;) {
    const std::size_t next = page.find("<section", at + 1);
    sections.push_back(page.substr(at, next == std::string::npos ? std::string::npos : next - at));
    at = next;
  }
  ASSERT_EQ(sections.size(), devices.size());
  for (std::size_t index = 0; index < devices.size(); ++index) {
    const nlohmann::json& device = devices[index];
    const std::string& section = sections[index];
    const std::string id = std::to_string(index);
    SCOPED_TRACE(device.at("device").get<std::string>());
    EXPECT_NE(section.find("data-device=\"" + device.at("device").get<std::string>() + "\""), std::string::npos);
    // Summary: the figures as integers and as text.
    for (const char* field : {"bytes_in_use", "peak_bytes_in_use", "bytes_reserved", "peak_bytes_requested"}) {
      const auto bytes = device.at("stats").at(field).get<std::size_t>();
      const std::string cell = "data-field=\"" + std::string(field) + "\" data-value=\"" + std::to_string(bytes) +
                               "\">" + tp::format_bytes(bytes) + "</td>";
      EXPECT_NE(section.find(cell), std::string::npos) << cell;
    }
    // The peak marker on the timeline, and the timeline's areas by kind.
    const auto peak = device.at("peak").at("in_use_bytes").get<std::size_t>();
    EXPECT_NE(section.find("id=\"peak-marker-" + id + "\" data-bytes=\"" + std::to_string(peak) + "\""),
              std::string::npos);
    EXPECT_NE(section.find("peak " + tp::format_bytes(peak)), std::string::npos);
    // The peak breakdown: one row per tensor live at the peak.
    const std::size_t tensors = device.at("peak").at("tensors").size();
    const std::size_t table_start = section.find("id=\"breakdown-" + id + "\"");
    ASSERT_NE(table_start, std::string::npos);
    const std::string table = section.substr(table_start, section.find("</table>", table_start) - table_start);
    EXPECT_EQ(count(table, std::regex("<tr>")), tensors + 1);
    // Segment map at the peak: one bar block per block.
    std::size_t blocks = 0;
    for (const nlohmann::json& segment : device.at("peak").at("segments")) blocks += segment.at("blocks").size();
    EXPECT_EQ(count(section, std::regex("class=\"block\"")), blocks);
    EXPECT_NE(section.find("id=\"fragmentation-" + id + "\""), std::string::npos);
    const std::size_t ops = device.at("op_high_water").size();
    const std::size_t high_water = section.find("id=\"high-water-" + id + "\"");
    ASSERT_NE(high_water, std::string::npos);
    EXPECT_EQ(count(section.substr(high_water, section.find("</table>", high_water) - high_water), std::regex("<tr>")),
              ops + 1);
  }
  // sim:0: parameters, optimizer state and the step's arena are stacked on the timeline.
  for (const char* kind : {"parameter", "optimizer_state", "step_arena"}) {
    EXPECT_NE(sections[0].find("data-kind=\"" + std::string(kind) + "\""), std::string::npos) << kind;
  }
  // #sort=breakdown-0,5 sorted sim:0's breakdown by allocated bytes, descending.
  const std::size_t start = sections[0].find("id=\"breakdown-0\"");
  const std::string table = sections[0].substr(start, sections[0].find("</table>", start) - start);
  EXPECT_NE(table.find("sorted-desc"), std::string::npos);
  const std::regex allocated("data-field=\"allocated_bytes\" data-value=\"([0-9]+)\"");
  std::vector<std::size_t> values;
  for (auto it = std::sregex_iterator(table.begin(), table.end(), allocated); it != std::sregex_iterator(); ++it) {
    values.push_back(std::stoull((*it)[1]));
  }
  ASSERT_FALSE(values.empty());
  EXPECT_TRUE(std::is_sorted(values.rbegin(), values.rend())) << "not descending";
}

TEST_F(ReportBrowser, SavesAScreenshot) {
  const fs::path shot = directory_ / "report.png";
  run_browser("--window-size=1280,2000 --screenshot='" + shot.string() + "' 'file://" +
              (directory_ / "report.html").string() + "'");
  ASSERT_TRUE(fs::exists(shot)) << "chromium wrote no screenshot";
  EXPECT_GT(fs::file_size(shot), 10000u);  // a rendered page, not a blank one
  std::ifstream in(shot, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  if (const char* keep = std::getenv("TP_REPORT_SCREENSHOT"))
    fs::copy_file(shot, keep, fs::copy_options::overwrite_existing);
}

}  // namespace
