/// \file step05_cuda_registers/main.cpp
/// \brief The step's program: `build/bin/step05_cuda_registers --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step05::describe(), argc, argv); }
