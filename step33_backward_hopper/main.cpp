/// \file step33_backward_hopper/main.cpp
/// \brief The step's program: `build/bin/step33_backward_hopper --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step33::describe(), argc, argv); }
