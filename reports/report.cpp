// Report section registry, report.md / report.html writer and shared formatting helpers.
#include "reports/report.h"
#include "reports/family_style.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>

#include "core/atomic_file.h"

namespace mnemo {

namespace fs = std::filesystem;

namespace {

struct SectionEntry {
  std::string name;
  int order = 0;
  int64_t sequence = 0;
  ReportSection fn;
};

std::vector<SectionEntry>& section_table() {
  static std::vector<SectionEntry> table;
  return table;
}

void ensure_builtin_sections() {
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_report_sections(); });
}

std::vector<SectionEntry> sorted_sections() {
  ensure_builtin_sections();
  std::vector<SectionEntry> s = section_table();
  std::stable_sort(s.begin(), s.end(), [](const SectionEntry& a, const SectionEntry& b) {
    return a.order != b.order ? a.order < b.order : a.sequence < b.sequence;
  });
  return s;
}

void write_file(const fs::path& path, const std::string& text) { write_file_atomic(path.string(), text); }

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Inline Markdown: `code`, **bold**, [text](url); everything else escaped.
std::string inline_html(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '|' || s[i + 1] == '*' || s[i + 1] == '`')) {
      out += html_escape(std::string(1, s[i + 1]));
      i += 2;
    } else if (s[i] == '`') {
      size_t end = s.find('`', i + 1);
      if (end == std::string::npos) end = s.size();
      out += "<code>" + html_escape(s.substr(i + 1, end - i - 1)) + "</code>";
      i = end + 1;
    } else if (s.compare(i, 2, "**") == 0 && s.find("**", i + 2) != std::string::npos) {
      size_t end = s.find("**", i + 2);
      out += "<strong>" + inline_html(s.substr(i + 2, end - i - 2)) + "</strong>";
      i = end + 2;
    } else if (s[i] == '[') {
      size_t close = s.find("](", i);
      size_t paren = close == std::string::npos ? std::string::npos : s.find(')', close);
      if (paren == std::string::npos) {
        out += "[";
        ++i;
        continue;
      }
      out += "<a href=\"" + html_escape(s.substr(close + 2, paren - close - 2)) + "\">" +
             inline_html(s.substr(i + 1, close - i - 1)) + "</a>";
      i = paren + 1;
    } else {
      out += html_escape(std::string(1, s[i]));
      ++i;
    }
  }
  return out;
}

std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cur;
  std::string t = line;
  // strip the outer pipes
  size_t a = t.find('|'), b = t.rfind('|');
  if (a == std::string::npos) return {t};
  t = b > a ? t.substr(a + 1, b - a - 1) : t.substr(a + 1);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '\\' && i + 1 < t.size() && t[i + 1] == '|') {
      cur += "\\|";
      ++i;
    } else if (t[i] == '|') {
      cells.push_back(cur);
      cur.clear();
    } else {
      cur += t[i];
    }
  }
  cells.push_back(cur);
  for (auto& c : cells) {
    size_t s = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
    c = s == std::string::npos ? "" : c.substr(s, e - s + 1);
  }
  return cells;
}

// A table cell that reads as a number: "0.971", "-3", "1.2e-3", "1.23M", "12.5 %", "2.0x", "14 750", or a number
// with a short note in parentheses ("97.1 (3e-3, 2 runs)"). Markdown emphasis and code marks are ignored.
bool numeric_cell(std::string text) {
  text.erase(std::remove_if(text.begin(), text.end(), [](char c) { return c == '*' || c == '`'; }), text.end());
  static const std::regex number(
      R"(^[-+]?([0-9][0-9 ,]*[0-9]|[0-9])?(\.[0-9]+)?([eE][-+]?[0-9]+)?( ?(%|K|M|B|G|x|s|ms|MB|GB|tok/s))?$)");
  static const std::regex with_note(R"(^[-+]?[0-9][0-9.eE+-]*( ?(%|K|M|B|G|x|s))? \([^)]*\)$)");
  if (text.empty() || text.find_first_of("0123456789") == std::string::npos) return false;
  return std::regex_match(text, number) || (text.size() <= 40 && std::regex_match(text, with_note));
}

// A cell that says "no value" and fits either kind of column.
bool placeholder_cell(const std::string& text) {
  return text.empty() || text == "-" || text == "n/a" || text == "—" || text == "–";
}

// An anchor id from a heading's text: lower-case letters and digits, other runs of characters as '-'.
std::string heading_id(const std::string& text) {
  std::string id;
  for (unsigned char c : text) {
    if (std::isalnum(c))
      id += static_cast<char>(std::tolower(c));
    else if (!id.empty() && id.back() != '-')
      id += '-';
  }
  while (!id.empty() && id.back() == '-') id.pop_back();
  return id.empty() ? "section" : id;
}

