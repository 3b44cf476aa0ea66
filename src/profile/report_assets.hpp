// SPDX-License-Identifier: Apache-2.0
#pragma once
// The HTML report's viewer (src/profile/report/), embedded at build time by cmake/ProfileReportAssets.cmake.

#include <string_view>

namespace tp::profile::assets {

std::string_view report_html();  // the page, with /*TP_REPORT_CSS*/, /*TP_REPORT_JS*/ and TP_REPORT_SNAPSHOT
std::string_view report_css();
std::string_view report_js();

}  // namespace tp::profile::assets
