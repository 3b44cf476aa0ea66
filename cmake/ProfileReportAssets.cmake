# SPDX-License-Identifier: Apache-2.0
# The memory profiler's HTML viewer (src/profile/report/*) is kept as ordinary source files and embedded into
# the library at build time, so report.html files are self-contained and the viewer is edited as HTML/JS/CSS.
set(TP_REPORT_DIR ${PROJECT_SOURCE_DIR}/src/profile/report)
set(TP_REPORT_ASSETS ${TP_REPORT_DIR}/report.html ${TP_REPORT_DIR}/report.css ${TP_REPORT_DIR}/report.js)
set(TP_REPORT_SOURCE ${PROJECT_BINARY_DIR}/generated/profile_report_assets.cpp)
add_custom_command(
  OUTPUT ${TP_REPORT_SOURCE}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/generated
  COMMAND ${CMAKE_COMMAND} -DOUTPUT=${TP_REPORT_SOURCE} -DNAMESPACE=tp::profile::assets
          "-DASSETS=report_html=${TP_REPORT_DIR}/report.html\;report_css=${TP_REPORT_DIR}/report.css\;report_js=${TP_REPORT_DIR}/report.js"
          -P ${PROJECT_SOURCE_DIR}/cmake/EmbedAssets.cmake
  DEPENDS ${TP_REPORT_ASSETS} ${PROJECT_SOURCE_DIR}/cmake/EmbedAssets.cmake
  COMMENT "Embedding the memory report viewer")
target_sources(tensorpool PRIVATE ${TP_REPORT_SOURCE})
