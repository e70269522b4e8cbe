/// \file step32_backward_tc_deterministic/main.cpp
/// \brief The step's program: `build/bin/step32_backward_tc_deterministic --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step32::describe(), argc, argv); }
