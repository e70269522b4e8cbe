/// \file step26_backward_fp32/main.cpp
/// \brief The step's program: `build/bin/step26_backward_fp32 --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step26::describe(), argc, argv); }
