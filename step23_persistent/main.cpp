/// \file step23_persistent/main.cpp
/// \brief The step's program: `build/bin/step23_persistent --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step23::describe(), argc, argv); }