// report.html's style: a readable column, figures at their natural size up to the column width, tables
// with a header band and zebra rows, a table of contents.
const char* const kReportCss =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#1a1a1a;"
    "background:#fff;line-height:1.5;margin:0}\n"
    "main{max-width:1100px;margin:0 auto;padding:1.5em 1.5em 4em}\n"
    "h1{font-size:1.9em;border-bottom:2px solid #ddd;padding-bottom:.2em}\n"
    "h2{font-size:1.45em;margin-top:2em;border-bottom:1px solid #e4e4e4;padding-bottom:.15em}\n"
    "h3{font-size:1.15em;margin-top:1.6em}\n"
    "a{color:#1f5fa8}\n"
    "nav.toc{background:#f7f8fa;border:1px solid #e2e5ea;border-radius:6px;padding:.6em 1.2em;margin:1em 0 2em}\n"
    "nav.toc ul{margin:.3em 0;padding-left:1.3em}nav.toc li{margin:.1em 0}\n"
    "figure{margin:1.2em 0;text-align:center}\n"
    "figure img{max-width:100%;height:auto;display:inline-block}\n"
    "table{border-collapse:collapse;margin:1em 0;font-size:.88em;display:block;overflow-x:auto;max-width:100%}\n"
    "th,td{border:1px solid #d6d9de;padding:4px 9px;text-align:left;vertical-align:top;overflow-wrap:break-word;"
    "max-width:36em}\n"
    "th.num,td.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}\n"
    "thead th{background:#eef1f5;position:sticky;top:0}\n"
    "table.sortable thead th{cursor:pointer;user-select:none}\n"
    "table.sortable thead th:hover{background:#dde3ec}\n"
    "th.asc::after{content:' \\25B2';font-size:.75em}th.desc::after{content:' \\25BC';font-size:.75em}\n"
    "tbody tr:nth-child(even){background:#f6f8fa}tbody tr:hover{background:#eaf2fb}\n"
    "pre{background:#f6f6f6;padding:8px;overflow-x:auto}code{font-size:.92em}\n";

// Click a header to sort its table by that column (numbers by value, "1.2K"/"3.4M" included; text
// otherwise; empty and "n/a"/"-" cells last); a second click reverses. Without script the tables keep
// the report's order.
const char* const kSortScript =
    "(function(){\n"
    "function key(t){t=t.trim();var m=t.match(/^[-+]?[0-9]*\\.?[0-9]+(e[-+]?[0-9]+)?/i);\n"
    "  if(!m)return null;var v=parseFloat(m[0]),s=t.charAt(m[0].length);\n"
    "  return v*(s==='K'?1e3:s==='M'?1e6:s==='B'?1e9:1);}\n"
    "document.querySelectorAll('table.sortable').forEach(function(table){\n"
    "  var ths=table.querySelectorAll('thead th');\n"
    "  ths.forEach(function(th,col){th.title='sort by this column';th.addEventListener('click',function(){\n"
    "    var body=table.tBodies[0];if(!body)return;var asc=!th.classList.contains('asc');\n"
    "    ths.forEach(function(h){h.classList.remove('asc','desc');});th.classList.add(asc?'asc':'desc');\n"
    "    var rows=Array.prototype.slice.call(body.rows);\n"
    "    rows.sort(function(a,b){var x=a.cells[col]?a.cells[col].textContent:'',y=b.cells[col]?b.cells[col].textContent:'';\n"
    "      var kx=key(x),ky=key(y);if(kx===null&&ky===null)return asc?x.localeCompare(y):y.localeCompare(x);\n"
    "      if(kx===null)return 1;if(ky===null)return -1;return asc?kx-ky:ky-kx;});\n"
    "    rows.forEach(function(r){body.appendChild(r);});});});});\n"
    "})();\n";

bool is_separator_row(const std::string& line) {
  return line.find("---") != std::string::npos &&
         line.find_first_not_of("|-: ") == std::string::npos;
}

}  // namespace

ReportContext::ReportContext(ResultsDB& database, std::string out, json task_catalog)
    : db(database), catalog(std::move(task_catalog)), out_dir(std::move(out)) {
  figure_dir = (fs::path(out_dir) / "figures").string();
  if (catalog.contains("families")) set_family_styles(catalog["families"]);
}

std::string ReportContext::relative(const std::string& path) const {
  std::error_code ec;
  fs::path rel = fs::relative(fs::path(path), fs::path(out_dir), ec);
  return ec || rel.empty() ? path : rel.generic_string();
}

