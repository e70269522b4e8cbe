/// \file step06_fa2/main.cpp
/// \brief The step's program: `build/bin/step06_fa2 --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step06::describe(), argc, argv); }
