# Plants one bug for the checker's tests: copies attention.cpp, applies
# bugs/<BUG>.patch to the copy with `git apply`, and moves the copy's code into
# namespace step03::bugs::<BUG>, so that several patched kernels link into one
# test executable. Run by step03_simulated_threads/CMakeLists.txt:
#   cmake -DGIT=git -DSOURCE=.../attention.cpp -DPATCH=.../bugs/BUG.patch -DBUG=BUG
#         -DOUT=<dir>/step03_simulated_threads/attention.cpp -P plant.cmake
# A patch that no longer applies fails the build, saying how to remake it.
foreach(var GIT SOURCE PATCH BUG OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "plant.cmake: -D${var}=... is missing")
  endif()
endforeach()

get_filename_component(step_dir ${OUT} DIRECTORY)  # <dir>/step03_simulated_threads
get_filename_component(root ${step_dir} DIRECTORY)  # <dir>: the patch's paths are relative to it
get_filename_component(above ${root} DIRECTORY)
file(REMOVE ${OUT})
file(MAKE_DIRECTORY ${step_dir})
file(COPY_FILE ${SOURCE} ${OUT})

# The build tree may lie inside the repository, where `git apply` would take
# paths from the repository's top and skip this copy. Stopping git's search for
# a repository above <dir> makes it work as a plain `patch -p1` here.
set(ENV{GIT_CEILING_DIRECTORIES} ${above})
unset(ENV{GIT_DIR})
unset(ENV{GIT_WORK_TREE})
execute_process(COMMAND ${GIT} apply --verbose ${PATCH}
  WORKING_DIRECTORY ${root}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE log
  ERROR_VARIABLE log)
file(READ ${SOURCE} before)
file(READ ${OUT} after)
if(NOT status EQUAL 0)
  # A reader doing the page's exercises may have applied this very patch to
  # attention.cpp: then the copy is attention.cpp as it is.
  execute_process(COMMAND ${GIT} apply --check --reverse ${PATCH}
    WORKING_DIRECTORY ${root}
    RESULT_VARIABLE planted_already
    OUTPUT_QUIET ERROR_QUIET)
  if(planted_already EQUAL 0)
    message(STATUS "attention.cpp has bugs/${BUG}.patch applied already: its copy is attention.cpp as it is")
    set(status 0)
    set(before "")
  endif()
endif()
if(NOT status EQUAL 0 OR after STREQUAL before)
  file(REMOVE ${OUT})
  message(FATAL_ERROR
    "step03_simulated_threads/bugs/${BUG}.patch no longer applies to attention.cpp:\n${log}\n"
    "attention.cpp changed where the bug is planted. Remake the patch from the repository's top:\n"
    "  plant the bug in step03_simulated_threads/attention.cpp by hand, then\n"
    "  git diff step03_simulated_threads/attention.cpp > step03_simulated_threads/bugs/${BUG}.patch\n"
    "  (keep the patch's first lines, which say what the bug is), and undo the edit.")
endif()

# The same lines, in a namespace of their own (line numbers in reports stay those of the patched file).
# describe() comes before attention_forward() in attention.cpp, so its lambda would find
# step03::attention_forward, the unplanted kernel, from the header: the namespace's first
# line declares the planted one, on the same line so that no line number moves.
string(REGEX MATCHALL "\nnamespace step03 {\n" opening "${after}")
list(LENGTH opening n)
if(NOT n EQUAL 1)
  file(REMOVE ${OUT})
  message(FATAL_ERROR "plant.cmake: expected one line `namespace step03 {` in attention.cpp, found ${n}")
endif()
string(REPLACE "\nnamespace step03 {\n"
  "\nnamespace step03::bugs::${BUG} { common::Result attention_forward(const common::Problem&, const common::Options&);\n"
  after "${after}")
file(WRITE ${OUT} "${after}")
