/// \file testing.hpp
/// \brief doctest helpers shared by every step's tests: the conformance suite and the fixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/fixtures.hpp"
#include "common/step.hpp"

namespace common::testing {

/// The seed for this test run's random inputs: FLASH_TEST_SEED if set, else a
/// fresh one from std::random_device. Printed with every failure, so a failing
/// run can be repeated exactly.
uint64_t run_seed();

/// Runs `step`'s program (common::run_program) with the command-line `args`
/// (the program name is added) and returns its exit code; what it prints on
/// stdout and stderr is captured into `out` and `err` where given.
int run_program_captured(const StepInfo& step, const std::vector<std::string>& args, std::string* out = nullptr,
                         std::string* err = nullptr);

/// Runs `step` on every conformance case whose d it supports and whose lengths
/// are at most `max_seq` (0 = all): fresh random inputs per case, the result
/// poisoned before the run, O and L checked against the fp64 reference under the
/// tolerance rule for `options.precision`. Every case is a doctest SUBCASE named after the case. With
/// `large_scores` false the |s| ~ 1e3 cases are left out (see step 2's tests).
void check_conformance(const StepInfo& step, int64_t max_seq = 0, const Options& options = {},
                       bool large_scores = true);

/// Runs `step` on one problem and CHECKs O and L under the tolerance rule.
void check_problem(const StepInfo& step, const Problem& problem, const Options& options = {});

/// Runs `step` in one session (a GPU step uploads once): one run, checked
/// under the tolerance rule, then `timed` timed runs. CHECKs that each timed run
/// reports a positive time and that O and L afterwards are bitwise those of the
/// first run (no atomics, a fixed order of every sum: a difference is a race).
/// `options.precision`: the precision to run and judge in (all the helpers below too).
void check_session(const StepInfo& step, const Problem& problem, int timed = 3, const Options& options = {});

/// The Torch/Numba/CUDA notebook's (N_kv, N_q) pairs at d = 128, causal and not, under the tolerance rule.
void check_seed004_shapes(const StepInfo& step, const Options& options = {});

/// Causal with N_q != N_kv across tile boundaries, for every d in `head_dims`:
/// lengths just off multiples of 32 and 64 put the diagonal, the skipped tiles
/// and the tails in every place.
void check_causal_tails(const StepInfo& step, const std::vector<int64_t>& head_dims, const Options& options = {});

/// B·H = 70000 heads of N = 3 × 5 at the step's smallest d (32 for most), causal and not: more heads than a
/// grid's y or z dimension holds (65535).
void check_many_heads(const StepInfo& step, const Options& options = {});

/// Bad input is refused with a one-line InputError: a d the step was not
/// compiled for (`unsupported_d`), tensors of the wrong length, a NaN input.
void check_bad_input(const StepInfo& step, int64_t unsupported_d, const Options& options = {});

/// The value named `name` in `result.extra` (the resource report), or −1.
double extra(const Result& result, const std::string& name);
/// The value named `name` among `figures` (e.g. Gradients::extra, the backward's resource report), or −1.
double extra(const Figures& figures, const std::string& name);

/// Runs `step` once at d = `head_dim` and CHECKs its resource report: no local
/// (spill) bytes, at least one block per SM, a register count reported.
void check_no_spills(const StepInfo& step, int64_t head_dim, const Options& options = {});

/// Runs `step` on a named fixture (with its budget M where the step uses one)
/// and CHECKs O against the fixture's known values as well as the reference.
void check_fixture(const StepInfo& step, const Fixture& fixture);

/// check_fixture on each named fixture: the hand-worked example, the 2×2 case
/// with M = 9, the FlashAttention-2 notebook's N = 16, d = 8.
void check_named_fixtures(const StepInfo& step);

/// Runs `step` at every d it supports (N_q = 300, N_kv = 200, causal at d = 64)
/// under the tolerance rule, and CHECKs that its resource report asks for more
/// than the 48 KB of shared memory a block gets without opting in exactly when
/// d >= `from_d`.
void check_smem_over_48kb(const StepInfo& step, int64_t from_d);

/// Runs `step`'s forward, then its backward on the forward's O and L with a
/// random dO (fresh from the run's seed, or `d_o` when given), gradients
/// poisoned first, and CHECKs dQ, dK and dV against the fp64 reference under
/// the gradient tolerance rule (common/reference_backward.hpp).
void check_gradient_problem(const StepInfo& step, const Problem& problem, const Options& options = {},
                            const std::vector<float>* d_o = nullptr);

/// The gradient conformance suite: check_gradient_problem on every case of the
/// forward's conformance suite whose d the step supports and whose lengths are at
/// most `max_seq` (0 = all), fresh inputs and dO per case. With `large_scores`
/// false the |s| ~ 1e3 cases are left out.
void check_gradient_conformance(const StepInfo& step, int64_t max_seq = 0, const Options& options = {},
                                bool large_scores = true);

/// The backward in one session: one run checked under the gradient rule, then
/// `timed` timed runs; CHECKs that each reports a positive time and, when
/// `bitwise`, that the gradients afterwards are bitwise those of the first run.
void check_backward_session(const StepInfo& step, const Problem& problem, int timed = 3, const Options& options = {},
                            bool bitwise = true);

/// Bad backward input is refused with a one-line InputError naming the tensor:
/// dO, O or L of the wrong length, a NaN in dO, an infinity in L; at head dim `d`.
void check_backward_bad_input(const StepInfo& step, int64_t d, const Options& options = {});

}  // namespace common::testing
