#include "reports/paper_tables.h"

#include <memory>
#include <map>
#include <mutex>

namespace mnemo {

TableObject::TableObject(const json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {
  if (!value.is_object()) throw Error(file_ + ": " + (path_.empty() ? "the file" : path_) + " must be an object");
}

std::string TableObject::where(const std::string& key) const {
  return file_ + ": " + (path_.empty() ? key : path_ + "." + key);
}

void TableObject::fail(const std::string& key, const std::string& what) const { throw Error(where(key) + " " + what); }

const json& TableObject::field(const char* key) const {
  auto it = value_->find(key);
  if (it == value_->end()) fail(key, "is missing");
  return *it;
}

std::string TableObject::text(const char* key) const {
  const json& v = field(key);
  if (!v.is_string()) fail(key, "must be a string, got " + json_excerpt(v));
  return v.get<std::string>();
}

std::optional<std::string> TableObject::optional_text(const char* key) const {
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail(key, "must be a string or null, got " + json_excerpt(*it));
  return it->get<std::string>();
}

double TableObject::number(const char* key) const {
  const json& v = field(key);
  if (!v.is_number()) fail(key, "must be a number, got " + json_excerpt(v));
  return v.get<double>();
}

bool TableObject::flag(const char* key) const {
  const json& v = field(key);
  if (!v.is_boolean()) fail(key, "must be true or false, got " + json_excerpt(v));
  return v.get<bool>();
}

std::vector<std::string> TableObject::texts(const char* key) const {
  const json& v = field(key);
  if (!v.is_array()) fail(key, "must be an array of strings, got " + json_excerpt(v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) fail(std::string(key) + "[" + std::to_string(i) + "]", "must be a string, got " + json_excerpt(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::vector<TableObject> TableObject::objects(const char* key) const {
  const json& v = field(key);
  if (!v.is_array()) fail(key, "must be an array of objects, got " + json_excerpt(v));
  std::vector<TableObject> out;
  const std::string base = path_.empty() ? key : path_ + "." + key;
  for (size_t i = 0; i < v.size(); ++i) out.emplace_back(v[i], file_, base + "[" + std::to_string(i) + "]");
  return out;
}

void TableObject::allow_only(std::initializer_list<const char*> keys) const {
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    bool known = false;
    for (const char* k : keys) known = known || it.key() == k;
    if (!known) fail(it.key(), "is not a field of this table (a typo?)");
  }
}

TableObject paper_table(const std::string& name) {
  // Parsed once per process (strict parser: duplicate keys are an error, core/common.h parse_json_text).
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<json>> parsed;
  const std::string path = "reports/papers/" + name + ".json";
  std::lock_guard<std::mutex> lock(mutex);
  auto it = parsed.find(path);
  if (it == parsed.end()) {
    const EmbeddedFile* found = nullptr;
    for (const EmbeddedFile& f : paper_table_files())
      if (path == f.path) found = &f;
    if (!found) throw Error("no paper table " + path + " is built into this binary");
    it = parsed.emplace(path, std::make_unique<json>(parse_json_text(found->text, path))).first;
  }
  return TableObject(*it->second, path, "");
}

}  // namespace mnemo
