// The zero-shot and recall task registry and the paper groups (tasks/harness/task_registry.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tasks/harness/harness_task.h"

namespace mnemo::harness {

std::unique_ptr<HarnessTask> make_harness_task(const std::string& name);  // Error naming close task names
std::vector<std::string> harness_task_names();
// Expands groups ("commonsense": the Titans-line columns; tasks/harness/task_registry.cpp) and comma lists; Error on unknown names.
std::vector<std::string> expand_harness_tasks(const std::vector<std::string>& names_or_groups);

}  // namespace mnemo::harness
