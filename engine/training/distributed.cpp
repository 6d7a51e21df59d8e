// c10d process groups for data-parallel training (engine/training/distributed.h).
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1  // the c10d headers hide ProcessGroupGloo unless the build says it has Gloo
#endif
#include "engine/training/distributed.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if __has_include(<gloo/config.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define MNEMO_HAS_GLOO 1
#else
#define MNEMO_HAS_GLOO 0
#endif
#if defined(MNEMO_WITH_CUDA) && __has_include(<nccl.h>)
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define MNEMO_HAS_NCCL 1
#else
#define MNEMO_HAS_NCCL 0
#endif
#include <unistd.h>

#include <torch/csrc/autograd/function_hook.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "core/common.h"
#include "core/parse_int.h"
#include "core/process.h"
#include "core/system_info.h"
#include "core/torch_compat.h"

namespace mnemo {

#if MNEMO_C10D_HAS_BACKEND_CLASS
using C10dGroup = c10d::Backend;
#else
using C10dGroup = c10d::ProcessGroup;
#endif

namespace {

std::string env_or(const std::map<std::string, std::string>& env, const std::string& key, const std::string& dflt) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? dflt : it->second;
}

int env_int(const std::map<std::string, std::string>& env, const std::string& key, int lo, int hi) {
  const std::string v = env.at(key);
  const auto n = parse_whole_int(v);
  if (!n || *n < lo || *n > hi)
    throw Error("environment variable " + key + "=" + v + " is not an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return static_cast<int>(*n);
}

bool has(const std::map<std::string, std::string>& env, const std::string& key) {
  auto it = env.find(key);
  return it != env.end() && !it->second.empty();
}

// The one-line text of an exception from c10d (c10::Error carries a backtrace after the message).
std::string first_line(const std::exception& e) {
  std::string s = e.what();
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) s = ce->what_without_backtrace();
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

std::string seconds_text(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", t.count() / 1000.0);
  return buf;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first top-level element (commas inside brackets belong to a range list).
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    if (nodelist[i] == ']') --depth;
    if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  const std::string first = nodelist.substr(0, end);
  const auto lb = first.find('['), rb = first.find(']');
  if (lb == std::string::npos) return first;
  if (rb == std::string::npos || rb < lb) throw Error("SLURM_JOB_NODELIST '" + nodelist + "' has an unclosed '['");
  std::string range = first.substr(lb + 1, rb - lb - 1);
  range = range.substr(0, range.find(','));  // "03-05" of "03-05,07"
  range = range.substr(0, range.find('-'));  // "03": the padding is kept
  return first.substr(0, lb) + range + first.substr(rb + 1);
}

DistEnv dist_env_from(const std::map<std::string, std::string>& env) {
  DistEnv d;
  const bool torchrun = has(env, "RANK") || has(env, "WORLD_SIZE");
  if (torchrun) {
    if (!has(env, "WORLD_SIZE")) throw Error("environment: RANK is set but WORLD_SIZE is not (torchrun sets both)");
    if (!has(env, "RANK")) throw Error("environment: WORLD_SIZE is set but RANK is not (torchrun sets both)");
    d.world_size = env_int(env, "WORLD_SIZE", 1, 1 << 20);
    d.rank = env_int(env, "RANK", 0, 1 << 20);
    if (d.rank >= d.world_size)
      throw Error("environment: RANK=" + std::to_string(d.rank) + " is outside [0, WORLD_SIZE=" +
                  std::to_string(d.world_size) + ")");
    d.local_rank = has(env, "LOCAL_RANK") ? env_int(env, "LOCAL_RANK", 0, 1 << 20) : d.rank;
    d.source = "torchrun";
  } else if (has(env, "SLURM_NTASKS") && has(env, "SLURM_PROCID") &&
             env_int(env, "SLURM_NTASKS", 1, 1 << 20) > 1) {
    d.world_size = env_int(env, "SLURM_NTASKS", 1, 1 << 20);
    d.rank = env_int(env, "SLURM_PROCID", 0, d.world_size - 1);
    d.local_rank = has(env, "SLURM_LOCALID") ? env_int(env, "SLURM_LOCALID", 0, 1 << 20) : 0;
    const std::string nodes = env_or(env, "SLURM_JOB_NODELIST", env_or(env, "SLURM_NODELIST", ""));
    if (!has(env, "MASTER_ADDR") && nodes.empty())
      throw Error("environment: SLURM_NTASKS > 1 but neither MASTER_ADDR nor SLURM_JOB_NODELIST is set");
    d.master_addr = has(env, "MASTER_ADDR") ? env.at("MASTER_ADDR") : first_slurm_host(nodes);
    d.source = "slurm";
  }
  if (d.source != "none") {
    if (has(env, "MASTER_ADDR")) d.master_addr = env.at("MASTER_ADDR");
    if (has(env, "MASTER_PORT")) d.master_port = env_int(env, "MASTER_PORT", 1, 65535);
    if (d.world_size > 1 && d.source == "torchrun" && (!has(env, "MASTER_ADDR") || !has(env, "MASTER_PORT")))
      throw Error("environment: WORLD_SIZE=" + std::to_string(d.world_size) +
                  " needs MASTER_ADDR and MASTER_PORT (the rendezvous of rank 0)");
  }
  return d;
}

DistEnv dist_env_from_process() {
  std::map<std::string, std::string> env;
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
                        "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
    if (const char* v = std::getenv(k)) env[k] = v;
  return dist_env_from(env);
}

class ProcessGroupHandle {
 public:
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<C10dGroup> group;
  std::vector<std::pair<int64_t, std::string>> peers;  // rank -> (pid, host)
};

Distributed::Distributed(const DistEnv& env, const torch::Device& device, std::chrono::milliseconds timeout)
    : env_(env), device_(device), pg_(std::make_unique<ProcessGroupHandle>()) {
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const std::string me = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size);
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = static_cast<std::size_t>(env.world_size);
  so.waitWorkers = true;
  so.timeout = timeout;
  try {
    pg_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (const std::exception& e) {
    const std::string why = first_line(e);
    if (env.rank == 0)
      throw Error(me + ": cannot host the rendezvous store on " + where + " (" + why +
                  "); is MASTER_PORT in use? pick another");
    throw Error(me + ": could not reach the rendezvous store of rank 0 at " + where + " within " +
                seconds_text(timeout) + " s (" + why + ")");
  }
  // Who is who: a failed collective names the peer that is gone when it ran on this host.
  pg_->store->set("mnemo/peer/" + std::to_string(env.rank), bytes_of(std::to_string(::getpid()) + "@" + hostname()));
  if (device.is_cuda()) {
#if MNEMO_HAS_NCCL
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    pg_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(pg_->store, env.rank, env.world_size, opts);
    backend_ = "nccl";
#else
    throw Error(me + ": CUDA data-parallel training needs NCCL, and this build has no NCCL headers (nccl.h)");
#endif
  } else {
#if MNEMO_HAS_GLOO
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = timeout;
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else if (is_loopback(env.master_addr))
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    try {
      pg_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(pg_->store, env.rank, env.world_size, opts);
    } catch (const std::exception& e) {
      throw Error(me + ": the Gloo process group did not form within " + seconds_text(timeout) +
                  " s (rendezvous at " + where + "): " + first_line(e));
    }
    backend_ = "gloo";
#else
    throw Error(me + ": CPU data-parallel training needs Gloo, and this build has no Gloo headers "
                     "(install libgloo-dev and rebuild)");
#endif
  }
  for (int r = 0; r < env.world_size; ++r) {
    const auto v = pg_->store->get("mnemo/peer/" + std::to_string(r));
    const std::string s(v.begin(), v.end());
    const auto at = s.find('@');
    const auto pid = parse_whole_int(s.substr(0, at));
    pg_->peers.emplace_back(pid.value_or(0), at == std::string::npos ? "" : s.substr(at + 1));
  }
}


void Distributed::fail(const char* what, int64_t step, const std::exception& e) const {
  // A peer's sockets close while it is still exiting: look again for up to 2 s.
  std::string gone;
  for (int attempt = 0; attempt < 11 && gone.empty(); ++attempt) {
    if (attempt > 0) ::usleep(200 * 1000);
    for (int r = 0; r < env_.world_size; ++r) {
      const auto& [pid, host] = pg_->peers[r];
      if (r != env_.rank && host == hostname() && pid > 0 && !process_alive(pid))
        gone += (gone.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ")");
    }
  }
  std::string msg = "rank " + std::to_string(env_.rank) + ": the " + what;
  if (step >= 0) msg += " of step " + std::to_string(step + 1);
  msg += " failed";
  msg += gone.empty() ? ": a peer rank failed or cannot be reached" : ": " + gone + " is gone";
  throw Error(msg + " (" + backend_ + ": " + first_line(e) + ")");
}

void Distributed::check_same_config(const std::string& config_hash) {
  try {
    pg_->store->set("mnemo/config/" + std::to_string(env_.rank), bytes_of(config_hash));
    const auto v = pg_->store->get("mnemo/config/0");
    const std::string main_hash(v.begin(), v.end());
    if (main_hash != config_hash)
      throw Error("rank " + std::to_string(env_.rank) + " runs configuration " + config_hash + " but rank 0 runs " +
                  main_hash + ": every rank must be started with the same config");
    barrier("configuration check");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("configuration check", -1, e);
  }
}

void Distributed::broadcast_module(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors;
  for (auto& p : module.parameters()) tensors.push_back(p);
  for (auto& b : module.buffers()) tensors.push_back(b);
  try {
    for (auto& t : tensors) {
      std::vector<torch::Tensor> one = {t.is_contiguous() ? t : t.contiguous()};
      c10d::BroadcastOptions o;
      o.rootRank = 0;
      pg_->group->broadcast(one, o)->wait();
      if (!t.is_contiguous()) t.copy_(one[0]);
    }
  } catch (const std::exception& e) {
    fail("parameter broadcast", -1, e);
  }
}

// The parameters' gradient buckets and the hooks that launch them (see attach_gradients in distributed.h).
struct Distributed::GradientBuckets {
  struct Bucket {
    std::vector<size_t> params;    // indices into `params`, in the bucket's order
    std::vector<int64_t> offsets;  // element offset of each in `flat`
    torch::Tensor flat;
    size_t reported = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<torch::Tensor> params;
  std::vector<std::pair<size_t, size_t>> place;  // parameter -> (bucket, slot)
  std::vector<char> reported;                    // this step, per parameter
  std::vector<Bucket> buckets;
  // The AccumulateGrad nodes carrying the hooks: a leaf holds its node weakly, so without these references a
  // node (and its hook) would be rebuilt for every backward.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hook_keys;
  size_t next_launch = 0;
  bool armed = false, overlap = true;
  int64_t step = -1;
  std::optional<std::string> error;  // the first failure inside a hook, rethrown by finish_gradient_sync
};

Distributed::~Distributed() {
  if (!grads_) return;
  for (size_t i = 0; i < grads_->accumulators.size(); ++i) grads_->accumulators[i]->del_post_hook(grads_->hook_keys[i]);
}

namespace {
// Runs after a parameter's AccumulateGrad node (its .grad then holds this step's gradient so far): DDP's
// Reducer hooks the same node.
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};
}  // namespace

void Distributed::attach_gradients(const std::vector<torch::Tensor>& params, int64_t bucket_bytes, bool overlap) {
  if (grads_) throw Error("attach_gradients: the gradients are attached already");
  grads_ = std::make_unique<GradientBuckets>();
  auto& G = *grads_;
  G.params = params;
  G.overlap = overlap;
  G.place.resize(params.size());
  G.reported.assign(params.size(), 0);
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const torch::Tensor& p = params[k];
    const int64_t nb = p.numel() * static_cast<int64_t>(p.element_size());
    if (G.buckets.empty() || bytes + nb > bucket_bytes ||
        G.params[G.buckets.back().params.front()].scalar_type() != p.scalar_type() ||
        G.params[G.buckets.back().params.front()].device() != p.device()) {
      G.buckets.emplace_back();
      bytes = 0;
    }
    auto& b = G.buckets.back();
    G.place[k] = {G.buckets.size() - 1, b.params.size()};
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + G.params[b.params.back()].numel());
    b.params.push_back(k);
    bytes += nb;
  }
  for (auto& b : G.buckets) {
    const torch::Tensor& last = G.params[b.params.back()];
    b.flat = torch::zeros({b.offsets.back() + last.numel()}, last.options().requires_grad(false));
  }
  for (size_t k = 0; k < params.size(); ++k) {
    if (!params[k].requires_grad()) continue;
    auto acc = torch::autograd::impl::grad_accumulator(params[k]);
    G.hook_keys.push_back(acc->add_post_hook(std::make_unique<GradientReadyHook>([this, k] { gradient_ready(k); })));
    G.accumulators.push_back(std::move(acc));
  }
}

