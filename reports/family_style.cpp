// The report's families: each one's (group, colour) as its registration declares it (handed in through the
// report's catalog), drawn with the palette and the group's marker.
#include "reports/family_style.h"

#include <algorithm>
#include <cstdint>
#include <map>

namespace mnemo {

namespace {

// Tableau 10 (blue, orange, green, red, purple, brown, pink, grey, olive, cyan), then black and gold.
const std::vector<std::string> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                           "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#e6ab02"};
const std::vector<std::string> kColourNames = {"blue",  "orange", "green", "red",  "purple", "brown",
                                               "pink",  "grey",   "olive", "cyan", "black",  "gold"};

struct GroupDef {
  std::string name;
  int point_type;
};

// The groups of the papers' comparisons, in display order, each with its marker (filled circle, square,
// up-triangle, diamond, down-triangle, pentagon). Within a group the colour tells families apart; across groups the
// marker does (bar charts have no marker: their bars are named).
const std::vector<GroupDef> kGroups = {{"attention", 7},     {"linear recurrent", 5}, {"deep test-time memory", 9},
                                       {"Atlas family", 13}, {"MoM / Lattice", 11},   {"hybrids", 15}};
// Markers for a group a registration introduces (open circle, triangles, ...), in order of appearance.
const std::vector<int> kSpareMarkers = {6, 8, 10, 12, 14, 1, 2, 3};
constexpr int kOtherPointType = 4;  // open square

struct StyleTable {
  std::vector<GroupDef> groups = kGroups;
  std::vector<std::pair<std::string, FamilyStyle>> families;  // in declaration order
};

StyleTable& table() {
  static StyleTable t;
  return t;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string colour_names() {
  std::string out;
  for (const std::string& n : kColourNames) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

void set_family_styles(const json& families) {
  StyleTable t;
  if (!families.is_array()) throw Error("report catalog: \"families\" must be an array, got " + json_excerpt(families));
  for (const json& f : families) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("group") ||
        !f["group"].is_string() || !f.contains("colour") || !f["colour"].is_string())
      throw Error("report catalog: a family entry needs string fields name, group and colour, got " + json_excerpt(f));
    const std::string name = f["name"], group = f["group"], colour = f["colour"];
    auto c = std::find(kColourNames.begin(), kColourNames.end(), colour);
    if (c == kColourNames.end())
      throw Error("model family " + name + ": report colour '" + colour + "' is not one of the palette's (" +
                  colour_names() + ")");
    auto g = std::find_if(t.groups.begin(), t.groups.end(), [&](const GroupDef& d) { return d.name == group; });
    if (g == t.groups.end()) {
      const size_t added = t.groups.size() - kGroups.size();
      t.groups.push_back({group, kSpareMarkers[added % kSpareMarkers.size()]});
      g = t.groups.end() - 1;
    }
    FamilyStyle s{group, kPalette[size_t(c - kColourNames.begin())], g->point_type, true};
    auto same = std::find_if(t.families.begin(), t.families.end(), [&](const auto& e) { return e.first == name; });
    if (same != t.families.end()) same->second = s;
    else t.families.emplace_back(name, s);
  }
  table() = std::move(t);
}

FamilyStyle family_style(const std::string& family) {
  for (const auto& [name, style] : table().families)
    if (name == family) return style;
  FamilyStyle s;
  s.colour = kPalette[fnv1a(family) % kPalette.size()];
  s.group = "other";
  s.point_type = kOtherPointType;
  return s;
}

std::vector<std::string> family_groups() {
  std::vector<std::string> groups;
  for (const GroupDef& d : table().groups) groups.push_back(d.name);
  groups.push_back("other");
  return groups;
}

std::vector<std::string> known_families() {
  std::vector<std::string> out;
  for (const GroupDef& g : table().groups)
    for (const auto& [name, style] : table().families)
      if (style.group == g.name) out.push_back(name);
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
