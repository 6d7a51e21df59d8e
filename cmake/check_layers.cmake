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
# The rooms of engine/, in order: a file may include its own room and the rooms before it.
#   config      the run configuration: keys, presets, checks
#   io          checkpoints, safetensors, export and fla import, data downloads
#   evaluation  evaluation drivers, scorers, token tasks, output files
#   training    the training loop and its parts: run record, data source, objective, optimiser, distributed, FLOPs
#   tools       bench, profiler, sweeps, quickstart, the report's catalog
set(engine_rooms config io evaluation training tools)
file(GLOB_RECURSE engine_sources "${SRC}/engine/*.h" "${SRC}/engine/*.cpp")
foreach(source IN LISTS engine_sources)
  file(RELATIVE_PATH rel "${SRC}" "${source}")
  string(REGEX REPLACE "^engine/([^/]+)/.*" "\\1" room "${rel}")
  list(FIND engine_rooms "${room}" room_index)
  if(room_index EQUAL -1)
    string(APPEND violations "  ${rel}: not in a room of engine/ (${engine_rooms})\n")
    continue()
  endif()
  file(STRINGS "${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"engine/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"engine/([^/\"]+)/.*" "\\1" target "${line}")
    list(FIND engine_rooms "${target}" target_index)
    if(target_index EQUAL -1 OR target_index GREATER room_index)
      string(APPEND violations "  ${rel}: engine/${room}/ may not include engine/${target}/ (${line})\n")
    endif()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "mnemo: error: include against the layer direction "
                      "(core <- runtime, synthetic, results; tasks <- synthetic; engine <- runtime, tasks, results; "
                      "reports <- results; cli <- all; inside engine/: config <- io <- evaluation <- training <- tools):\n${violations}")
endif()
