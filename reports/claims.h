// The papers' MQAR claims judged on the runs of a results database (reports/section_claims.cpp), for the
// report's claims section and for the plain-text table `mnemo quickstart` prints at its end.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "results/db.h"

namespace mnemo {

struct ClaimVerdict {
  int64_t d_model = 0;
  std::string claim, source, evidence, verdict;  // evidence: "our numbers" ("" when not testable)
};

// Every claim, per d_model present among the MQAR runs (in increasing d_model); empty without MQAR runs.
std::vector<ClaimVerdict> mqar_claim_verdicts(ResultsDB& db);

// The verdicts as a plain-text table (claim, ours, verdict), columns wrapped to fit `width` characters, one block
// per d_model headed by how many testable claims agree.
std::string claims_text_table(const std::vector<ClaimVerdict>& verdicts, int width = 110);

}  // namespace mnemo
