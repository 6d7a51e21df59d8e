// Default locations of mnemo's outputs, all under out/ (never inside the source folders).
#pragma once

namespace mnemo {

inline constexpr const char* kDefaultDbPath = "out/mnemo.sqlite";     // the results database
inline constexpr const char* kDefaultReportDir = "out/report";        // report.md, report.html, figures/
inline constexpr const char* kDefaultRunsDir = "out/runs";            // run folders (checkpoints)

}  // namespace mnemo
