// The main job (`mnemo quickstart`, run by scripts/quickstart): two small sweeps chosen so that their
// comparison can be checked against the papers' claims on a 2-core CPU — MQAR recall at three numbers
// of key-value pairs (the gap between attention, the delta rule and linear attention, Zoology Fig. 2)
// and a tiny language-modelling pretraining comparison at an equal token budget — plus what the
// report needs to say about them (protocol, families left out and why).
#pragma once
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

// Families the MQAR stage runs by default: one or two per group of the papers' ranking.
std::vector<std::string> quickstart_mqar_models();
// Families the language-modelling stage runs by default.
std::vector<std::string> quickstart_lm_models();

// The learning rate the MQAR stage gives a family (the best of the probe sweep configs/mqar_quickstart_lr.json).
double quickstart_mqar_lr(const std::string& model);
json quickstart_mqar_sweep(const std::vector<std::string>& models);
// One case per model: {"model": m} plus the family's recorded cost keys where it has them (ATLAS).
json quickstart_lm_sweep(const std::vector<std::string>& models);

// {"protocol": [fact, ...], "left_out": {family: reason}} for the report catalog (every registered
// family the MQAR stage does not run, with the reason).
json quickstart_catalog();

}  // namespace mnemo
