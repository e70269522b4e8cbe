/// \file step29_backward_deterministic/main.cpp
/// \brief The step's program: `build/bin/step29_backward_deterministic --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step29::describe(), argc, argv); }
