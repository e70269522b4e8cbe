/// \file step07_fa2_register_tiles/main.cpp
/// \brief The step's program: `build/bin/step07_fa2_register_tiles --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step07::describe(), argc, argv); }
