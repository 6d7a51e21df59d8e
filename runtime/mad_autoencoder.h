// The MAD compression backbone (docs/tasks.md#mad; external: athms/mad-lab
// mad/model/auto_encoder.py, global_pool = "last"): the model's blocks encode the sequence, the
// last (compression) token's representation e is the code, and every position t is decoded from
// e + sincos(t) alone by a non-expanding MLP:
//   x_t = e + P[t];  x = GELU(W_b RMSNorm(GELU(W_a RMSNorm(x_t))));  logits_t = W_u RMSNorm(x) + b_u
// (Linear layers with bias, normal(0, 0.02) init, zero biases, as in mad-lab.)
#pragma once
#include <torch/torch.h>

#include <vector>

#include "runtime/model.h"
#include "runtime/no_weight_decay.h"

namespace mnemo {

// fairseq/mad-lab sinusoidal table [n, dim]: row p = [sin(p f_i), cos(p f_i)], i < dim/2,
// f_i = exp(-i ln(10000) / (dim/2 - 1)); a zero column is appended when dim is odd.
torch::Tensor sincos_position_table(int64_t n, int64_t dim);

class MadAutoEncoderImpl : public torch::nn::Module, public DeclaresNoWeightDecay {
 public:
  // The unembedding takes no weight decay (as before the flags were declared by modules).
  std::vector<std::string> no_weight_decay() const override { return {"unembed.weight"}; }
  explicit MadAutoEncoderImpl(const ModelConfig& cfg);
  // ids [B, T] -> logits [B, T, V]; every position sees the whole input only through the code.
  // A decode state is meaningless for an autoencoder: `state` must be null (Error otherwise).
  torch::Tensor forward(const torch::Tensor& ids, ModelState* state = nullptr);
  torch::Tensor encode(const torch::Tensor& ids);  // [B, D], the last position's representation
  torch::Tensor decode(const torch::Tensor& code, int64_t length);  // [B, T, V]
  torch::Tensor aux_loss() const;  // sum of the encoder mixers' auxiliary losses (if any)
  int64_t num_parameters() const;
  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  torch::nn::Embedding embed_{nullptr};
  BlockNorm embed_norm_{nullptr};  // embed_norm only
  std::vector<Block> blocks_;
  std::shared_ptr<ModelScratch> scratch_ = std::make_shared<ModelScratch>();  // what a layer hands to later ones
  RMSNorm dec_norm1_{nullptr}, dec_norm2_{nullptr}, unembed_norm_{nullptr};
  torch::nn::Linear dec_fc1_{nullptr}, dec_fc2_{nullptr}, unembed_{nullptr};
};
TORCH_MODULE(MadAutoEncoder);

}  // namespace mnemo
