// The papers' language-modelling tables (Wiki./LMB. perplexity; arXiv:2501.00663, arXiv:2504.13173, arXiv:2505.23735,
// arXiv:2502.13685), copied exactly as printed into reports/papers/language_modelling.json (reports/paper_tables.h):
// references for the language-modelling report section (reports/section_lm.cpp), never outputs.
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
  const char *block, *family, *row, *wiki_ppl, *lmb_ppl, *source;  // family "": no mnemo family for this row
};

const std::vector<LmPaperBlock>& lm_paper_blocks();  // the papers' blocks (size / token budget / corpus)
const std::vector<LmPaperRow>& lm_paper_rows();      // one row per (block, family), values as printed

}  // namespace mnemo