void ReportContext::add_figure(const Figure& fig, const std::string& caption) {
  md << "![" << caption << "](" << relative(fig.png) << ")\n\n";
  md << "Figure: " << caption << " (vector graphics: [" << fs::path(fig.svg).filename().string()
     << "](" << relative(fig.svg) << "))\n\n";
}

void register_report_section(const std::string& name, int order, ReportSection fn) {
  auto& table = section_table();
  static int64_t sequence = 0;
  for (auto& e : table)
    if (e.name == name) {
      e.order = order;
      e.fn = std::move(fn);
      return;
    }
  table.push_back({name, order, sequence++, std::move(fn)});
}

std::vector<std::string> report_section_names() {
  std::vector<std::string> names;
  for (const auto& e : sorted_sections()) names.push_back(e.name);
  return names;
}

std::string write_report(ResultsDB& db, const std::string& out_dir, const json& catalog) {
  if (out_dir.empty()) throw Error("report: empty output directory");
  std::error_code ec;
  fs::create_directories(fs::path(out_dir) / "figures", ec);
  if (ec) throw Error("report: cannot create " + out_dir + "/figures (" + ec.message() + ")");
  ReportContext ctx(db, out_dir, catalog);
  for (const SectionEntry& s : sorted_sections()) {
    try {
      s.fn(ctx);
    } catch (const Error& e) {
      throw Error("report section '" + s.name + "': " + e.what());
    }
  }
  fs::path md_path = fs::path(out_dir) / "report.md";
  std::string markdown = ctx.md.str();
  write_file(md_path, markdown);
  write_file(fs::path(out_dir) / "report.html", markdown_to_html(markdown, "mnemo report", out_dir));
  return md_path.string();
}

