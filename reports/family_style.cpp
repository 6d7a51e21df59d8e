// The family -> (group, colour, marker) table of the report's figures.
#include "reports/family_style.h"

#include <algorithm>
#include <cstdint>
#include <map>

namespace mnemo {

namespace {

// Tableau 10 (blue, orange, green, red, purple, brown, pink, grey, olive, cyan), then black and gold.
const std::vector<std::string> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                           "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#e6ab02"};
enum Colour { kBlue, kOrange, kGreen, kRed, kPurple, kBrown, kPink, kGrey, kOlive, kCyan, kBlack, kGold };

struct GroupDef {
  const char* name;
  int point_type;  // filled circle, square, up-triangle, diamond, down-triangle, pentagon
  std::vector<std::pair<const char*, Colour>> families;
};

// Within a group every family has its own palette colour; across groups the marker tells them apart (bar
// charts have no marker: their bars are named). Black is the attention baseline's alone.
const std::vector<GroupDef>& table() {
  static const std::vector<GroupDef> t = {
      {"attention", 7, {{"transformer", kBlack}, {"swa", kGrey}}},
      {"linear recurrent",
       5,
       {{"linear_attn", kOlive},
        {"linear_attn_elu", kOrange},
        {"retnet", kBrown},
        {"gla", kPink},
        {"deltanet", kCyan},
        {"gated_deltanet", kGreen},
        {"mamba2", kPurple}}},
      {"deep test-time memory",
       9,
       {{"ttt_linear", kBlue},
        {"ttt_mlp", kOrange},
        {"titans_lmm", kRed},
        {"titans_mag", kGreen},
        {"titans_mac", kPurple},
        {"moneta", kBrown},
        {"yaad", kPink},
        {"memora", kGrey},
        {"dla", kOlive},
        {"swla", kCyan},
        {"omeganet", kGold}}},
      {"Atlas family",
       13,
       {{"atlas", kRed},
        {"atlas_pp", kOrange},
        {"atlas_mag", kGreen},
        {"atlas_mac", kPurple},
        {"atlas_mal", kBrown},
        {"deep_transformer", kBlue},
        {"swdt", kCyan},
        {"dot", kPink}}},
      {"MoM / Lattice",
       11,
       {{"mom", kBlue}, {"mom_hybrid", kCyan}, {"lattice_dec", kOrange}, {"lattice_dot", kPurple}}},
      {"hybrids", 15, {{"samba", kOrange}, {"gdn_h1", kBlue}, {"gdn_h2", kCyan}, {"titans_mal", kRed}}},
  };
  return t;
}

constexpr int kOtherPointType = 4;  // open square

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

FamilyStyle family_style(const std::string& family) {
  static const std::map<std::string, FamilyStyle> known = [] {
    std::map<std::string, FamilyStyle> m;
    for (const GroupDef& g : table())
      for (const auto& [name, colour] : g.families) m[name] = {g.name, kPalette[colour], g.point_type, true};
    return m;
  }();
  auto it = known.find(family);
  if (it != known.end()) return it->second;
  FamilyStyle s;
  s.colour = kPalette[fnv1a(family) % kPalette.size()];
  s.group = "other";
  s.point_type = kOtherPointType;
  // Variants of the MoM and Lattice families (a plugin's lattice_xyz) join their group.
  if (starts_with(family, "lattice_") || starts_with(family, "mom_")) {
    for (const GroupDef& g : table())
      if (std::string(g.name) == "MoM / Lattice") s.group = g.name, s.point_type = g.point_type;
  }
  return s;
}

const std::vector<std::string>& family_groups() {
  static const std::vector<std::string> groups = [] {
    std::vector<std::string> g;
    for (const GroupDef& d : table()) g.push_back(d.name);
    g.push_back("other");
    return g;
  }();
  return groups;
}

std::vector<std::string> known_families() {
  std::vector<std::string> out;
  for (const GroupDef& g : table())
    for (const auto& f : g.families) out.push_back(f.first);
  return out;
}

const std::vector<std::string>& style_palette() { return kPalette; }

std::vector<SeriesGroup> split_by_family_group(const std::vector<Series>& series, size_t max_lines) {
  if (max_lines == 0) max_lines = 1;
  std::vector<std::string> order = family_groups();
  order.push_back("");  // series without a family
  std::map<std::string, std::vector<Series>> by_group;
  for (const Series& s : series) by_group[s.family.empty() ? "" : family_style(s.family).group].push_back(s);
  std::vector<SeriesGroup> out;
  for (const std::string& g : order) {
    auto it = by_group.find(g);
    if (it == by_group.end()) continue;
    const std::vector<Series>& members = it->second;
    const size_t parts = (members.size() + max_lines - 1) / max_lines;
    for (size_t p = 0, begin = 0; p < parts; ++p) {
      const size_t size = members.size() / parts + (p < members.size() % parts ? 1 : 0);
      SeriesGroup part;
      part.group = g;
      if (parts > 1) part.group += " (" + std::to_string(p + 1) + "/" + std::to_string(parts) + ")";
      part.series.assign(members.begin() + begin, members.begin() + begin + size);
      begin += size;
      out.push_back(std::move(part));
    }
  }
  return out;
}

bool split_panels_by_group(LinePlot& plot, size_t max_lines, int single_columns) {
  bool crowded = false;
  for (const Panel& p : plot.panels) crowded = crowded || p.series.size() > max_lines;
  if (!crowded) return false;
  std::vector<std::vector<SeriesGroup>> split;
  std::vector<std::string> rows;  // group parts in order of first appearance (groups are in display order)
  for (const Panel& p : plot.panels) {
    split.push_back(split_by_family_group(p.series, max_lines));
    for (const SeriesGroup& g : split.back())
      if (std::find(rows.begin(), rows.end(), g.group) == rows.end()) rows.push_back(g.group);
  }
  const std::vector<std::string>& order = family_groups();
  auto rank = [&](const std::string& part) {
    const std::string base = part.substr(0, part.find(" ("));
    return std::find(order.begin(), order.end(), base) - order.begin();
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  std::vector<Panel> out;
  for (const std::string& row : rows)
    for (size_t c = 0; c < plot.panels.size(); ++c) {
      Panel p;
      const std::string group = row.empty() ? "other series" : row;
      p.title = plot.panels[c].title.empty() ? group : plot.panels[c].title + " · " + group;
      p.log_y = plot.panels[c].log_y;
      p.xlabel = plot.panels[c].xlabel;
      p.ylabel = plot.panels[c].ylabel;
      for (const SeriesGroup& g : split[c])
        if (g.group == row) p.series = g.series;
      out.push_back(std::move(p));
    }
  const bool single = plot.panels.size() == 1;
  plot.columns = single ? single_columns : static_cast<int>(plot.panels.size());
  plot.keep_empty_panels = !single;
  // Small multiples compare on one scale: a column is one original panel (one quantity), a single
  // panel's groups share its scale.
  if (!plot.share_y) (single ? plot.share_y : plot.share_y_by_column) = true;
  const size_t grid_rows = (out.size() + plot.columns - 1) / plot.columns;
  if (grid_rows > 2) plot.panel_height = std::min(plot.panel_height, 320);
  if (plot.columns > 1) plot.panel_width = std::min(plot.panel_width, 470);  // nearer a page's width
  plot.panels = std::move(out);
  return true;
}

}  // namespace mnemo
