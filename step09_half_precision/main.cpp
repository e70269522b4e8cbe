/// \file step09_half_precision/main.cpp
/// \brief The step's program: `build/bin/step09_half_precision --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step09::describe(), argc, argv); }
