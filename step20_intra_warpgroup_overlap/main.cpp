/// \file step20_intra_warpgroup_overlap/main.cpp
/// \brief The step's program: `build/bin/step20_intra_warpgroup_overlap --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step20::describe(), argc, argv); }
