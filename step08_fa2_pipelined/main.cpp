/// \file step08_fa2_pipelined/main.cpp
/// \brief The step's program: `build/bin/step08_fa2_pipelined --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step08::describe(), argc, argv); }
