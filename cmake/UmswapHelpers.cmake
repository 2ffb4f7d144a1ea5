# Project-wide helpers: one place decides warnings and how a test is added.

# Warnings for umswap's own code (not third-party headers, which come in as SYSTEM); errors with
# UMSWAP_WERROR (the presets' builds).
function(umswap_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wnon-virtual-dtor>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  if(UMSWAP_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                             $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>)
  endif()
endfunction()

# umswap_add_test(NAME <name> SOURCES <files...> [LIBS <libs...>] [LABELS <labels...>]
#                 [ENVIRONMENT <VAR=value...>])
# A GoogleTest executable registered as one CTest test. GPU tests carry the label `gpu` and skip
# themselves (GTEST_SKIP) on a machine without a GPU.
function(umswap_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS;ENVIRONMENT" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest_main Threads::Threads)
  umswap_warnings(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_LABELS)
    set(T_LABELS cpu)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT 300)
  if(T_ENVIRONMENT)
    set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENVIRONMENT}")
  endif()
endfunction()
