#include "runtime/no_weight_decay.h"

#include "core/common.h"

namespace mnemo {

namespace {

void collect(const std::string& prefix, const torch::nn::Module& m, std::set<std::string>& out) {
  std::vector<std::string> names;
  if (const auto* d = dynamic_cast<const DeclaresNoWeightDecay*>(&m)) names = d->no_weight_decay();
  if (dynamic_cast<const torch::nn::EmbeddingImpl*>(&m) != nullptr) names.push_back("weight");
  if (names.empty()) return;
  const auto params = m.named_parameters();
  for (const auto& n : names) {
    if (!params.contains(n))
      throw Error("module " + (prefix.empty() ? std::string("(root)") : "'" + prefix + "'") + " (" + m.name() +
                  ") declares no weight decay for '" + n + "', which is not one of its parameters");
    out.insert(prefix.empty() ? n : prefix + "." + n);
  }
}

}  // namespace

std::set<std::string> no_weight_decay_parameters(const torch::nn::Module& root) {
  std::set<std::string> out;
  collect("", root, out);  // root by reference: named_modules(include_self) needs a shared_ptr-owned root
  for (const auto& item : root.named_modules("", /*include_self=*/false)) collect(item.key(), *item.value(), out);
  return out;
}

}  // namespace mnemo
