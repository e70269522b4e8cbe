/// \file test_main.cpp
/// \brief doctest's main for the CPU test executables.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
