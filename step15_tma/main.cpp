/// \file step15_tma/main.cpp
/// \brief The step's program: `build/bin/step15_tma --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step15::describe(), argc, argv); }
