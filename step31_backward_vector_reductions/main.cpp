/// \file step31_backward_vector_reductions/main.cpp
/// \brief The step's program: `build/bin/step31_backward_vector_reductions --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step31::describe(), argc, argv); }
