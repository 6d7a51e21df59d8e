#include "reports/small_multiples.h"

#include <algorithm>
#include <map>

#include "reports/family_style.h"

namespace mnemo {

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
