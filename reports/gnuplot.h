// A small gnuplot driver: write the data files and a script, run `gnuplot`, get a PNG (pngcairo)
// and an SVG of each figure. Used by every report section (MQAR, curves, benchmarks, S-NIAH,
// BABILong, MAD ...).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

// The files a figure was written to (absolute or relative to the caller's out_dir, as given).
struct Figure {
  std::string png, svg;
};

struct Series {
  std::string label;  // legend text (model names, not ids)
  std::vector<double> x, y;  // sorted by x when plotted; non-finite points are dropped
  // Model family (e.g. "gated_deltanet"): colour and marker from reports/family_style.h, the same in
  // every figure; several series of one family in a figure get different dash patterns. Empty: styled
  // by the series' order in the figure.
  std::string family;
};

struct Panel {
  std::string title;
  std::vector<Series> series;
  double log_y = -1;  // this panel's log y base (0 = linear); -1: the plot's log_y
  std::string xlabel, ylabel;  // this panel's axis names; empty: the plot's
};

// Multi-series line plot, one panel per group (multiplot grid when more than one panel). Every panel
// has the same plot-area size; legends never cover data: each row of panels has its legend in a
// column reserved at the right of the figure (one legend for the whole figure when every row shows
// the same series), sized from the longest label.
struct LinePlot {
  std::string name;  // file stem: <dir>/<name>.png, <dir>/<name>.svg
  std::string title, xlabel, ylabel;
  std::vector<Panel> panels;
  double log_x = 0, log_y = 0;  // logarithmic axis with this base (0 = linear), e.g. 2 or 10
  std::optional<double> ymin, ymax;
  bool share_y = false;            // one y range over every panel (small multiples)
  bool share_y_by_column = false;  // one y range per column of panels (e.g. one metric per column)
  bool keep_empty_panels = false;  // a panel without data leaves its grid cell blank (default: left out)
  bool points = true;       // linespoints (true) or lines
  int columns = 0;          // panels per row; 0 = min(panels, 3)
  int panel_width = 560, panel_height = 400;  // pixels per panel
  bool legend = true;                         // false: no legend
  bool key_on_last_panel_only = false;        // one legend for all panels (styles are shared)
};

// Horizontal bar chart of a ranking: bars sorted (best first, at the top), coloured by family
// style, the value printed at each bar's end, and a dashed vertical line at the chance level.
struct Bar {
  std::string label;   // y tic label (model name)
  std::string family;  // colour from reports/family_style.h ("" = grey)
  double value = 0;
  std::string text;    // printed at the bar's end; empty: the value with BarPlot::value_format
};

struct BarPanel {
  std::string title;
  std::vector<Bar> bars;  // any order; non-finite values are left out
  std::optional<double> chance;  // dashed vertical line
  std::string chance_label = "chance";
};

struct BarPlot {
  std::string name, title, xlabel;
  std::vector<BarPanel> panels;
  bool higher_is_better = true;  // sort descending (false: ascending, e.g. perplexity)
  std::optional<double> xmin, xmax;  // default: 0 .. largest value (and chance) + room for the text
  std::string value_format = "%.3f";  // printf format of the printed values
  int columns = 0;                    // panels per row; 0 = min(panels, 2)
  int panel_width = 520, bar_height = 22;  // pixels; the panel height follows the bar count
};

// Heatmap of a value matrix with row/column labels; one panel per matrix (e.g. per model),
// every panel sharing the labels and the colour range. Non-finite cells are left blank.
struct HeatmapPanel {
  std::string title;
  std::vector<std::vector<double>> values;  // [row][col]
};

struct Heatmap {
  std::string name, title, xlabel, ylabel;
  std::vector<std::string> row_labels, col_labels;  // rows drawn bottom-to-top in this order
  std::vector<HeatmapPanel> panels;
  std::optional<double> zmin, zmax;  // colour range (default: data range)
  bool annotate = true;               // print each value in its cell
  std::string value_format = "%.1f";  // gnuplot sprintf format of the annotations
  std::string palette = "defined (0 '#b2182b', 0.5 '#fddbc7', 1 '#2166ac')";  // low red, high blue
  int columns = 0;
  int cell_width = 56, cell_height = 36;  // pixels per cell (panel size follows)
};

// Quote text as a gnuplot single-quoted string ('' escapes a quote).
std::string gnuplot_quote(const std::string& text);

// true when `gnuplot` runs and offers the pngcairo and svg terminals.
bool gnuplot_available();

// Run gnuplot on a script file; throws Error naming the script and gnuplot's messages when it
// fails, or saying that gnuplot is not installed.
void run_gnuplot(const std::string& script_path);

// Write data + script under `dir` (created if needed) and render the figure. Throws Error if
// the plot has no finite data point or gnuplot fails.
Figure plot_lines(const LinePlot& plot, const std::string& dir);
Figure plot_heatmap(const Heatmap& map, const std::string& dir);
Figure plot_bars(const BarPlot& plot, const std::string& dir);

}  // namespace mnemo
