/// \file step01_naive/main.cpp
/// \brief The step's program: `build/bin/step01_naive --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step01::describe(), argc, argv); }