std::string markdown_to_html(const std::string& markdown, const std::string& title,
                             const std::string& base_dir) {
  std::ostringstream html;
  std::vector<std::pair<int, std::pair<std::string, std::string>>> headings;  // level, (id, inner HTML)
  std::set<std::string> ids;
  size_t toc_at = std::string::npos;  // after the first h1 (else at the top)
  std::istringstream in(markdown);
  std::string line;
  std::vector<std::string> table, paragraph, list;
  bool in_code = false;

  auto flush_paragraph = [&] {
    if (paragraph.empty()) return;
    html << "<p>";
    for (size_t i = 0; i < paragraph.size(); ++i) html << (i ? "\n" : "") << inline_html(paragraph[i]);
    html << "</p>\n";
    paragraph.clear();
  };
  auto flush_list = [&] {
    if (list.empty()) return;
    html << "<ul>\n";
    for (const auto& item : list) html << "<li>" << inline_html(item) << "</li>\n";
    html << "</ul>\n";
    list.clear();
  };
  auto flush_table = [&] {
    if (table.empty()) return;
    bool header = table.size() > 1 && is_separator_row(table[1]);
    // A column is numeric (right-aligned, kept on one line) when its body holds a number and nothing but numbers
    // and placeholders; any other column is text (left-aligned, wrapped).
    std::vector<int> numbers, others;  // per column: cells of each kind in the body
    for (size_t r = header ? 2 : 0; r < table.size(); ++r) {
      const auto cells = table_cells(table[r]);
      if (cells.size() > numbers.size()) numbers.resize(cells.size()), others.resize(cells.size());
      for (size_t c = 0; c < cells.size(); ++c)
        if (numeric_cell(cells[c])) ++numbers[c];
        else if (!placeholder_cell(cells[c])) ++others[c];
    }
    html << (header ? "<table class=\"sortable\">\n" : "<table>\n");
    for (size_t r = 0; r < table.size(); ++r) {
      if (header && r == 1) continue;
      const char* tag = header && r == 0 ? "th" : "td";
      if (header && r == 0) html << "<thead>";
      if (header && r == 2) html << "<tbody>\n";
      html << "<tr>";
      const auto cells = table_cells(table[r]);
      for (size_t c = 0; c < cells.size(); ++c) {
        const bool numeric = c < numbers.size() && numbers[c] > 0 && others[c] == 0;
        html << "<" << tag << (numeric ? " class=\"num\"" : "") << ">" << inline_html(cells[c]) << "</" << tag << ">";
      }
      html << "</tr>" << (header && r == 0 ? "</thead>" : "") << "\n";
    }
    html << (header && table.size() > 2 ? "</tbody></table>\n" : "</table>\n");
    table.clear();
  };
  auto flush_all = [&] {
    flush_paragraph();
    flush_list();
    flush_table();
  };

  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      flush_all();
      html << (in_code ? "</code></pre>\n" : "<pre><code>");
      in_code = !in_code;
      continue;
    }
    if (in_code) {
      html << html_escape(line) << "\n";
      continue;
    }
    if (line.empty()) {
      flush_all();
    } else if (line[0] == '#') {
      flush_all();
      size_t level = line.find_first_not_of('#');
      if (level == std::string::npos) level = line.size();
      level = std::min<size_t>(level, 6);
      std::string text = line.substr(std::min(line.size(), level + 1));
      const std::string inner = inline_html(text);
      std::string id = heading_id(text);
      for (int k = 2; ids.count(id); ++k) id = heading_id(text) + "-" + std::to_string(k);
      ids.insert(id);
      html << "<h" << level << " id=\"" << id << "\">" << inner << "</h" << level << ">\n";
      if (level == 1 && toc_at == std::string::npos) toc_at = html.tellp();
      if (level == 2 || level == 3) headings.push_back({static_cast<int>(level), {id, inner}});
    } else if (line[0] == '|') {
      flush_paragraph();
      flush_list();
      table.push_back(line);
    } else if (line.rfind("- ", 0) == 0 || line.rfind("* ", 0) == 0) {
      flush_paragraph();
      flush_table();
      list.push_back(line.substr(2));
    } else if (line.rfind("![", 0) == 0 && line.find("](") != std::string::npos) {
      flush_all();
      size_t close = line.find("](");
      size_t paren = line.find(')', close);
      std::string caption = line.substr(2, close - 2);
      std::string src = line.substr(close + 2, paren == std::string::npos ? std::string::npos
                                                                         : paren - close - 2);
      if (src.size() > 4 && src.compare(src.size() - 4, 4, ".png") == 0) {
        std::string svg = src.substr(0, src.size() - 4) + ".svg";
        if (fs::exists(fs::path(base_dir) / svg)) src = svg;
      }
      html << "<figure><img src=\"" << html_escape(src) << "\" alt=\"" << html_escape(caption)
           << "\" loading=\"eager\"></figure>\n";
    } else {
      flush_list();
      flush_table();
      paragraph.push_back(line);
    }
  }
  flush_all();
  if (in_code) html << "</code></pre>\n";
  std::string body = html.str();
  std::ostringstream toc;
  if (!headings.empty()) {
    toc << "<nav class=\"toc\"><strong>Contents</strong>\n<ul>\n";
    bool nested = false;
    for (size_t i = 0; i < headings.size(); ++i) {
      const auto& [level, h] = headings[i];
      if (level == 3 && !nested) toc << "<ul>\n", nested = true;
      if (level == 2 && nested) toc << "</ul></li>\n", nested = false;
      else if (level == 2 && i > 0) toc << "</li>\n";
      toc << "<li><a href=\"#" << h.first << "\">" << h.second << "</a>" << (level == 3 ? "</li>\n" : "");
    }
    toc << (nested ? "</ul></li>\n" : "</li>\n") << "</ul></nav>\n";
  }
  body.insert(toc_at == std::string::npos ? 0 : toc_at, toc.str());
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
         html_escape(title) + "</title>\n<style>\n" + kReportCss + "</style>\n</head><body>\n<main>\n" + body +
         "</main>\n<script>\n" + kSortScript + "</script>\n</body></html>\n";
}

std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows) {
  auto escape = [](const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '|')
        out += "\\|";
      else if (c == '\n')
        out += ' ';
      else
        out += c;
    }
    return out;
  };
  std::ostringstream t;
  t << "|";
  for (const auto& h : header) t << " " << escape(h) << " |";
  t << "\n|";
  for (size_t i = 0; i < header.size(); ++i) t << (i == 0 ? " --- |" : " ---: |");
  t << "\n";
  for (const auto& row : rows) {
    t << "|";
    for (size_t i = 0; i < header.size(); ++i) t << " " << (i < row.size() ? escape(row[i]) : "") << " |";
    t << "\n";
  }
  return t.str();
}

std::string format_number(double v, int precision) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3))
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string format_count(double v) {
  if (std::isnan(v)) return "n/a";
  char buf[64];
  double a = std::fabs(v);
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", v / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (a >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fK", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

json run_config(const ResultsDB& db, const RunInfo& run) {
  try {
    json c = json::parse(run.config_json.empty() ? std::string("{}") : run.config_json);
    if (!c.is_object()) throw Error("not a JSON object");
    return c;
  } catch (const std::exception& e) {
    throw Error("results database " + db.path() + ": run " + std::to_string(run.id) +
                " has an invalid config_json (" + e.what() + ")");
  }
}

std::optional<double> config_number(const json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_number()) return it->get<double>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return v;
  }
  return std::nullopt;
}

std::string config_string(const json& config, const std::string& key, const std::string& fallback) {
  auto it = config.find(key);
  return it != config.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace mnemo
