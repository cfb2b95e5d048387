# Runs a benchmark tool and checks both its exit status and its output,
# which ctest's PASS_REGULAR_EXPRESSION alone cannot: that ignores the
# status, and a refusal must exit 2, not 0 after printing its message.
#
#   cmake -DCMD=<tool|arg|...> -DEXIT=<status> -DREGEX=<regex>
#         -P expect_exit.cmake
#
# CMD separates its words with '|': a ';' list would not survive add_test.
# The output checked is stdout and stderr together.
if(NOT DEFINED CMD OR NOT DEFINED EXIT OR NOT DEFINED REGEX)
  message(FATAL_ERROR "expect_exit.cmake needs -DCMD, -DEXIT and -DREGEX")
endif()
string(REPLACE "|" ";" CMD "${CMD}")
execute_process(COMMAND ${CMD}
                RESULT_VARIABLE status
                OUTPUT_VARIABLE out
                ERROR_VARIABLE out
                TIMEOUT 120)
if(NOT status STREQUAL EXIT)
  message(FATAL_ERROR "exit status ${status}, expected ${EXIT}; output:\n${out}")
endif()
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}':\n${out}")
endif()
