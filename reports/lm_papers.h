// The papers' language-modelling tables (Wiki./LMB. perplexity; spec results.md §1.1, §2.1, §3.1, §3.2, §4.2) as
// data, copied exactly as printed: references for the language-modelling report section (reports/section_lm.cpp),
// never outputs.
#pragma once
#include <cstdint>
#include <vector>

namespace mnemo {

struct LmPaperBlock {
  const char *id, *label, *title, *corpus, *tokenizer;
  double params, tokens;
  int64_t context;
  const char* source;
};
struct LmPaperRow {
  const char *block, *family, *row, *wiki_ppl, *lmb_ppl, *source;
};

const std::vector<LmPaperBlock>& lm_paper_blocks();  // the papers' blocks (size / token budget / corpus)
const std::vector<LmPaperRow>& lm_paper_rows();      // one row per (block, family), values as printed

}  // namespace mnemo
