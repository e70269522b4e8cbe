# flash_add_step(<name> SOURCES <files...> [LIBRARIES <targets...>] [CUDA [HOPPER]])
#
# "A step = a library + a program + a test executable", written once:
#   <name>_lib    the step's kernel (attention.cpp or attention.cu)
#   <name>        the program, built as build/bin/<name> from main.cpp
#   <name>_tests  doctest executable from test_*.cpp, registered with ctest
# A CUDA step's tests carry the label `gpu` and report "skipped" (exit 77)
# on a machine without a GPU. Nothing happens for a CUDA step when CUDA is
# not configured. A HOPPER step is built for sm_90a only (wgmma and setmaxnreg
# exist on no other target), whatever CMAKE_CUDA_ARCHITECTURES says; its tests
# report "skipped" on a GPU that is not Hopper.
function(flash_add_step name)
  cmake_parse_arguments(STEP "CUDA;HOPPER" "" "SOURCES;LIBRARIES" ${ARGN})
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
  add_executable(${name}_tests ${test_sources})
  if(STEP_CUDA)
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
