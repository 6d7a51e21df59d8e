#include "runtime/ops/kernel_ops.h"

#include <mutex>

namespace mnemo {

// -- each family's op registration (defined next to its kernels) --
void register_delta_rule_ops(KernelOpRegistry& r);  // delta_rule, gated_delta_rule (runtime/delta_rule/)
void register_linear_attn_ops(KernelOpRegistry& r);  // linear_attn, linear_attn_norm (runtime/linear_attn/)
void register_retnet_ops(KernelOpRegistry& r);       // simple_gla, retention (runtime/retnet/)
void register_gla_ops(KernelOpRegistry& r);          // gla (runtime/gla/)
void register_mamba2_ops(KernelOpRegistry& r);       // mamba2_ssd (runtime/mamba2/)
void register_ttt_ops(KernelOpRegistry& r);  // ttt_linear (runtime/ttt/)
void register_titans_ops(KernelOpRegistry& r);  // titans (runtime/titans/ops.cpp)
void register_kda_ops(KernelOpRegistry& r);  // kda (runtime/kda/)
void register_delta_product_ops(KernelOpRegistry& r);  // gated_delta_product (runtime/delta_product/)
void register_forgetting_attn_ops(KernelOpRegistry& r);  // forgetting_attn (runtime/forgetting_attn/)
void register_mesa_net_ops(KernelOpRegistry& r);  // mesa_net (runtime/mesa_net/)
void register_mamba3_ops(KernelOpRegistry& r);  // mamba3_siso (runtime/mamba3/)
void register_rwkv7_ops(KernelOpRegistry& r);  // rwkv7 (runtime/rwkv7/)
void register_path_attn_ops(KernelOpRegistry& r);  // path_attn (runtime/path_attn/)
void register_log_linear_gdn_ops(KernelOpRegistry& r);  // log_linear_attn, log_linear_gdn (runtime/log_linear_gdn/)

void register_builtin_kernel_ops(KernelOpRegistry& r) {
  register_delta_rule_ops(r);
  register_linear_attn_ops(r);
  register_retnet_ops(r);
  register_gla_ops(r);
  register_mamba2_ops(r);
  register_ttt_ops(r);
  register_titans_ops(r);
  register_kda_ops(r);
  register_delta_product_ops(r);
  register_forgetting_attn_ops(r);
  register_mesa_net_ops(r);
  register_mamba3_ops(r);
  register_rwkv7_ops(r);
  register_path_attn_ops(r);
  register_log_linear_gdn_ops(r);
}

KernelOpRegistry& KernelOpRegistry::instance() {
  static KernelOpRegistry registry;
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_kernel_ops(registry); });
  return registry;
}

void KernelOpRegistry::add(KernelOp op) {
  if (op.name.empty()) throw Error("kernel op registry: an op needs a name");
  if (op.forms.empty()) throw Error("kernel op registry: op '" + op.name + "' declares no forms");
  if (!op.run) throw Error("kernel op registry: op '" + op.name + "' has no run function");
  if (has(op.name)) throw Error("kernel op registry: op '" + op.name + "' registered twice");
  ops_.push_back(std::move(op));
}

bool KernelOpRegistry::has(const std::string& name) const {
  for (const auto& op : ops_)
    if (op.name == name) return true;
  return false;
}

const KernelOp& KernelOpRegistry::at(const std::string& name) const {
  for (const auto& op : ops_)
    if (op.name == name) return op;
  std::string known;
  for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown kernel op '" + name + "' (known ops: " + (known.empty() ? "none" : known) + ")");
}

std::vector<std::string> KernelOpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& op : ops_) out.push_back(op.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mnemo
