/// \file step25_backward_cpu/main.cpp
/// \brief The step's program: `build/bin/step25_backward_cpu --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step25::describe(), argc, argv); }
