// Results database, sweep- and eval-facing writes: eval rows that replace a cell's earlier value,
// and sweep cell leases (table `leases`, see results/db.h).
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cmath>

#include "results/db.h"
#include "results/statement.h"

namespace mnemo {

using detail::Statement;

void ResultsDB::put_evals(const std::vector<EvalRow>& rows, bool keep_previous) {
  if (rows.empty()) return;
  // A cell: same model, task, metric and setting, of the same run (or, untied, the same checkpoint);
  // rows of the same checkpoint written before runs were tied (run_id NULL) belong to it too.
  const char* cell =
      " FROM evals WHERE model = ?1 AND task = ?2 AND metric = ?3 AND setting_json = ?4 AND "
      "(run_id = ?5 OR (run_id IS NULL AND checkpoint = ?6))";
  auto bind_cell = [](Statement& s, const EvalRow& e) {
    s.bind(1, e.model).bind(2, e.task).bind(3, e.metric);
    s.bind(4, e.setting_json.empty() ? std::string("{}") : e.setting_json);
    s.bind(5, e.run_id).bind(6, e.checkpoint);
  };
  transaction([&] {
    std::vector<EvalRow> out = rows;
    if (keep_previous) {
      Statement count(db_, path_, (std::string("SELECT COUNT(*)") + cell).c_str());
      for (EvalRow& e : out) {
        bind_cell(count, e);
        const int64_t earlier = count.step() ? count.integer(0) : 0;
        count.reset();
        if (earlier == 0) continue;
        json details = json::object();
        try {
          if (!e.details_json.empty()) details = json::parse(e.details_json);
        } catch (const json::exception&) {
        }
        if (!details.is_object()) details = json{{"details", details}};
        details["kept_previous"] = earlier;
        e.details_json = details.dump();
      }
    } else {
      Statement del(db_, path_, (std::string("DELETE") + cell).c_str());
      for (const EvalRow& e : out) {
        bind_cell(del, e);
        del.run();
        del.reset();
      }
    }
    add_evals(out);
  });
}

namespace {
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

std::optional<Lease> ResultsDB::lease(const std::string& config_hash) const {
  Statement s(db_, path_,
              "SELECT config_hash, sweep, owner_host, acquired_at, owner_pid, heartbeat FROM leases "
              "WHERE config_hash = ?1");
  s.bind(1, config_hash);
  if (!s.step()) return std::nullopt;
  Lease l;
  l.config_hash = s.text(0);
  l.sweep = s.text(1);
  l.owner_host = s.text(2);
  l.acquired_at = s.text(3);
  l.owner_pid = s.integer(4);
  l.heartbeat = s.real(5);
  return l;
}

void ResultsDB::put_lease(const Lease& l) {
  transaction([&] {
    Statement s(db_, path_,
                "INSERT OR REPLACE INTO leases (config_hash, sweep, owner_pid, owner_host, acquired_at, "
                "heartbeat) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    s.bind(1, l.config_hash).bind(2, l.sweep).bind(3, l.owner_pid).bind(4, l.owner_host);
    s.bind(5, l.acquired_at.empty() ? now_iso8601() : l.acquired_at).bind(6, l.heartbeat).run();
  });
}

LeaseClaim ResultsDB::claim_cell(const std::string& config_hash, const std::string& sweep, int64_t pid,
                                 const std::string& host, double stale_after_s) {
  LeaseClaim out = LeaseClaim::claimed;
  transaction([&] {  // BEGIN IMMEDIATE: claimers of one database take turns
    if (completed_run_with_hash(config_hash)) {
      out = LeaseClaim::completed;
      return;
    }
    if (auto l = lease(config_hash)) {
      const bool mine = l->owner_pid == pid && l->owner_host == host;
      const bool gone = l->owner_host == host && l->owner_pid > 0 &&
                        ::kill(static_cast<pid_t>(l->owner_pid), 0) != 0 && errno == ESRCH;
      const bool stale = std::isnan(l->heartbeat) || unix_now() - l->heartbeat > stale_after_s;
      if (!mine && !gone && !stale) {
        out = LeaseClaim::held;
        return;
      }
    }
    put_lease({config_hash, sweep, host, now_iso8601(), pid, unix_now()});
  });
  return out;
}

bool ResultsDB::refresh_lease(const std::string& config_hash, int64_t pid, const std::string& host) {
  bool held = false;
  transaction([&] {
    Statement s(db_, path_,
                "UPDATE leases SET heartbeat = ?1 WHERE config_hash = ?2 AND owner_pid = ?3 AND owner_host = ?4");
    s.bind(1, unix_now()).bind(2, config_hash).bind(3, pid).bind(4, host).run();
    held = sqlite3_changes(db_) > 0;
  });
  return held;
}

void ResultsDB::release_lease(const std::string& config_hash, int64_t pid, const std::string& host) {
  transaction([&] {
    Statement s(db_, path_, "DELETE FROM leases WHERE config_hash = ?1 AND owner_pid = ?2 AND owner_host = ?3");
    s.bind(1, config_hash).bind(2, pid).bind(3, host).run();
  });
}

}  // namespace mnemo
