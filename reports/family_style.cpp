// The report's families: each one's (group, colour) as its registration declares it (handed in through the
// report's catalog), drawn with the palette and the group's marker.
#include "reports/family_style.h"

#include <algorithm>
#include <cmath>
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

// A family's argument that makes its runs models of their own in the report (runtime/registry.h ReportVariant).
struct VariantDef {
  std::string arg, label;
  json fallback;  // the family's default: a run at this value is the plain model
};

struct StyleTable {
  std::vector<GroupDef> groups = kGroups;
  std::vector<std::pair<std::string, FamilyStyle>> families;  // in declaration order
  std::map<std::string, std::vector<VariantDef>> variants;    // family -> its variants
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
    std::vector<VariantDef> variants;
    if (f.contains("variants")) {
      if (!f["variants"].is_array())
        throw Error("model family " + name + ": report \"variants\" must be an array, got " +
                    json_excerpt(f["variants"]));
      for (const json& v : f["variants"]) {
        if (!v.is_object() || !v.contains("arg") || !v["arg"].is_string() || !v.contains("label") ||
            !v["label"].is_string())
          throw Error("model family " + name + ": a report variant needs string fields arg and label, got " +
                      json_excerpt(v));
        variants.push_back({v["arg"], v["label"], v.value("default", json())});
      }
    }
    t.variants[name] = std::move(variants);
    FamilyStyle s{group, kPalette[size_t(c - kColourNames.begin())], g->point_type, true};
    auto same = std::find_if(t.families.begin(), t.families.end(), [&](const auto& e) { return e.first == name; });
    if (same != t.families.end()) same->second = s;
    else t.families.emplace_back(name, s);
  }
  table() = std::move(t);
}

FamilyStyle family_style(const std::string& family) {
  const std::string base = family_of_label(family);
  for (const std::string& wanted : {family, base})
    for (const auto& [name, style] : table().families)
      if (name == wanted) return style;
  FamilyStyle s;
  s.colour = kPalette[fnv1a(base) % kPalette.size()];  // a plugin's variants share its colour too
  s.group = "other";
  s.point_type = kOtherPointType;
  return s;
}

std::string family_of_label(const std::string& label) {
  return label.substr(0, std::min(label.find(" ("), label.find(" @ ")));
}

// A variant's value as the label prints it: strings bare, whole numbers without a decimal point (a decay time of
// 32.0 reads "32").
static std::string variant_value_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<int64_t>(x));
  }
  return value.dump();
}

std::string run_label(const json& config, const std::string& model, const std::vector<std::string>& details) {
  std::vector<std::string> parts;
  auto variants = table().variants.find(model);
  if (variants != table().variants.end() && config.is_object())
    for (const VariantDef& v : variants->second) {
      auto value = config.find(v.arg);
      if (value == config.end() || value->is_null() || *value == v.fallback) continue;
      // A switch set on reads as its label alone ("path_attn (forget gate)"); any other value follows the label.
      parts.push_back(*value == true ? v.label : v.label + " " + variant_value_text(*value));
    }
  parts.insert(parts.end(), details.begin(), details.end());
  std::string label = model;
  for (size_t i = 0; i < parts.size(); ++i) label += (i == 0 ? " (" : ", ") + parts[i];
  return parts.empty() ? label : label + ")";
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

}  // namespace mnemo
