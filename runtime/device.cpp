#include "runtime/device.h"

#include "core/common.h"

namespace mnemo {

torch::Device resolve_device(const std::string& name) {
  if (name == "auto" || name.empty())
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const bool plausible = name == "cpu" || name.rfind("cuda", 0) == 0;
  torch::Device d(torch::kCPU);
  try {
    if (!plausible) throw Error("");
    d = torch::Device(name);
  } catch (const std::exception&) {
    throw Error("unknown device '" + name + "' (expected cpu, cuda, cuda:N or auto)");
  }
  if (d.is_cuda() && !torch::cuda::is_available())
    throw Error("device '" + name + "' requested but CUDA is not available on this machine/build");
  if (d.is_cuda() && d.has_index() && d.index() >= static_cast<int>(torch::cuda::device_count()))
    throw Error("device '" + name + "': this machine has " + std::to_string(torch::cuda::device_count()) +
                " CUDA device(s)");
  return d;
}

torch::Tensor to_device(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda() || !host.device().is_cpu()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? -1 : device.index());
}

}  // namespace mnemo
