// The papers' language-modelling perplexities: reports/papers/language_modelling.json, read into the typed view of
// lm_papers.h. References for reports/section_lm.cpp, never outputs.
#include "reports/lm_papers.h"

#include <cstdlib>
#include <set>
#include <string>

#include "reports/paper_tables.h"

namespace mnemo {

namespace {

struct LmTables : TextArena {
  std::vector<LmPaperBlock> blocks;
  std::vector<LmPaperRow> rows;
};

// A perplexity as printed ("31.52"): kept as text so the report shows the paper's digits.
const char* printed_number(LmTables& t, const TableObject& r, const char* key) {
  const std::string v = r.text(key);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x > 0)) r.fail(key, "value '" + v + "' is not a positive number as printed");
  return t.keep(v);
}

LmTables load_lm_tables() {
  LmTables t;
  const TableObject doc = paper_table("language_modelling");
  doc.allow_only({"what", "blocks"});
  std::set<std::string> ids;
  for (const TableObject& b : doc.objects("blocks")) {
    b.allow_only({"id", "label", "title", "corpus", "tokenizer", "params", "tokens", "context", "source", "rows"});
    LmPaperBlock block{};
    block.id = t.keep(b.text("id"));
    if (!ids.insert(block.id).second) b.fail("id", "'" + std::string(block.id) + "' is used twice");
    block.label = t.keep(b.text("label"));
    block.title = t.keep(b.text("title"));
    block.corpus = t.keep(b.text("corpus"));
    block.tokenizer = t.keep(b.text("tokenizer"));
    block.params = b.number("params");
    block.tokens = b.number("tokens");
    block.context = static_cast<int64_t>(b.number("context"));
    block.source = t.keep(b.text("source"));
    t.blocks.push_back(block);
    std::set<std::string> families;  // one row per (block, family): the report looks rows up by family
    for (const TableObject& r : b.objects("rows")) {
      r.allow_only({"family", "model", "wiki_ppl", "lmb_ppl", "source"});
      LmPaperRow row{};
      row.block = block.id;
      // null: a paper row with no mnemo family; kept as printed, never matched to a run.
      row.family = t.keep(r.optional_text("family").value_or(""));
      if (*row.family && !families.insert(row.family).second)
        r.fail("family", "'" + std::string(row.family) + "' has two rows in this block");
      row.row = t.keep(r.text("model"));
      row.wiki_ppl = printed_number(t, r, "wiki_ppl");
      row.lmb_ppl = printed_number(t, r, "lmb_ppl");
      row.source = t.keep(r.text("source"));
      t.rows.push_back(row);
    }
  }
  return t;
}

const LmTables& lm_tables() {
  static const LmTables tables = load_lm_tables();
  return tables;
}

}  // namespace

const std::vector<LmPaperBlock>& lm_paper_blocks() { return lm_tables().blocks; }
const std::vector<LmPaperRow>& lm_paper_rows() { return lm_tables().rows; }

}  // namespace mnemo
