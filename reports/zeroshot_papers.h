// The papers' zero-shot commonsense tables (arXiv:2501.00663, arXiv:2504.13173, arXiv:2505.23735, arXiv:2502.13685,
// arXiv:2504.05646), copied exactly as printed into reports/papers/zeroshot_commonsense.json (reports/paper_tables.h):
// references for the zero-shot report section (reports/section_zeroshot.cpp), never outputs.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace mnemo {

// Column keys, mapped to evals (task, metric) by the section: wiki_ppl lmb_ppl lmb_acc piqa hella wino arc_e arc_c
// siqa boolq csqa.
struct ZsPaperBlock {
  const char *id, *paper, *table, *section, *block;  // block: "340M params / 15B tokens"
  const char* columns;                               // column keys in the paper's order, space-separated
  bool prints_avg;  // false: the paper prints no Avg. (Miras); the section recomputes one for ranking
  double params, tokens;
  int64_t context;
  const char *corpus, *tokenizer;
  const char* note;  // nullptr or a caveat printed under the block
};

constexpr int kZsMaxCells = 10;

struct ZsPaperRow {
  const char *block, *model;       // model as printed (∗ = hybrid)
  const char* families;            // the mnemo families the row stands for, comma-separated ("" = none)
  const char* copied_from;         // nullptr: the paper's own row; else the source block id (same model name), "gdn"
                                   // = the Gated DeltaNet paper (not stored)
  const char* cells[kZsMaxCells];  // printed values in the block's column order, Avg. excluded
  const char* avg;                 // printed Avg.; nullptr when none is printed
};

struct ZsPaperNote {
  const char *block, *model, *text;
};

const std::vector<ZsPaperBlock>& zs_paper_blocks();
const std::vector<ZsPaperRow>& zs_paper_rows();
const std::vector<ZsPaperNote>& zs_paper_notes();
const ZsPaperBlock* zs_paper_block(const std::string& id);  // nullptr if none
const ZsPaperRow* zs_paper_row(const std::string& block, const std::string& model);

// The paper's average by its own rule (the mean of the block's accuracy columns: every key but *_ppl), computed from
// the source's cells for a copied row (docs/reproducing.md#arithmetic-problems-in-the-papers-tables). avg_differs: the printed Avg. differs by more than 0.01
// (0.05 for one-decimal cells); cells: indices of a copied row's cells that differ from the source beyond the copy's
// rounding.
struct ZsRecomputed {
  double avg = NAN;
  bool avg_differs = false;
  std::vector<int> cells;
};
ZsRecomputed zs_recompute(const ZsPaperRow& row);

}  // namespace mnemo
