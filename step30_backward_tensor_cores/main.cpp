/// \file step30_backward_tensor_cores/main.cpp
/// \brief The step's program: `build/bin/step30_backward_tensor_cores --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step30::describe(), argc, argv); }
