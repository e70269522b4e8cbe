/// \file step28_backward_tiled_gradients/main.cpp
/// \brief The step's program: `build/bin/step28_backward_tiled_gradients --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step28::describe(), argc, argv); }
