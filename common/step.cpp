/// \file step.cpp
/// \brief Sessions for steps that run on the CPU.
#include "common/step.hpp"

#include <chrono>

namespace common {

namespace {

/// A CPU step's session: every run calls the forward pass on the host arrays.
class HostSession : public Session {
 public:
  HostSession(const StepInfo& step, const Problem& problem, const Options& options)
      : forward_(step.forward), problem_(problem), options_(options) {}
  void run() override {
    result_ = forward_(problem_, options_);
    options_.trace = nullptr;  // the trace is printed by the first run only
  }
  double timed_run_ms() override {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  Result result() override { return result_; }
  bool kernel_only() const override { return false; }

 private:
  ForwardFn forward_;
  const Problem& problem_;
  Options options_;
  Result result_;
};

/// A CPU backward step's session: every run calls the backward pass on the host arrays.
class HostBackwardSession : public BackwardSession {
 public:
  HostBackwardSession(const StepInfo& step, const Problem& problem, const BackwardInputs& inputs,
                      const Options& options)
      : backward_(step.backward), problem_(problem), inputs_(inputs), options_(options) {}
  void run() override {
    gradients_ = backward_(problem_, inputs_, options_);
    options_.trace = nullptr;  // the trace is printed by the first run only
  }
  double timed_run_ms() override {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  Gradients gradients() override { return gradients_; }
  bool kernel_only() const override { return false; }

 private:
  BackwardFn backward_;
  const Problem& problem_;
  const BackwardInputs& inputs_;
  Options options_;
  Gradients gradients_;
};

}  // namespace

void require_precision(const StepInfo& step, Precision precision) {
  for (Precision p : step.precisions) {
    if (p == precision) return;
  }
  throw InputError(step.name + " computes in " + names(step.precisions) + (step.precisions.size() == 1 ? " only" : "") +
                   "; --dtype " + name(precision) + " is not one of its precisions");
}

void require_dq_order(const std::string& name, const GpuKernel& kernel, bool deterministic) {
  if (deterministic && !kernel.deterministic_dq) {
    throw InputError(name + " sums dQ by atomicAdd only; it has no deterministic mode");
  }
}

std::unique_ptr<Session> open_session(const StepInfo& step, const Problem& problem, const Options& options) {
  require_precision(step, options.precision);
  if (step.open) return step.open(problem, options);
  return std::make_unique<HostSession>(step, problem, options);
}

std::unique_ptr<BackwardSession> open_backward_session(const StepInfo& step, const Problem& problem,
                                                       const BackwardInputs& inputs, const Options& options) {
  if (!step.backward) throw InputError(step.name + " has no backward pass");
  require_precision(step, options.precision);
  validate(problem, inputs);
  if (step.open_backward) return step.open_backward(problem, inputs, options);
  return std::make_unique<HostBackwardSession>(step, problem, inputs, options);
}

}  // namespace common
