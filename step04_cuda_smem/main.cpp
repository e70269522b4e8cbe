/// \file step04_cuda_smem/main.cpp
/// \brief The step's program: `build/bin/step04_cuda_smem --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step04::describe(), argc, argv); }
