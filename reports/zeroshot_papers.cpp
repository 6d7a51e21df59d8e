// The papers' zero-shot commonsense tables: reports/papers/zeroshot_commonsense.json (Titans Table 1, Miras Table 2,
// Atlas main and appendix tables, MoM Table 3, Lattice Table 2, Hope Table 1, PaTH Table 2, FoX Table 1, Mamba-3
// Table 1), read into the typed view of zeroshot_papers.h.
// References for reports/section_zeroshot.cpp, never outputs.
#include "reports/zeroshot_papers.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "reports/paper_tables.h"

namespace mnemo {

namespace {

// The column keys a block may use (mapped to evals by the section).
const std::set<std::string> kColumnKeys = {"wiki_ppl", "lmb_ppl", "lmb_acc", "piqa", "hella", "wino",
                                           "arc_e",    "arc_c",   "siqa",    "boolq", "csqa"};

bool zs_paper_block_in(const std::vector<ZsPaperBlock>& blocks, const std::string& id) {
  for (const ZsPaperBlock& b : blocks)
    if (id == b.id) return true;
  return false;
}

struct ZsTables : TextArena {
  std::vector<ZsPaperBlock> blocks;
  std::vector<ZsPaperRow> rows;
  std::vector<ZsPaperNote> notes;
};

std::string join_with(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

void read_row(ZsTables& t, const TableObject& r, const ZsPaperBlock& block, size_t n_columns) {
  r.allow_only({"model", "families", "copied_from", "cells", "avg", "note"});
  ZsPaperRow row{};
  row.block = block.id;
  row.model = t.keep(r.text("model"));
  row.families = t.keep(join_with(r.texts("families"), ","));
  row.copied_from = t.keep(r.optional_text("copied_from"));
  const std::vector<std::string> cells = r.texts("cells");
  if (cells.size() != n_columns)
    r.fail("cells", "has " + std::to_string(cells.size()) + " values for the block's " + std::to_string(n_columns) +
                        " columns");
  for (size_t i = 0; i < cells.size(); ++i) {
    char* end = nullptr;
    std::strtod(cells[i].c_str(), &end);
    if (cells[i].empty() || *end != '\0') r.fail("cells", "value '" + cells[i] + "' is not a number as printed");
    row.cells[i] = t.keep(cells[i]);
  }
  row.avg = t.keep(r.optional_text("avg"));
  if (block.prints_avg != (row.avg != nullptr))
    r.fail("avg", block.prints_avg ? "is missing (the block prints an Avg.)" : "is given but the block prints no Avg.");
  t.rows.push_back(row);
  if (auto note = r.optional_text("note")) t.notes.push_back({block.id, row.model, t.keep(*note)});
}

ZsTables load_zs_tables() {
  ZsTables t;
  const TableObject doc = paper_table("zeroshot_commonsense");
  doc.allow_only({"what", "columns", "blocks"});
  for (const TableObject& b : doc.objects("blocks")) {
    b.allow_only({"id", "paper", "table", "source", "block", "columns", "prints_avg", "params", "tokens", "context",
                  "corpus", "tokenizer", "note", "rows"});
    ZsPaperBlock block{};
    block.id = t.keep(b.text("id"));
    if (zs_paper_block_in(t.blocks, block.id)) b.fail("id", "'" + std::string(block.id) + "' is used twice");
    block.paper = t.keep(b.text("paper"));
    block.table = t.keep(b.text("table"));
    block.section = t.keep(b.text("source"));
    block.block = t.keep(b.text("block"));
    const std::vector<std::string> columns = b.texts("columns");
    if (columns.empty() || columns.size() > static_cast<size_t>(kZsMaxCells))
      b.fail("columns", "must list 1 to " + std::to_string(kZsMaxCells) + " column keys");
    for (const std::string& c : columns)
      if (!kColumnKeys.count(c)) b.fail("columns", "key '" + c + "' is not one of " + join_with({kColumnKeys.begin(), kColumnKeys.end()}, ", "));
    block.columns = t.keep(join_with(columns, " "));
    block.prints_avg = b.flag("prints_avg");
    block.params = b.number("params");
    block.tokens = b.number("tokens");
    block.context = static_cast<int64_t>(b.number("context"));
    block.corpus = t.keep(b.text("corpus"));
    block.tokenizer = t.keep(b.text("tokenizer"));
    block.note = t.keep(b.optional_text("note"));
    t.blocks.push_back(block);
    for (const TableObject& r : b.objects("rows")) read_row(t, r, block, columns.size());
  }
  // A copied row names its source block (or "gdn": the Gated DeltaNet paper, not stored here).
  for (const ZsPaperRow& r : t.rows)
    if (r.copied_from && std::string(r.copied_from) != "gdn" && !zs_paper_block_in(t.blocks, r.copied_from))
      throw Error(doc.file() + ": row '" + r.model + "' of block " + r.block + " is copied_from the unknown block '" +
                  r.copied_from + "'");
  return t;
}

const ZsTables& zs_tables() {
  static const ZsTables tables = load_zs_tables();
  return tables;
}

}  // namespace

const std::vector<ZsPaperBlock>& zs_paper_blocks() { return zs_tables().blocks; }
const std::vector<ZsPaperRow>& zs_paper_rows() { return zs_tables().rows; }
// Known problems of single rows (docs/reproducing.md#rows-copied-between-papers,
// docs/reproducing.md#arithmetic-problems-in-the-papers-tables) that zs_recompute does not flag by itself: the rows'
// "note" fields.
const std::vector<ZsPaperNote>& zs_paper_notes() { return zs_tables().notes; }

const ZsPaperBlock* zs_paper_block(const std::string& id) {
  for (const ZsPaperBlock& b : zs_paper_blocks())
    if (id == b.id) return &b;
  return nullptr;
}

const ZsPaperRow* zs_paper_row(const std::string& block, const std::string& model) {
  for (const ZsPaperRow& r : zs_paper_rows())
    if (block == r.block && model == r.model) return &r;
  return nullptr;
}

ZsRecomputed zs_recompute(const ZsPaperRow& row) {
  auto decimals = [](const char* s) {
    const char* dot = std::strchr(s, '.');
    return dot ? static_cast<int>(std::strlen(dot + 1)) : 0;
  };
  ZsRecomputed r;
  const ZsPaperBlock* block = zs_paper_block(row.block);
  if (!block) return r;
  const ZsPaperRow* src = row.copied_from ? zs_paper_row(row.copied_from, row.model) : nullptr;
  std::istringstream keys(block->columns);
  std::string key;
  double sum = 0;
  int k = 0, own_decimals = 9;
  for (int i = 0; keys >> key && i < kZsMaxCells && row.cells[i]; ++i) {
    if (key.size() < 4 || key.compare(key.size() - 4, 4, "_ppl") != 0) {
      sum += std::strtod((src ? src : &row)->cells[i], nullptr), ++k;
      own_decimals = std::min(own_decimals, decimals(row.cells[i]));
    }
    double half = 0.5 * std::pow(10.0, -decimals(row.cells[i]));
    if (src && std::fabs(std::strtod(row.cells[i], nullptr) - std::strtod(src->cells[i], nullptr)) > half + 1e-9)
      r.cells.push_back(i);
  }
  r.avg = k ? sum / k : NAN;
  double tol = own_decimals <= 1 ? 0.05 : 0.01;
  r.avg_differs = row.avg && std::fabs(std::strtod(row.avg, nullptr) - r.avg) > tol + 1e-9;
  return r;
}

}  // namespace mnemo
