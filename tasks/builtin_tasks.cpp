// The one place that lists every built-in task family (one line each).
#include "tasks/task.h"

namespace mnemo {

void register_mqar_task(TaskRegistry& r);  // tasks/mqar_task.cpp
void register_mad_tasks(TaskRegistry& r);  // tasks/mad_tasks.cpp (six MAD tasks)
void register_sniah_tasks(TaskRegistry& r);  // tasks/sniah.cpp (sniah_1..3)
void register_babilong_tasks(TaskRegistry& r);  // tasks/babilong.cpp (babilong_qa1..qa20)
void register_lm_tasks(TaskRegistry& r);  // tasks/lm_task.cpp (lm, lm_ppl)

void register_builtin_tasks(TaskRegistry& r) {
  register_mqar_task(r);
  register_mad_tasks(r);
  register_sniah_tasks(r);
  register_babilong_tasks(r);
  register_lm_tasks(r);
}

}  // namespace mnemo
