#include "engine/tools/op_profile.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <unordered_map>

#include "core/common.h"
#include "core/torch_compat.h"
#include "runtime/device.h"

namespace mnemo {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

namespace {

// CUDA runtime / driver calls (cudaLaunchKernel, cuLaunchKernel, cudaMemcpyAsync, ...): host events that are
// not operators.
bool is_runtime_call(const std::string& name) {
  if (name.rfind("cuda", 0) == 0) return true;
  return name.size() > 2 && name[0] == 'c' && name[1] == 'u' && std::isupper(static_cast<unsigned char>(name[2]));
}

std::vector<OpTime> sorted(const std::map<std::string, OpTime>& by_name) {
  std::vector<OpTime> out;
  for (const auto& [name, t] : by_name) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

void add(std::map<std::string, OpTime>& by_name, const std::string& name, double ms) {
  OpTime& t = by_name[name];
  t.name = name;
  t.calls += 1;
  t.total_ms += ms;
}

struct HostEvent {
  std::string name;
  uint64_t start_ns, duration_ns;
  uint64_t children_ns = 0;
};

// Self time = span - direct children's spans, nesting by time on each thread.
void host_self_times(std::unordered_map<uint64_t, std::vector<HostEvent>>& by_thread,
                     std::map<std::string, OpTime>& out) {
  for (auto& [thread, events] : by_thread) {
    std::sort(events.begin(), events.end(), [](const HostEvent& a, const HostEvent& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.duration_ns > b.duration_ns;
    });
    std::vector<size_t> open;
    for (size_t i = 0; i < events.size(); ++i) {
      while (!open.empty()) {
        const HostEvent& top = events[open.back()];
        if (top.start_ns + top.duration_ns > events[i].start_ns) break;
        open.pop_back();
      }
      if (!open.empty()) events[open.back()].children_ns += events[i].duration_ns;
      open.push_back(i);
    }
    for (const auto& e : events) {
      uint64_t self = e.duration_ns > e.children_ns ? e.duration_ns - e.children_ns : 0;
      add(out, e.name, self / 1e6);
    }
  }
}

}  // namespace

OpProfiler::OpProfiler(const torch::Device& device) : device_(device) {}

OpProfiler::~OpProfiler() {
  if (!running_) return;
  try {
    prof::disableProfiler();
  } catch (...) {
  }
}

void OpProfiler::resume() {
  if (running_) throw Error("bench --profile: a profiled section is already open");
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (device_.is_cuda()) activities.insert(impl::ActivityType::CUDA);
  impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  try {
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  } catch (const std::exception& e) {
    throw Error(std::string("bench --profile: the PyTorch profiler could not start: ") + e.what());
  }
  running_ = true;
}

void OpProfiler::pause() {
  if (!running_) throw Error("bench --profile: no profiled section is open");
  synchronize(device_);
  running_ = false;
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::unordered_map<uint64_t, std::string> op_by_correlation;
  std::unordered_map<uint64_t, std::vector<HostEvent>> host_by_thread;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CPU) continue;
    std::string name = e.name();
    if (is_runtime_call(name)) {
      tables_.cuda_runtime.calls += 1;
      tables_.cuda_runtime.total_ms += torch_compat::event_duration_ns(e) / 1e6;
      continue;
    }
    if (e.correlationId() > 0) op_by_correlation[e.correlationId()] = name;
    host_by_thread[e.startThreadId()].push_back(
        {name, torch_compat::event_start_ns(e), torch_compat::event_duration_ns(e)});
  }
  host_self_times(host_by_thread, host_);
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    double ms = torch_compat::event_duration_ns(e) / 1e6;
    auto op = op_by_correlation.find(e.linkedCorrelationId());
    add(device_by_op_, op == op_by_correlation.end() ? "(no launching operator)" : op->second, ms);
    add(kernels_, e.name(), ms);
  }
  if (!first_) first_ = std::move(result);
}

const OpProfileTables& OpProfiler::tables() {
  tables_.host_self = sorted(host_);
  tables_.device_by_op = sorted(device_by_op_);
  tables_.device_kernels = sorted(kernels_);
  tables_.host_total_ms = tables_.device_total_ms = 0;
  for (const auto& o : tables_.host_self) tables_.host_total_ms += o.total_ms;
  for (const auto& o : tables_.device_kernels) tables_.device_total_ms += o.total_ms;
  return tables_;
}

void OpProfiler::save_trace(const std::string& path) {
  if (!first_) throw Error("bench --profile-trace: nothing was profiled");
  std::string tmp = path + ".tmp";
  try {
    first_->save(tmp);
  } catch (const std::exception& e) {
    std::filesystem::remove(tmp);
    throw Error("bench --profile-trace " + path + ": " + e.what());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("bench --profile-trace: cannot write " + path + ": " + ec.message());
}

void TimedSection::before(int64_t i, int64_t warmup) {
  if (!hook_ || open_ || i < warmup) return;
  synchronize(device_);
  hook_(true);
  open_ = true;
}

void TimedSection::end() {  // the hook's pause() waits for the device
  if (!open_) return;
  open_ = false;
  hook_(false);
}

namespace {

void table(std::ostringstream& s, const std::string& title, const std::vector<OpTime>& rows, double total_ms,
           int top) {
  char line[256];
  std::snprintf(line, sizeof line, "%s (total %.1f ms)\n  %-60s %9s %11s %7s\n", title.c_str(), total_ms,
                "name", "calls", "ms", "share");
  s << line;
  int shown = 0;
  for (const auto& r : rows) {
    if (shown++ >= top) break;
    std::string name = r.name.size() > 60 ? r.name.substr(0, 57) + "..." : r.name;
    std::snprintf(line, sizeof line, "  %-60s %9lld %11.2f %6.1f%%\n", name.c_str(),
                  static_cast<long long>(r.calls), r.total_ms, total_ms > 0 ? 100.0 * r.total_ms / total_ms : 0.0);
    s << line;
  }
  if (static_cast<int>(rows.size()) > top) s << "  ... " << rows.size() - top << " more\n";
}

}  // namespace

std::string format_profile(const OpProfileTables& t, int top) {
  std::ostringstream s;
  s << "\nprofile (PyTorch profiler; the timed repetitions only, their times above include its overhead)\n";
  table(s, "host self time by operator", t.host_self, t.host_total_ms, top);
  if (t.cuda_runtime.calls > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "  + %lld CUDA runtime calls, %.1f ms (inside the operators' spans above)\n",
                  static_cast<long long>(t.cuda_runtime.calls), t.cuda_runtime.total_ms);
    s << line;
  }
  if (!t.device_kernels.empty()) {
    table(s, "device kernel time by launching operator", t.device_by_op, t.device_total_ms, top);
    table(s, "device kernels", t.device_kernels, t.device_total_ms, top);
  }
  return s.str();
}

}  // namespace mnemo
