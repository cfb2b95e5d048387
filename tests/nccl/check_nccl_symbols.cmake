cmake_minimum_required(VERSION 3.18)
# Fails when LIBRARY imports an NCCL call that NCCL 2.17 lacks, so that
# loading it against an older libnccl would fail with an undefined symbol.
# Run by the nccl_symbols_test (tests/nccl/CMakeLists.txt).
set(allowed
  # 2.17 and older; keep in step with nccl_min_version.
  ncclAllGather ncclAllReduce ncclBroadcast ncclCommAbort ncclCommDestroy
  ncclCommFinalize ncclCommGetAsyncError ncclCommInitRankConfig
  ncclGetErrorString ncclGetLastError ncclGetUniqueId ncclGetVersion
  ncclGroupEnd ncclGroupStart ncclRecv ncclReduce ncclReduceScatter ncclSend)

execute_process(COMMAND ${NM} --undefined-only ${LIBRARY}
  OUTPUT_VARIABLE static_out ERROR_QUIET)
execute_process(COMMAND ${NM} --dynamic --undefined-only ${LIBRARY}
  OUTPUT_VARIABLE dynamic_out ERROR_QUIET)
# Lines like "                 U ncclAllReduce": C names only, not the C++
# names of our own functions that mention nccl.
string(REGEX MATCHALL "U p?nccl[A-Za-z0-9]+" lines
  "${static_out}\n${dynamic_out}")
set(imported "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^U " "" symbol "${line}")
  list(APPEND imported ${symbol})
endforeach()
list(REMOVE_DUPLICATES imported)
if(NOT imported)
  message(FATAL_ERROR "no NCCL symbols found in ${LIBRARY}: wrong file?")
endif()
set(bad "")
foreach(symbol IN LISTS imported)
  if(NOT symbol IN_LIST allowed)
    list(APPEND bad ${symbol})
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "${LIBRARY} imports NCCL calls newer than 2.17: "
    "${bad}; look them up at run time (nccl_version.hpp) instead")
endif()
list(LENGTH imported count)
message(STATUS "${count} NCCL calls imported, all in NCCL 2.17: ${imported}")
