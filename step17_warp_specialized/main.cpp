/// \file step17_warp_specialized/main.cpp
/// \brief The step's program: `build/bin/step17_warp_specialized --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step17::describe(), argc, argv); }