void Distributed::begin_gradient_sync(int64_t step) {
  if (!grads_) throw Error("begin_gradient_sync before attach_gradients");
  auto& G = *grads_;
  std::fill(G.reported.begin(), G.reported.end(), 0);
  for (auto& b : G.buckets) b.reported = 0, b.work.reset();
  G.next_launch = 0;
  G.step = step;
  G.error.reset();
  G.armed = G.overlap;
}

// A parameter's gradient is final for this step: copy it into its bucket; launch every bucket, in order, whose
// parameters have all reported. Inside the autograd engine: never throws (the error waits for finish).
void Distributed::gradient_ready(size_t k) {
  auto& G = *grads_;
  if (!G.armed || G.error || G.reported[k]) return;
  try {
    torch::NoGradGuard no_grad;
    const auto [bi, slot] = G.place[k];
    auto& b = G.buckets[bi];
    const torch::Tensor& g = G.params[k].grad();
    b.flat.narrow(0, b.offsets[slot], G.params[k].numel()).copy_(g.reshape({-1}));
    G.reported[k] = 1;
    ++b.reported;
    while (G.next_launch < G.buckets.size() &&
           G.buckets[G.next_launch].reported == G.buckets[G.next_launch].params.size()) {
      std::vector<torch::Tensor> one = {G.buckets[G.next_launch].flat};
      G.buckets[G.next_launch++].work = pg_->group->allreduce(one);
      ++launched_in_backward_;
    }
  } catch (const std::exception& e) {
    G.error = first_line(e);
  }
}

