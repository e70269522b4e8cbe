/// \file step.hpp
/// \brief How a step describes itself to the program driver, the tour and the benchmarks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/problem.hpp"

namespace common {

/// A step's forward pass: `stepNN::attention_forward`.
using ForwardFn = std::function<Result(const Problem&, const Options&)>;

/// Everything the driver needs to know about a step.
struct StepInfo {
  std::string name;                 ///< directory name, e.g. "step02_tiled_cpu"
  std::string title;                ///< one line: what the step adds
  ForwardFn forward;                ///< the forward pass
  std::vector<int64_t> head_dims;   ///< supported d (empty = any d >= 1)
  bool needs_gpu = false;           ///< runs on a CUDA GPU
  bool uses_sram_budget = false;    ///< takes `--sram-floats M`
  int64_t default_sram_floats = 0;  ///< M used when `--sram-floats` is not given
  bool has_trace = false;           ///< prints a step-by-step trace for `--trace`
};

}  // namespace common
