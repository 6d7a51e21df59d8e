#include "synthetic/example.h"

namespace mnemo {

const char* split_name(Split s) { return s == Split::train ? "train" : "test"; }

}  // namespace mnemo
