/// \file step22_producer_loads/main.cpp
/// \brief The step's program: `build/bin/step22_producer_loads --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step22::describe(), argc, argv); }
