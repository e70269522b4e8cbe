/// \file step03_simulated_threads/main.cpp
/// \brief The step's program: `build/bin/step03_simulated_threads --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step03::describe(), argc, argv); }
