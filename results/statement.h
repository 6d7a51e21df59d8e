// Internal to results/: a prepared SQLite statement bound by position, whose errors name the
// database file. Not part of the results API (use results/db.h).
#pragma once
#include <sqlite3.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/common.h"

namespace mnemo::detail {

inline std::string sqlite_message(sqlite3* db) { return db ? sqlite3_errmsg(db) : "out of memory"; }

// A prepared statement bound by position (1-based); errors name the database file.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK)
      throw Error("results database " + path_ + ": cannot prepare statement (" +
                  sqlite_message(db) + "): " + sql);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& v) {
    check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    check(sqlite3_bind_int64(stmt_, i, v));
    return *this;
  }
  Statement& bind(int i, double v) {  // NaN is stored as NULL (read back as NaN)
    check(std::isnan(v) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, v));
    return *this;
  }
  Statement& bind_null(int i) {
    check(sqlite3_bind_null(stmt_, i));
    return *this;
  }

  // true while a row is available; throws on any error.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error("results database " + path_ + ": " + sqlite_message(db_));
  }
  void run() {
    while (step()) {
    }
  }
  // Re-arm a statement for the next row of a batch.
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  std::string text(int c) const {
    const unsigned char* p = sqlite3_column_text(stmt_, c);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(stmt_, c)))
             : std::string();
  }
  int64_t integer(int c) const { return sqlite3_column_int64(stmt_, c); }
  double real(int c) const {
    return sqlite3_column_type(stmt_, c) == SQLITE_NULL ? std::numeric_limits<double>::quiet_NaN()
                                                        : sqlite3_column_double(stmt_, c);
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK)
      throw Error("results database " + path_ + ": cannot bind parameter (" +
                  sqlite_message(db_) + ")");
  }
  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace mnemo::detail
