/// \file step14_block_order/main.cpp
/// \brief The step's program: `build/bin/step14_block_order --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step14::describe(), argc, argv); }
