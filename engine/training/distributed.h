// Data-parallel training on torch.distributed's c10d (Gloo on CPU, NCCL on CUDA): the rank's place in the job,
// read from torchrun's or Slurm's environment; the process group with its TCPStore rendezvous; the collectives the
// trainer needs (parameter broadcast, gradient all-reduce in buckets, a per-step control all-reduce) and the
// start-up check that every rank runs the same configuration. A world of one needs none of it (no group is made).
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

// Where this process stands in the job. Sources, first match wins:
//   torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (`mnemo train --nproc N` sets these);
//   Slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_JOB_NODELIST (or MASTER_ADDR),
//             MASTER_PORT (default 29500); only when SLURM_NTASKS > 1;
//   none:     a world of one.
struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "none";  // "torchrun", "slurm" or "none"
  // torchrun's variables form a process group even for one process (as torch.distributed does: on a GPU, a
  // one-rank NCCL group); Slurm's only for more than one task.
  bool distributed() const { return world_size > 1 || source == "torchrun"; }
};

// `env` maps variable names to values (tests); the process environment when empty. Inconsistent variables
// (WORLD_SIZE without RANK, a rank outside [0, WORLD_SIZE), a port outside [1, 65535], ...) -> Error naming them.
DistEnv dist_env_from(const std::map<std::string, std::string>& env);
DistEnv dist_env_from_process();

// The first host of a Slurm node list: "gpu[03-05,07],cpu1" -> "gpu03"; "node7" -> "node7".
std::string first_slurm_host(const std::string& nodelist);

class ProcessGroupHandle;  // c10d's group + store (distributed.cpp)

// One rank's handle on the job. Every collective either completes or throws Error within `timeout`, naming the
// operation, the step and — where this host can tell — which peer is gone.
class Distributed {
 public:
  // Joins the job: rank 0 hosts the TCPStore on master_port; every rank waits up to `timeout` for all others.
  // `device` picks the backend: Gloo for CPU, NCCL for CUDA (one GPU per local rank).
  Distributed(const DistEnv& env, const torch::Device& device, std::chrono::milliseconds timeout);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  bool is_main() const { return env_.rank == 0; }
  const std::string& backend() const { return backend_; }

  // Every rank publishes `config_hash`; a rank whose hash differs from rank 0's -> Error on every rank naming both.
  void check_same_config(const std::string& config_hash);
  // Parameters and buffers of `module` from rank 0 to all (identical starting weights).
  void broadcast_module(torch::nn::Module& module);
  // Gradient sum over ranks, overlapped with the backward (DDP's Reducer, on LibTorch's public tensor hooks):
  // attach_gradients (once, after broadcast_module) lays the parameters out in buckets of at most bucket_bytes
  // (reverse parameter order — the order backward produces them — one dtype and device each) and puts a hook on
  // each. Between begin_gradient_sync(step) and the step's last backward, a parameter's hook copies its finished
  // gradient (the .grad of earlier micro-batches + this backward's part) into its bucket; a bucket whose every
  // parameter has reported is all-reduced asynchronously at once — strictly in bucket order, so every rank issues
  // the same collectives in the same order — while backward goes on with earlier layers. finish_gradient_sync
  // gives parameters the graph did not reach a zero gradient, launches the remaining buckets, waits for all and
  // writes the sums (times `scale`) back into .grad. overlap = false: the hooks stay idle and every bucket is
  // launched by finish_gradient_sync (the pre-overlap behaviour, for comparison).
  void attach_gradients(const std::vector<torch::Tensor>& params, int64_t bucket_bytes, bool overlap);
  void begin_gradient_sync(int64_t step);
  void finish_gradient_sync(double scale);
  // Element-wise sum over ranks of a small fp64 vector (flags, counts): the per-step control message.
  std::vector<double> all_reduce_sum(const std::vector<double>& values, int64_t step, const char* what);
  void barrier(const char* what);

  // Seconds spent in finish_gradient_sync so far: the all-reduce time the backward did not hide.
  double all_reduce_seconds() const { return all_reduce_s_; }
  int64_t buckets_launched_in_backward() const { return launched_in_backward_; }  // so far (overlap evidence)

 private:
  [[noreturn]] void fail(const char* what, int64_t step, const std::exception& e) const;
  void gradient_ready(size_t param_index);  // a parameter's AccumulateGrad post-hook
  DistEnv env_;
  torch::Device device_;
  std::string backend_;
  std::unique_ptr<ProcessGroupHandle> pg_;
  struct GradientBuckets;  // distributed.cpp
  std::unique_ptr<GradientBuckets> grads_;
  double all_reduce_s_ = 0;
  int64_t launched_in_backward_ = 0;
};

}  // namespace mnemo
