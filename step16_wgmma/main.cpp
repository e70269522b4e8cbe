/// \file step16_wgmma/main.cpp
/// \brief The step's program: `build/bin/step16_wgmma --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step16::describe(), argc, argv); }
