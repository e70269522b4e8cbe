/// \file host_arrays.cpp
/// \brief NumPy arrays in and out of the steps.
#include "host_arrays.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace flash_python {

std::string type_name(py::handle object) {
  const py::handle type = py::type::of(object);
  const std::string module = py::str(type.attr("__module__"));
  const std::string name = py::str(type.attr("__qualname__"));
  return module == "builtins" ? name : module + "." + name;
}

float scale_or_default(std::optional<double> scale, int64_t head_dim) {
  if (!scale) return common::default_scale(head_dim);
  if (!std::isfinite(*scale) || std::abs(*scale) > std::numeric_limits<float>::max()) {
    throw common::InputError("scale must be a finite number (got " + std::to_string(*scale) + ")");
  }
  return static_cast<float>(*scale);
}

std::vector<int64_t> dims_of(const py::array& array) {
  return std::vector<int64_t>(array.shape(), array.shape() + array.ndim());
}

py::array float32_array(py::handle object, const std::string& name) {
  if (!py::isinstance<py::array>(object)) {
    throw py::type_error(name + " must be a numpy.ndarray of float32, shaped [B, H, N, d]; got " + type_name(object));
  }
  // Any strides: array_t's check compares the dtype only (equivalent to float32).
  if (!py::array_t<float, py::array::forcecast>::check_(object)) {
    throw py::type_error(name + " must be float32; got " + std::string(py::str(object.attr("dtype"))) +
                         " (convert it with .astype(numpy.float32))");
  }
  return py::reinterpret_borrow<py::array>(object);
}

namespace {

// A float32 array's elements in C order: one copy, whatever its strides.
std::vector<float> copy_elements(const py::array& array) {
  const auto c_order = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
  std::vector<float> data(size_t(c_order.size()));
  if (!data.empty()) std::memcpy(data.data(), c_order.data(), data.size() * sizeof(float));
  return data;
}

}  // namespace

common::Problem problem_from_arrays(py::handle q, py::handle k, py::handle v, bool causal,
                                    std::optional<double> scale) {
  const py::array qa = float32_array(q, "q"), ka = float32_array(k, "k"), va = float32_array(v, "v");
  common::Problem problem;
  problem.shape = common::shape_of(dims_of(qa), dims_of(ka), dims_of(va));  // before anything is copied
  const common::Shape& s = problem.shape;
  problem.causal = causal;
  problem.scale = scale_or_default(scale, s.head_dim);
  problem.q = copy_elements(qa);
  problem.k = copy_elements(ka);
  problem.v = copy_elements(va);
  common::require_finite(problem.q, s, s.seq_q, "q");
  common::require_finite(problem.k, s, s.seq_kv, "k");
  common::require_finite(problem.v, s, s.seq_kv, "v");
  return problem;
}

std::vector<py::ssize_t> o_dims(const common::Shape& s) { return {s.batch, s.heads, s.seq_q, s.head_dim}; }

std::vector<py::ssize_t> lse_dims(const common::Shape& s) { return {s.batch, s.heads, s.seq_q}; }

common::Result result_from_arrays(py::handle o, py::handle lse, const common::Shape& shape) {
  const py::array oa = float32_array(o, "o"), la = float32_array(lse, "lse");
  const auto expect = [](const py::array& a, const std::vector<py::ssize_t>& dims, const char* name) {
    if (std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()) != dims) {
      std::string text;
      for (py::ssize_t d : dims) text += (text.empty() ? "" : ", ") + std::to_string(d);
      throw common::InputError(std::string(name) + " must have shape [" + text + "] for these inputs");
    }
  };
  expect(oa, o_dims(shape), "o");
  expect(la, lse_dims(shape), "lse");
  common::Result result;
  result.o = copy_elements(oa);
  result.lse = copy_elements(la);
  return result;
}

}  // namespace flash_python
