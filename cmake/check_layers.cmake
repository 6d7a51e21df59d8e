# One-way layers: every #include "dir/..." of a source under a layer folder must name that folder
# or one it may use. Run at every build (target mnemo_layers) and by CTest; a violation fails both.
#   cmake -DSRC=<source dir> -P cmake/check_layers.cmake
set(allowed_core     core)
set(allowed_runtime  core runtime)
set(allowed_synthetic core synthetic)
set(allowed_results  core results)
set(allowed_tasks    core synthetic tasks)
set(allowed_reports  core results reports)
set(allowed_engine   core runtime synthetic tasks results engine)
set(allowed_plugins  plugins)
set(allowed_cli      core runtime synthetic tasks results reports engine cli)
set(layers core runtime synthetic results tasks reports engine plugins cli)

set(violations "")
foreach(layer IN LISTS layers)
  file(GLOB_RECURSE sources "${SRC}/${layer}/*.h" "${SRC}/${layer}/*.cpp")
  foreach(source IN LISTS sources)
    file(STRINGS "${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([a-z_]+)/.*" "\\1" target "${line}")
      list(FIND allowed_${layer} "${target}" found)
      if(found EQUAL -1)
        file(RELATIVE_PATH rel "${SRC}" "${source}")
        string(APPEND violations "  ${rel}: ${layer}/ may not include ${target}/ (${line})\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "mnemo: error: include against the layer direction "
                      "(core <- runtime, synthetic, results; tasks <- synthetic; engine <- runtime, tasks, results; "
                      "reports <- results; cli <- all):\n${violations}")
endif()
