/// \file step27_backward_tiled_scores/main.cpp
/// \brief The step's program: `build/bin/step27_backward_tiled_scores --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step27::describe(), argc, argv); }
