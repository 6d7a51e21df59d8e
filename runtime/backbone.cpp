#include "runtime/backbone.h"

#include "runtime/mad_autoencoder.h"

namespace mnemo {

Backbone make_backbone(const std::string& kind, const ModelConfig& config) {
  Backbone b;
  b.kind = kind;
  if (kind == "language_model") {
    LanguageModel m(config);
    b.language_model = m;
    b.module = m.ptr();
    b.forward = [p = m.ptr()](const torch::Tensor& ids) { return p->forward(ids); };
    b.forward_packed = [p = m.ptr()](const torch::Tensor& ids, const torch::Tensor& starts) {
      return p->forward_packed(ids, starts);
    };
    b.aux_loss = [m] { return m->aux_loss(); };
    b.num_parameters = [m] { return m->num_parameters(); };
    b.config = [m]() -> const ModelConfig& { return m->config(); };
  } else if (kind == "autoencoder") {
    MadAutoEncoder m(config);
    b.module = m.ptr();
    b.forward = [p = m.ptr()](const torch::Tensor& ids) { return p->forward(ids); };
    b.aux_loss = [m] { return m->aux_loss(); };
    b.num_parameters = [m] { return m->num_parameters(); };
    b.config = [m]() -> const ModelConfig& { return m->config(); };
  } else {
    throw Error("unknown backbone '" + kind + "' (expected language_model or autoencoder)");
  }
  return b;
}

}  // namespace mnemo
