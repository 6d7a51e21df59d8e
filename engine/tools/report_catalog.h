// The task metadata a report needs beyond the database (reports/report.h ReportContext::catalog),
// built from the generators: the MAD baselines and difficulty-setting counts, the names of the
// learnability settings, the quickstart's protocol and the families it leaves out, and every registered family's
// report group, colour and variants.
#pragma once
#include "core/common.h"

namespace mnemo {

json report_catalog();

}  // namespace mnemo
