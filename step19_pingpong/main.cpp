/// \file step19_pingpong/main.cpp
/// \brief The step's program: `build/bin/step19_pingpong --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step19::describe(), argc, argv); }