void Distributed::finish_gradient_sync(double scale) {
  torch::NoGradGuard no_grad;
  auto& G = *grads_;
  G.armed = false;
  const double t0 = wall_seconds();
  try {
    if (G.error) throw std::runtime_error(*G.error);
    for (size_t bi = G.next_launch; bi < G.buckets.size(); ++bi) {  // the rest, in order
      auto& b = G.buckets[bi];
      for (size_t slot = 0; slot < b.params.size(); ++slot) {
        const size_t k = b.params[slot];
        if (G.reported[k]) continue;
        torch::Tensor& p = G.params[k];
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // not reached: a zero share of the sum
        b.flat.narrow(0, b.offsets[slot], p.numel()).copy_(p.grad().reshape({-1}));
      }
      std::vector<torch::Tensor> one = {b.flat};
      b.work = pg_->group->allreduce(one);
    }
    G.next_launch = G.buckets.size();
    for (auto& b : G.buckets) {
      b.work->wait();
      if (scale != 1.0) b.flat.mul_(scale);
      for (size_t slot = 0; slot < b.params.size(); ++slot) {
        torch::Tensor& p = G.params[b.params[slot]];
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        p.mutable_grad().copy_(b.flat.narrow(0, b.offsets[slot], p.numel()).view_as(p));
      }
    }
  } catch (const std::exception& e) {
    fail("gradient all-reduce", G.step, e);
  }
  all_reduce_s_ += wall_seconds() - t0;
}

std::vector<double> Distributed::all_reduce_sum(const std::vector<double>& values, int64_t step, const char* what) {
  auto t = torch::tensor(values, torch::kFloat64).to(device_);
  try {
    std::vector<torch::Tensor> one = {t};
    pg_->group->allreduce(one)->wait();
  } catch (const std::exception& e) {
    fail(what, step, e);
  }
  std::vector<double> out(values.size());
  t = t.cpu();
  for (size_t i = 0; i < values.size(); ++i) out[i] = t[static_cast<int64_t>(i)].item<double>();
  return out;
}

void Distributed::barrier(const char* what) {
  try {
    pg_->group->barrier()->wait();
  } catch (const std::exception& e) {
    fail(what, -1, e);
  }
}

}  // namespace mnemo
