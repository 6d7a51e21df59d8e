// The task metadata a report needs beyond the database (reports/report.h ReportContext::catalog),
// built from the generators: the MAD baselines and difficulty-setting counts, the names of the
// learnability settings.
#pragma once
#include "core/common.h"

namespace mnemo {

json report_catalog();

}  // namespace mnemo
