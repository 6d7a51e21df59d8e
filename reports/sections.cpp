// The one place that lists every built-in report section (one line each). Orders leave gaps:
// 0 header · 15 MQAR claims · 20 MQAR · 25 language modelling · 27 zero-shot commonsense · 30-50 long-context / MAD
// sections · 60 training curves · 80 runs table · 90 benchmarks.
#include "reports/report.h"

namespace mnemo {

void register_header_section();     // reports/section_header.cpp
void register_claims_section();     // reports/section_claims.cpp
void register_mqar_section();       // reports/section_mqar.cpp
void register_lm_section();         // reports/section_lm.cpp
void register_zeroshot_section();   // reports/section_zeroshot.cpp
void register_mad_section();        // reports/section_mad.cpp
void register_sniah_section();      // reports/section_sniah.cpp
void register_babilong_section();   // reports/section_babilong.cpp
void register_learnability_section();  // reports/section_learnability.cpp
void register_curves_section();     // reports/section_curves.cpp
void register_runs_section();       // reports/section_runs.cpp
void register_benchmark_section();  // reports/section_bench.cpp

void register_builtin_report_sections() {
  register_header_section();
  register_claims_section();
  register_mqar_section();
  register_lm_section();
  register_zeroshot_section();
  register_mad_section();
  register_sniah_section();
  register_babilong_section();
  register_learnability_section();
  register_curves_section();
  register_runs_section();
  register_benchmark_section();
}

}  // namespace mnemo
