/// \file step24_dynamic_scheduler/main.cpp
/// \brief The step's program: `build/bin/step24_dynamic_scheduler --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step24::describe(), argc, argv); }
