/// \file step13_scale_in_exp2/main.cpp
/// \brief The step's program: `build/bin/step13_scale_in_exp2 --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step13::describe(), argc, argv); }
