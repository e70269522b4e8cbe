/// \file step02_tiled_cpu/main.cpp
/// \brief The step's program: `build/bin/step02_tiled_cpu --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step02::describe(), argc, argv); }
