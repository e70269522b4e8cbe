# flash_add_step(<name> SOURCES <files...> [LIBRARIES <targets...>] [CUDA [HOPPER] [TESTS <flags...>]]
#                [HOST_TESTS <files...>])
#
# "A step = a library + a program + a test executable", written once:
#   <name>_lib    the step's kernel (attention.cpp or attention.cu)
#   <name>        the program, built as build/bin/<name> from main.cpp
#   <name>_tests  doctest executable from test_*.cpp, registered with ctest
# A CUDA step's test executable also holds the tests every CUDA step runs,
# common/cuda/test_gpu_steps.cpp, instantiated for the step's namespace (the first
# six letters of <name>, e.g. step12); its step's own test_*.cpp (none for most)
# holds only what is particular to the step. The TESTS flags turn on the
# suite's tests that begin at some step (test_gpu_steps.cpp says what each does):
#   SIXTEEN_BIT     run and judge in bf16 and fp16 instead of fp32
#   CAUSAL_TAILS    causal with N_q != N_kv at lengths just off the tile sizes
#   SCALE_SIGNS     every sign of the scale at every d
#   BACKWARD        the gradient conformance suite, dQ by atomics
#   DETERMINISTIC   and dQ summed in a fixed order, bitwise-repeatable
#   NO_SPILLS_AT_<d>, NO_SPILLS_AT_EVERY_D   no spills in the resource report
# HOST_TESTS: a CUDA step's tests of host-side arithmetic (no GPU needed), built as
# <name>_host_tests and labelled `cpu`, so that they run on every machine.
# A CUDA step's tests carry the label `gpu` and report "skipped" (exit 77)
# on a machine without a GPU. Nothing happens for a CUDA step when CUDA is
# not configured. A HOPPER step is built for sm_90a only (wgmma and setmaxnreg
# exist on no other target), whatever CMAKE_CUDA_ARCHITECTURES says; its tests
# report "skipped" on a GPU that is not Hopper.
function(flash_add_step name)
  cmake_parse_arguments(STEP "CUDA;HOPPER" "" "SOURCES;LIBRARIES;TESTS;HOST_TESTS" ${ARGN})
  if(STEP_TESTS AND NOT STEP_CUDA)
    message(FATAL_ERROR "${name}: TESTS flags are for the suite of CUDA steps")
  endif()
  if(STEP_CUDA AND NOT FLASH_HAVE_CUDA)
    message(STATUS "${name}: skipped (no CUDA compiler)")
    return()
  endif()

  add_library(${name}_lib STATIC ${STEP_SOURCES})
  target_include_directories(${name}_lib PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${name}_lib PUBLIC flash_common ${STEP_LIBRARIES})
  if(STEP_CUDA)
    target_link_libraries(${name}_lib PUBLIC flash_common_cuda)
  endif()
  if(STEP_HOPPER)
    set_target_properties(${name}_lib PROPERTIES CUDA_ARCHITECTURES OFF)
    target_compile_options(${name}_lib PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a>)
  endif()

  add_executable(${name} main.cpp)
  target_link_libraries(${name} PRIVATE ${name}_lib flash_driver)

  file(GLOB test_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/test_*.cpp
                                           ${CMAKE_CURRENT_SOURCE_DIR}/test_*.cu)
  list(TRANSFORM STEP_HOST_TESTS PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
  if(STEP_HOST_TESTS)
    list(REMOVE_ITEM test_sources ${STEP_HOST_TESTS})
    add_executable(${name}_host_tests ${STEP_HOST_TESTS})
    target_include_directories(${name}_host_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(${name}_host_tests PRIVATE flash_common flash_testing flash_test_main)
    doctest_discover_tests(${name}_host_tests TEST_PREFIX "${name}: " PROPERTIES LABELS cpu)
  endif()
  add_executable(${name}_tests ${test_sources})
  if(STEP_CUDA)
    target_sources(${name}_tests PRIVATE ${PROJECT_SOURCE_DIR}/common/cuda/test_gpu_steps.cpp)
    string(SUBSTRING "${name}" 0 6 namespace)
    target_compile_definitions(${name}_tests PRIVATE FLASH_STEP=${namespace})
    foreach(flag IN LISTS STEP_TESTS)
      if(flag MATCHES "^NO_SPILLS_AT_([0-9]+)$")
        target_compile_definitions(${name}_tests PRIVATE FLASH_TESTS_NO_SPILLS_AT=${CMAKE_MATCH_1})
      elseif(flag STREQUAL "NO_SPILLS_AT_EVERY_D")
        target_compile_definitions(${name}_tests PRIVATE FLASH_TESTS_NO_SPILLS_AT=0)
      elseif(flag MATCHES "^(SIXTEEN_BIT|CAUSAL_TAILS|SCALE_SIGNS|BACKWARD|DETERMINISTIC)$")
        target_compile_definitions(${name}_tests PRIVATE FLASH_TESTS_${flag}=1)
      else()
        message(FATAL_ERROR "${name}: unknown TESTS flag ${flag}")
      endif()
    endforeach()
    if(STEP_HOPPER)
      set(test_main flash_hopper_test_main)
    else()
      set(test_main flash_gpu_test_main)
    endif()
    target_link_libraries(${name}_tests PRIVATE ${name}_lib flash_driver flash_testing ${test_main})
    doctest_discover_tests(${name}_tests TEST_PREFIX "${name}: "
      PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  else()
    target_link_libraries(${name}_tests PRIVATE ${name}_lib flash_driver flash_testing flash_test_main)
    doctest_discover_tests(${name}_tests TEST_PREFIX "${name}: " PROPERTIES LABELS cpu)
  endif()

  set(FLASH_BUILT_STEPS ${FLASH_BUILT_STEPS} ${name} CACHE INTERNAL "Steps added by flash_add_step")
endfunction()
