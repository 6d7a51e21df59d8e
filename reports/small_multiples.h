// Small multiples: a figure's series split into panels by their family's group (reports/family_style.h), so that
// no panel holds more than a few lines.
#pragma once
#include <string>
#include <vector>

#include "reports/gnuplot.h"

namespace mnemo {

// Small multiples: the series split by the group of their `family` (groups in family_groups()
// order; series without a family form a last group ""), a group with more than `max_lines` series
// split into near-equal parts. Each part keeps the series' order.
struct SeriesGroup {
  std::string group;  // the group's name, with " (1/2)" etc. when it was split
  std::vector<Series> series;
};
std::vector<SeriesGroup> split_by_family_group(const std::vector<Series>& series, size_t max_lines = 8);

// Small multiples of a figure's panels (e.g. one panel per setting): when some panel has more than
// `max_lines` series, every panel is split by family group into a grid with one row per group and
// one column per original panel ("<panel title> · <group>"); plot.columns is set to the column count
// and plot.keep_empty_panels keeps the grid aligned; each column shares its y range. A figure with a
// single panel becomes one panel per group on `single_columns` columns, all on one y range. More
// than two rows of panels: panels at most 320 px high; several columns: at most 470 px wide. Returns
// true when it split.
bool split_panels_by_group(LinePlot& plot, size_t max_lines = 8, int single_columns = 2);

}  // namespace mnemo
