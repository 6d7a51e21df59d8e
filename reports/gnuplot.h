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
};

struct Panel {
  std::string title;
  std::vector<Series> series;
};

// Multi-series line plot, one panel per group (multiplot grid when more than one panel).
struct LinePlot {
  std::string name;  // file stem: <dir>/<name>.png, <dir>/<name>.svg
  std::string title, xlabel, ylabel;
  std::vector<Panel> panels;
  double log_x = 0, log_y = 0;  // logarithmic axis with this base (0 = linear), e.g. 2 or 10
  std::optional<double> ymin, ymax;
  bool points = true;       // linespoints (true) or lines
  int columns = 0;          // panels per row; 0 = min(panels, 3)
  int panel_width = 560, panel_height = 400;  // pixels per panel
  std::string key = "outside right top";     // gnuplot `set key` argument
  bool key_on_last_panel_only = false;        // one legend for all panels (styles are shared)
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

}  // namespace mnemo
