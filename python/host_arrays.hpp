/// \file host_arrays.hpp
/// \brief NumPy arrays in and out: the Problem a step runs on, and O and L handed back.
///
/// A step reads its inputs from a common::Problem, which holds copies of Q, K
/// and V, and returns std::vectors. So NumPy arrays of any strides are taken
/// (copied, as every step copies its inputs anyway), but only float32 ones:
/// another dtype is refused rather than converted, so that no precision is lost
/// or invented out of sight. Results become NumPy arrays without a copy.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/backward.hpp"
#include "common/problem.hpp"
#include "common/step.hpp"

namespace flash_python {

namespace py = pybind11;

/// "float32", "bfloat16" or "float16": the dtype (PyTorch's and NumPy's name)
/// of a tensor whose elements are of `precision`.
inline std::string dtype_name(common::Precision precision) {
  switch (precision) {
    case common::Precision::bf16: return "bfloat16";
    case common::Precision::fp16: return "float16";
    case common::Precision::fp32: break;
  }
  return "float32";
}

/// The dtypes of the CUDA tensors `step` takes through DLPack, one per precision
/// it computes in, its own first: ["float32"], or ["bfloat16", "float16"]. NumPy
/// arrays are float32 for every step (a step rounds them on upload).
inline std::vector<std::string> step_dtypes(const common::StepInfo& step) {
  std::vector<std::string> dtypes;
  for (common::Precision p : step.precisions) dtypes.push_back(dtype_name(p));
  return dtypes;
}

/// "torch.Tensor", "numpy.ndarray", "list": the type of `object`, for messages.
std::string type_name(py::handle object);

/// The softmax scale a call asked for: 1/sqrt(d) when None; InputError when it
/// is not a finite float32 number.
float scale_or_default(std::optional<double> scale, int64_t head_dim);

// The keyword arguments, as Python gave them. pybind11's own conversion would
// answer a wrong type with its multi-line "incompatible function arguments";
// these answer with one line naming the argument and what it takes.

/// `causal`: True or False (Python's or NumPy's bool); TypeError otherwise.
bool causal_arg(py::handle value);

/// `name`: True or False (Python's or NumPy's bool), e.g. `deterministic`; TypeError otherwise.
bool bool_arg(py::handle value, const char* name);

/// `scale`: None or a real number (int, float, a NumPy number), not a bool;
/// TypeError otherwise. A number beyond float64 (a huge int) becomes infinity,
/// which scale_or_default refuses.
std::optional<double> scale_arg(py::handle value);

/// `sram_floats`: an int in [0, 2^30] (0: the step's default), the programs'
/// range for --sram-floats; TypeError for another type, InputError out of range.
int64_t sram_floats_arg(py::handle value);

/// `dtype`: None or a str ('fp32', 'bf16', 'fp16'); TypeError otherwise.
std::optional<std::string> dtype_arg(py::handle value);

/// The dimensions of `array` as common::shape_of reads them.
std::vector<int64_t> dims_of(const py::array& array);

/// `object` as a float32 NumPy array: TypeError naming `name` for anything else
/// (another type, another dtype).
py::array float32_array(py::handle object, const std::string& name);

/// The Problem of q, k, v (float32 NumPy arrays [B, H, N, d]): sizes checked
/// (common::shape_of), then `before_copy(shape)` (a memory check) before
/// anything is copied, then the copies checked for NaN and infinity. The
/// messages name the arguments: "q", "k", "v". An array of any strides is
/// copied once, straight into the Problem (no contiguous copy by NumPy first).
common::Problem problem_from_arrays(py::handle q, py::handle k, py::handle v, bool causal, std::optional<double> scale,
                                    const std::function<void(const common::Shape&)>& before_copy = {});

/// O and L of `shape` given as float32 NumPy arrays, as a common::Result, for
/// the tolerance rule (check_result).
common::Result result_from_arrays(py::handle o, py::handle lse, const common::Shape& shape);

/// dO of `shape` given as a float32 NumPy array: its shape checked, copied, then
/// checked for NaN and infinity; the messages call it "d_o".
std::vector<float> d_o_from_array(py::handle d_o, const common::Shape& shape);

/// O, L and dO of `shape` given as float32 NumPy arrays (any strides: copied),
/// as the backward pass takes them: shapes checked before anything is copied,
/// then the copies checked for NaN and infinity. The messages name the
/// arguments: "o", "lse", "d_o".
common::BackwardInputs backward_inputs_from_arrays(py::handle o, py::handle lse, py::handle d_o,
                                                   const common::Shape& shape);

/// dQ, dK and dV of `shape` given as float32 NumPy arrays, as common::Gradients,
/// for the gradient rule (check_gradients).
common::Gradients gradients_from_arrays(py::handle dq, py::handle dk, py::handle dv, const common::Shape& shape);

/// `data` as a NumPy array of `dims`, without a copy: the array owns the vector.
template <class T>
py::array_t<T> to_array(std::vector<T>&& data, const std::vector<py::ssize_t>& dims) {
  auto owned = std::make_unique<std::vector<T>>(std::move(data));
  T* values = owned->data();
  py::capsule owner(owned.get(), [](void* p) { delete static_cast<std::vector<T>*>(p); });
  owned.release();  // the capsule frees it from now on
  return py::array_t<T>(dims, values, owner);
}

/// (B, H, N_q, d): the dimensions of O.
std::vector<py::ssize_t> o_dims(const common::Shape& s);

/// (B, H, N_q): the dimensions of L.
std::vector<py::ssize_t> lse_dims(const common::Shape& s);

/// (B, H, N_kv, d): the dimensions of K, V, dK and dV.
std::vector<py::ssize_t> kv_dims(const common::Shape& s);

}  // namespace flash_python
