/// \file step21_tiles_by_head_dim/main.cpp
/// \brief The step's program: `build/bin/step21_tiles_by_head_dim --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step21::describe(), argc, argv); }
