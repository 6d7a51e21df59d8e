# cmake -DLIB=libmnemo_cuda_kernels.a -DARCHS="80;90" [-DCUOBJDUMP=cuobjdump] -P check_cuda_archs.cmake
# Fails unless the library holds device code for every architecture in ARCHS. With cuobjdump (a full CUDA
# toolkit) it reads the fat binaries' ELF list; without it (the minimal nvcc packages have none) it reads the
# printable strings of the archive, where each embedded device image names its target (sm_NN).
if(CUOBJDUMP AND EXISTS "${CUOBJDUMP}")
  execute_process(COMMAND ${CUOBJDUMP} --list-elf ${LIB} OUTPUT_VARIABLE listing ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cuobjdump --list-elf ${LIB} failed (${rc}): ${err}")
  endif()
else()
  file(STRINGS ${LIB} listing REGEX "sm_[0-9]+")
endif()
foreach(arch IN LISTS ARCHS)
  string(REGEX REPLACE "-(real|virtual)$" "" arch "${arch}")
  if(NOT listing MATCHES "sm_${arch}")
    message(FATAL_ERROR "${LIB}: no device code for sm_${arch}")
  endif()
endforeach()
message(STATUS "${LIB}: device code for sm ${ARCHS}")
