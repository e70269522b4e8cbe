/// \file step18_issue_order/main.cpp
/// \brief The step's program: `build/bin/step18_issue_order --help` lists the options.
#include "attention.hpp"
#include "common/driver.hpp"

/// Runs the shared program driver on this step.
int main(int argc, char** argv) { return common::run_program(step18::describe(), argc, argv); }
