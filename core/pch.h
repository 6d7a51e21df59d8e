// Precompiled header shared by every mnemo target: LibTorch and JSON dominate compile time.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
