/// \file step12_register_budget/main.cpp
/// \brief The step's program: `build/bin/step12_register_budget --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step12::describe(), argc, argv); }
